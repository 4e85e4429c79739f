# Workload generation and its communication volumes, one job per workload
# (points that differ only in their network share it). Both are guarded (common.smk):
# a failed workload is recorded in its status file and the other points go on.


rule workload:
    input:
        unpack(workload_inputs),
    output:
        workload=f"{RESULTS}/workloads/{{workload}}/workload.txt",
        status=f"{RESULTS}/workloads/{{workload}}/workload.status",
    params:
        args=workload_args,
        profile=workload_profile_args,
        attempt=attempt(f"{RESULTS}/workloads/{{workload}}/workload.status"),
    log:
        f"{RESULTS}/logs/workload/{{workload}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/workload/{{workload}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("generate {params.args} {params.profile} -o {output.workload}")


rule volumes:
    input:
        workload=f"{RESULTS}/workloads/{{workload}}/workload.txt",
        after=f"{RESULTS}/workloads/{{workload}}/workload.status",
    output:
        volumes=f"{RESULTS}/workloads/{{workload}}/volumes.csv",
        status=f"{RESULTS}/workloads/{{workload}}/volumes.status",
    params:
        attempt=attempt(f"{RESULTS}/workloads/{{workload}}/volumes.status"),
    log:
        f"{RESULTS}/logs/volumes/{{workload}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/volumes/{{workload}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("volumes {input.workload} --format csv -o {output.volumes}")
