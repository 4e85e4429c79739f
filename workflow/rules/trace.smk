# reference: measured — real megatron-core traced on gloo CPU processes, one job per
# distinct model family, TP, PP and SP of the sweep (scaled down), and its comparison with
# the megatron schedule for the same dimensions. Needs the megatron extra.


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


rule trace_check:
    # The sweep's verdict on the Megatron schedule, one row per trace.
    input:
        [f"{RESULTS}/traces/{key}.compare.csv" for key in sorted(TRACES)],
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
