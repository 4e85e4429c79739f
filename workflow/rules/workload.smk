# Workload generation (`commsweep generate`) and its communication volumes, one job per
# workload (points that differ only in their network share it). Both are guarded
# (common.smk): a failed workload is recorded in its status file and the other points go on.


rule generate:
    input:
        unpack(generate_inputs),
    output:
        workload=L.workload(),
        status=L.workload_status("workload"),
    params:
        provenance=generate_provenance,
        args=generate_args,
        profile=generate_profile_args,
        attempt=attempt(L.workload_status("workload")),
    log:
        L.log("generate", "{workload}"),
    benchmark:
        L.benchmark("generate", "{workload}")
    resources:
        mem_mb=job_memory_mb,
        runtime=5,
    threads: 1
    shell:
        guarded("generate {params.args} {params.profile} -o {output.workload}")


rule volumes:
    input:
        workload=L.workload(),
        after=L.workload_status("workload"),
    output:
        volumes=L.volumes(),
        status=L.workload_status("volumes"),
    params:
        provenance=provenance(),
        attempt=attempt(L.workload_status("volumes")),
    log:
        L.log("volumes", "{workload}"),
    benchmark:
        L.benchmark("volumes", "{workload}")
    resources:
        mem_mb=job_memory_mb,
        runtime=5,
    threads: 1
    shell:
        guarded("volumes {input.workload} --format csv -o {output.volumes}")
