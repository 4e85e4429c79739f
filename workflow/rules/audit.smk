# The audit of every point against Megatron's schedule, the sweep-wide comparison of the
# generators, and their figures.


rule audit:
    input:
        unpack(audit_inputs),
    output:
        audit=f"{RESULTS}/points/{{point}}/audit.csv",
        status=f"{RESULTS}/points/{{point}}/audit.status",
    params:
        args=audit_args,
        attempt=attempt(f"{RESULTS}/points/{{point}}/audit.status"),
    log:
        f"{RESULTS}/logs/audit/{{point}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/audit/{{point}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("audit {input.workload} {params.args} --format csv -o {output.audit}")


rule compare:
    input:
        sweep=f"{RESULTS}/sweep.csv",
        summary=f"{RESULTS}/summary.csv",
        audits=all_audits,
    output:
        findings=report(
            f"{RESULTS}/findings.csv",
            caption="../report/findings.rst",
            category="Audit against Megatron",
        ),
        comparison=report(
            f"{RESULTS}/comparison.csv",
            caption="../report/comparison.rst",
            category="Audit against Megatron",
        ),
        verdicts=report(
            f"{RESULTS}/verdicts.csv",
            caption="../report/verdicts.rst",
            category="Audit against Megatron",
        ),
        by_kind=report(
            f"{RESULTS}/findings_by_kind.csv",
            caption="../report/findings_by_kind.rst",
            category="Audit against Megatron",
        ),
    log:
        f"{RESULTS}/logs/compare.log",
    benchmark:
        f"{RESULTS}/benchmarks/compare.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep compare --sweep {input.sweep} --summary {input.summary} --results {RESULTS}"
        " --findings {output.findings} --comparison {output.comparison} --verdicts {output.verdicts}"
        " --by-kind {output.by_kind}"
        " > {log} 2>&1"


rule plot_tp_bytes_by_phase:
    input:
        f"{RESULTS}/summary.csv",
    output:
        report(
            f"{RESULTS}/plots/tp_bytes_by_phase.png",
            caption="../report/tp_bytes_by_phase.rst",
            category="Communication volumes",
        ),
    log:
        f"{RESULTS}/logs/plot_tp_bytes_by_phase.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_tp_bytes_by_phase.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot tp-bytes-by-phase {input} -o {output} > {log} 2>&1"


rule plot_exposed_by_group:
    input:
        f"{RESULTS}/summary.csv",
    output:
        report(
            f"{RESULTS}/plots/exposed_by_group.png",
            caption="../report/exposed_by_group.rst",
            category="Simulated times",
        ),
    log:
        f"{RESULTS}/logs/plot_exposed_by_group.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_exposed_by_group.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot exposed-by-group {input} -o {output} > {log} 2>&1"


rule plot_timeline:
    input:
        unpack(timeline_inputs),
    output:
        report(
            f"{RESULTS}/plots/timeline.png",
            caption="../report/timeline.rst",
            category="Simulated times",
        ),
    params:
        args=timeline_args,
    log:
        f"{RESULTS}/logs/plot_timeline.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_timeline.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep timeline {input.workload} {input.simulation} {params.args} --audit {input.audit}"
        " -o {output} > {log} 2>&1"


rule plot_audit_by_kind:
    input:
        # per point and kind, a few rows per point (findings.csv can hold millions)
        f"{RESULTS}/findings_by_kind.csv",
    output:
        report(
            f"{RESULTS}/plots/audit_by_kind.png",
            caption="../report/audit_by_kind.rst",
            category="Audit against Megatron",
        ),
    log:
        f"{RESULTS}/logs/plot_audit_by_kind.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_audit_by_kind.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot audit-by-kind {input} -o {output} > {log} 2>&1"
