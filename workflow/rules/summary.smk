# The sweep table, the summary of every point, its figure, and the check that ends a run.


rule sweep_table:
    output:
        L.sweep_table(),
    params:
        # The table itself: a changed sweep reruns this rule and everything after it.
        table=sweep.table_csv(POINTS, INVALID),
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
    localrule: True
    script:
        "../scripts/write_text.py"


rule run_record:
    # What made this run's results: commsweep's version, the config and the external
    # inputs' checksums (commsweep.orchestration.provenance). Rewritten when any of them changes.
    output:
        report(L.run_record(), caption="../report/run_record.rst", category="Run"),
    params:
        # (a function: Snakemake would read {profile} in aiob.file as a wildcard)
        text=lambda wildcards: RUN.record(),
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


rule summarize:
    # Reads each point's files as the batch manifests list them: their lists are too long
    # for a shell command, so the command runs in a script (commsweep.orchestration.pipeline.run_rule).
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        after=[],
        **point_inputs("status", "volumes", "times"),
    output:
        summary=L.summary(),
        status=L.step_status("summarize"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("summarize")),
        run=RUN.id,
        command=guarded_argv("summarize", "--sweep", "<input.sweep>", "--status", "<batches.status>",
                             "--volumes", "<batches.volumes>", "--times", "<batches.times>", "--run", "<params.run>",
                             "-o", "<output.summary>"),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("summarize"),
    benchmark:
        L.benchmark("summarize")
    resources:
        **steps.resources("summarize"),
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
        ignored=lambda wildcards: IGNORED,
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
