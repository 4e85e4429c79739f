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
    conda:
        COMMSWEEP_ENV
    log:
        L.log("compare"),
    benchmark:
        L.benchmark("compare")
    resources:
        **steps.resources("compare"),
    threads: 1
    script:
        "../scripts/commsweep.py"
