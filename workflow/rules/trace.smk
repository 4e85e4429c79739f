# reference: measured — real megatron-core traced on gloo CPU processes, one job per
# distinct model family, TP, PP and SP of the sweep (scaled down), and its comparison with
# the megatron schedule for the same dimensions. Needs the megatron extra. With
# megatron_core listing releases, one job per release and key ({trace}: <release>/<key>),
# and the releases side by side (trace_versions).


rule trace:
    input:
        after=[],
    output:
        trace=L.trace(),
        compare=L.trace_compare(),
        status=L.trace_status(),
    params:
        provenance=provenance(),
        args=trace_args,
        attempt=attempt(L.trace_status()),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("trace", "{trace}"),
    benchmark:
        L.benchmark("trace", "{trace}")
    threads: trace_processes
    resources:
        # about 0.4 GB per process (torch and megatron), one process per rank
        mem_mb=lambda wildcards, threads: 500 * trace_processes(wildcards) + 500,
        runtime=20,
    shell:
        guarded("trace {params.args} --format csv -o {output.trace} --compare {output.compare}")


rule trace_versions:
    # The releases side by side: collectives per layer and phase, and their differences.
    input:
        traces=all_traces,
        after=all_trace_statuses,
    output:
        table=report(L.trace_versions(), caption="../report/trace_versions.rst", category="Megatron schedule"),
        differences=L.trace_versions_differences(),
        status=L.step_status("trace_versions"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("trace_versions")),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("trace_versions"),
    benchmark:
        L.benchmark("trace_versions")
    resources:
        **steps.resources("trace_versions"),
    threads: 1
    shell:
        guarded("trace-versions {input.traces} -o {output.table} --differences {output.differences}")


rule trace_check:
    # The sweep's verdict on the Megatron schedule, one row per trace.
    input:
        compare=all_trace_comparisons,
        after=all_trace_statuses,
    output:
        table=report(L.trace_check(), caption="../report/trace_check.rst", category="Megatron schedule"),
        status=L.step_status("trace_check"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("trace_check")),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("trace_check"),
    benchmark:
        L.benchmark("trace_check")
    resources:
        **steps.resources("trace_check"),
    threads: 1
    shell:
        guarded("trace-check {input.compare} -o {output.table}")
