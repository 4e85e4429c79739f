# reference: measured — real megatron-core traced on gloo CPU processes, one job per
# distinct model family, TP, PP and SP of the sweep (scaled down), and its comparison with
# the megatron schedule for the same dimensions. Needs the megatron extra. With
# megatron_core listing releases, one job per release and key ({trace}: <release>/<key>).


rule trace:
    output:
        trace=f"{RESULTS}/traces/{{trace}}.csv",
        compare=f"{RESULTS}/traces/{{trace}}.compare.csv",
    params:
        args=trace_args,
    log:
        f"{RESULTS}/logs/trace/{{trace}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/trace/{{trace}}.tsv"
    threads: trace_processes
    resources:
        # about 0.4 GB per process (torch and megatron), one process per rank
        mem_mb=lambda wildcards, threads: 500 * trace_processes(wildcards) + 500,
        runtime=20,
    shell:
        "commsweep trace {params.args} --format csv -o {output.trace} --compare {output.compare} > {log} 2>&1"


rule trace_versions:
    # The releases side by side: collectives per layer and phase, and their differences.
    input:
        [f"{RESULTS}/traces/{name}.csv" for name in trace_names() if RELEASES],
    output:
        table=report(f"{RESULTS}/trace_versions.csv", caption="../report/trace_versions.rst", category="Megatron schedule"),
        differences=f"{RESULTS}/trace_versions.txt",
    log:
        f"{RESULTS}/logs/trace_versions.log",
    benchmark:
        f"{RESULTS}/benchmarks/trace_versions.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep trace-versions {input} -o {output.table} --differences {output.differences} > {log} 2>&1"


rule trace_check:
    # The sweep's verdict on the Megatron schedule, one row per trace.
    input:
        [f"{RESULTS}/traces/{name}.compare.csv" for name in trace_names()],
    output:
        report(f"{RESULTS}/trace_check.csv", caption="../report/trace_check.rst", category="Megatron schedule"),
    log:
        f"{RESULTS}/logs/trace_check.log",
    benchmark:
        f"{RESULTS}/benchmarks/trace_check.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep trace-check {input} -o {output} > {log} 2>&1"
