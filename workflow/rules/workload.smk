# Workload generation and its communication volumes, one job per workload
# (points that differ only in their network share it).


rule workload:
    input:
        unpack(workload_inputs),
    output:
        f"{RESULTS}/workloads/{{workload}}/workload.txt",
    params:
        args=workload_args,
    log:
        f"{RESULTS}/logs/workload/{{workload}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/workload/{{workload}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep generate {params.args} -o {output} > {log} 2>&1"


rule volumes:
    input:
        f"{RESULTS}/workloads/{{workload}}/workload.txt",
    output:
        f"{RESULTS}/workloads/{{workload}}/volumes.csv",
    log:
        f"{RESULTS}/logs/volumes/{{workload}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/volumes/{{workload}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep volumes {input} --format csv -o {output} > {log} 2>&1"
