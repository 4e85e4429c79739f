# The sweep-wide comparison of the generators (from every point's audit, made by the
# batches), and their figures.


rule compare:
    # Reads each point's audit, as the batch manifests list them (a script: see rule summarize).
    input:
        sweep=L.sweep_table(),
        summary=L.summary(),
        batches=all_batches,
        after=L.step_status("summarize"),
        **point_inputs("audits"),
    output:
        findings=report(L.findings(), caption="../report/findings.rst", category="Audit against Megatron"),
        comparison=report(L.comparison(), caption="../report/comparison.rst", category="Audit against Megatron"),
        verdicts=report(L.verdicts(), caption="../report/verdicts.rst", category="Audit against Megatron"),
        by_kind=report(L.findings_by_kind(), caption="../report/findings_by_kind.rst", category="Audit against Megatron"),
        status=L.step_status("compare"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("compare")),
        command=guarded_argv("compare", "--sweep", "<input.sweep>", "--summary", "<input.summary>",
                             "--audits", "<batches.audits>", "--findings", "<output.findings>",
                             "--comparison", "<output.comparison>", "--verdicts", "<output.verdicts>",
                             "--by-kind", "<output.by_kind>"),
    log:
        L.log("compare"),
    benchmark:
        L.benchmark("compare")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    script:
        "../scripts/commsweep.py"


rule plot_tp_bytes_by_phase:
    input:
        summary=L.summary(),
        after=L.step_status("summarize"),
    output:
        plot=report(L.plot("tp_bytes_by_phase"), caption="../report/tp_bytes_by_phase.rst",
                    category="Communication volumes"),
        status=L.step_status("plot_tp_bytes_by_phase"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_tp_bytes_by_phase")),
    log:
        L.log("plot_tp_bytes_by_phase"),
    benchmark:
        L.benchmark("plot_tp_bytes_by_phase")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot tp-bytes-by-phase {input.summary} -o {output.plot}")


rule plot_exposed_by_group:
    input:
        summary=L.summary(),
        after=L.step_status("summarize"),
    output:
        plot=report(L.plot("exposed_by_group"), caption="../report/exposed_by_group.rst", category="Simulated times"),
        status=L.step_status("plot_exposed_by_group"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_exposed_by_group")),
    log:
        L.log("plot_exposed_by_group"),
    benchmark:
        L.benchmark("plot_exposed_by_group")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot exposed-by-group {input.summary} -o {output.plot}")


rule plot_timeline:
    input:
        # The point's batch: its files are made there (params.files).
        batch=timeline_batch,
        **timeline_inputs(),
    output:
        plot=report(L.plot("timeline"), caption="../report/timeline.rst", category="Simulated times"),
        status=L.step_status("plot_timeline"),
    params:
        provenance=provenance(),
        args=timeline_args,
        files=timeline_files,
        attempt=attempt(L.step_status("plot_timeline")),
    log:
        L.log("plot_timeline"),
    benchmark:
        L.benchmark("plot_timeline")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("timeline {params.files[workload]} {params.files[simulation]} {params.args}"
                " --audit {params.files[audit]} -o {output.plot}", after="{params.files[after]}")


rule plot_audit_by_kind:
    input:
        # per point and kind, a few rows per point (findings.csv can hold millions)
        by_kind=L.findings_by_kind(),
        after=L.step_status("compare"),
    output:
        plot=report(L.plot("audit_by_kind"), caption="../report/audit_by_kind.rst", category="Audit against Megatron"),
        status=L.step_status("plot_audit_by_kind"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_audit_by_kind")),
    log:
        L.log("plot_audit_by_kind"),
    benchmark:
        L.benchmark("plot_audit_by_kind")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot audit-by-kind {input.by_kind} -o {output.plot}")
