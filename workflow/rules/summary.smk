# The sweep table, the tables every figure reads (the summary, the comparison, the difference
# by cause), and the check that ends a run.

SWEEP_TABLE = sweep.table_csv(POINTS, INVALID)


rule sweep_table:
    output:
        L.sweep_table(),
    params:
        # The table itself (not recorded by Snakemake), and its digest: a changed sweep reruns
        # this rule and everything after it.
        table=pipeline.Unrecorded(SWEEP_TABLE),
        digest=pipeline.digest(SWEEP_TABLE),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("sweep_table"),
    benchmark:
        L.benchmark("sweep_table")
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    # After the batches (rule batch), before the run record: the tables read it, only the check
    # reads the record.
    priority: 1
    localrule: True
    script:
        "../scripts/write_text.py"


rule run_record:
    # What made this run's results: commsweep's version, the config and the external
    # inputs' checksums (commsweep.orchestration.provenance). Rewritten when any of them changes.
    output:
        report(L.run_record(), caption="../report/run_record.rst", category="Run"),
    params:
        # The record (a function: Snakemake would read {profile} in aiob.file as a wildcard;
        # not recorded by Snakemake) and its digest: a changed config or input reruns the rule.
        text=lambda wildcards: pipeline.Unrecorded(RUN.record()),
        digest=pipeline.digest(RUN.record()),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("run_record"),
    benchmark:
        L.benchmark("run_record")
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    localrule: True
    script:
        "../scripts/write_text.py"


rule tables:
    # The tables every figure reads, in one job and one process (a job costs Snakemake time to
    # start and book, a `script:` its Python start): the summary of every point, the comparison
    # of the generators (from every point's audit) and the answer's difference by cause. Each is
    # still a step of its own (commsweep.orchestration.steps: the steps of rule tables), run in
    # the table's order through `commsweep guard` with its own status and attempt: one that fails
    # leaves markers for its outputs only, the steps after it record that they did not run, the
    # others run. They read each point's files as the batch manifests list them: their lists are
    # too long for a shell command, so the commands run in a script (pipeline.run_rule).
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        **point_inputs("status", "volumes", "times", "audits", "causes"),
    output:
        summary=L.summary(),
        findings=report(L.findings(), caption="../report/findings.rst", category="Audit against Megatron"),
        comparison=report(L.comparison(), caption="../report/comparison.rst", category="Audit against Megatron"),
        verdicts=report(L.verdicts(), caption="../report/verdicts.rst", category="Audit against Megatron"),
        by_kind=report(L.findings_by_kind(), caption="../report/findings_by_kind.rst", category="Audit against Megatron"),
        causes=report(L.difference_by_cause(), caption="../report/difference_by_cause.rst", category="1. The answer"),
        **{f"{step}_status": L.step_status(step) for step in TABLES},
    params:
        provenance=provenance(),
        run=RUN.id,
        commands=table_commands(
            summarize=(["summarize", "--sweep", "<input.sweep>", "--status", "<batches.status>", "--volumes",
                        "<batches.volumes>", "--times", "<batches.times>", "--run", "<params.run>",
                        "-o", "<output.summary>"], ["summary"]),
            compare=(["compare", "--sweep", "<input.sweep>", "--summary", "<output.summary>", "--audits",
                      "<batches.audits>", "--findings", "<output.findings>", "--comparison", "<output.comparison>",
                      "--verdicts", "<output.verdicts>", "--by-kind", "<output.by_kind>"],
                     ["findings", "comparison", "verdicts", "by_kind"]),
            # Each batch's part (its AICB points' causes), put together in the sweep's order.
            difference_by_cause=(["causes", "--sweep", "<input.sweep>", "--parts", "<batches.causes>",
                                  "-o", "<output.causes>"], ["causes"]),
        ),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("tables"),
    benchmark:
        L.benchmark("tables")
    resources:
        **steps.resources("tables"),
    # In order: compare reads the summary.
    threads: 1
    script:
        "../scripts/commsweep.py"


rule check:
    # Last, whatever failed before it: the verdict of the run in status.txt (the failed
    # points and steps, and why), and the run fails if anything did. The next run retries
    # the failed jobs (common.smk, "one bad point (or step) never loses the others").
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        steps=step_statuses(),
        **point_inputs("status"),
        outputs=final_outputs(),
    output:
        verdict=report(L.verdict(), caption="../report/verdict.rst", category="Run"),
    params:
        run=RUN.id,
        # The outputs of points not in this sweep, listed in the verdict (and their digest).
        ignored=lambda wildcards: pipeline.Unrecorded(IGNORED),
        ignored_digest=pipeline.digest(IGNORED),
        command=["check", "--sweep", "<input.sweep>", "--status", "<batches.status>", "--steps", "<input.steps>",
                 "--run", "<params.run>", "--ignored", "<params.ignored>", "--exit-zero", "-o", "<output.verdict>"],
    conda:
        COMMSWEEP_ENV
    log:
        L.log("check"),
    benchmark:
        L.benchmark("check")
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    localrule: True
    script:
        "../scripts/commsweep.py"
