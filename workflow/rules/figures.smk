# Every figure of the sweep, drawn by one job: one Python process imports matplotlib and
# pandas once and reads the tables once, where a job per figure paid both each time (4-6 s a
# figure under load, most of a small sweep's time). Each figure is still a step of its own:
# its command runs through `commsweep guard` with its own status (results/steps/plot_*.status),
# inputs it comes after and attempt, so one figure that fails leaves markers for itself only
# and is retried on the next run. The figures of this sweep: figure_table() in common.smk.


rule figures:
    input:
        sweep=L.sweep_table(),
        summary=L.summary(),
        by_kind=L.findings_by_kind(),
        causes=L.difference_by_cause(),
        # The timeline point's batch, where that point's files are made (none without an audit).
        timeline=timeline_batch,
        after=[L.step_status(step) for step in ("summarize", "compare", "difference_by_cause")],
        # Without a shared filesystem, the timeline point's files (common.smk, point_inputs).
        **timeline_inputs(),
    output:
        **{name: report(L.plot(name), caption=f"../report/{fig.caption}.rst", category=fig.category)
           for name, fig in FIGURES.items()},
        **{f"{name}_status": L.step_status(f"plot_{name}") for name in FIGURES},
    params:
        provenance=provenance(),
        # Each figure's guarded command, its attempt among its words: a failed figure reruns the job.
        commands=figure_commands,
    conda:
        COMMSWEEP_ENV
    log:
        L.log("figures"),
    benchmark:
        L.benchmark("figures")
    resources:
        **steps.resources("figures"),
    # Drawn side by side in two processes forked after the imports (commsweep.orchestration.commands):
    # the steps after it wait for every figure.
    threads: 2
    script:
        "../scripts/commsweep.py"
