# The answer first: each AICB point's difference from its Megatron point by cause, its
# figures, and the landing page (results/answer.md; the report's front page includes
# results/answer.rst, see workflow/report/workflow.rst). Input functions: common.smk.


rule difference_by_cause:
    # Reads the batches' parts, as their manifests list them (a script: see rule summarize).
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        after=[],
        **point_inputs("causes"),
    output:
        table=report(L.difference_by_cause(), caption="../report/difference_by_cause.rst", category="1. The answer"),
        status=L.step_status("difference_by_cause"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("difference_by_cause")),
        # Each batch's part (its AICB points' causes), put together in the sweep's order.
        command=guarded_argv("causes", "--sweep", "<input.sweep>", "--parts", "<batches.causes>",
                             "-o", "<output.table>"),
    log:
        L.log("difference_by_cause"),
    benchmark:
        L.benchmark("difference_by_cause")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    script:
        "../scripts/commsweep.py"


rule plot_difference_by_cause:
    input:
        causes=L.difference_by_cause(),
        sweep=L.sweep_table(),
        after=L.step_status("difference_by_cause"),
    output:
        plot=report(L.plot("difference_by_cause"), caption="../report/difference_by_cause_plot.rst",
                    category="1. The answer"),
        status=L.step_status("plot_difference_by_cause"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_difference_by_cause")),
    log:
        L.log("plot_difference_by_cause"),
    benchmark:
        L.benchmark("plot_difference_by_cause")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot difference-by-cause {input.causes} --sweep {input.sweep} -o {output.plot}")


rule plot_exposed_tp_by_overlap:
    input:
        summary=L.summary(),
        after=L.step_status("summarize"),
    output:
        plot=report(L.plot("exposed_tp_by_overlap"), caption="../report/exposed_tp_by_overlap.rst",
                    category="1. The answer"),
        status=L.step_status("plot_exposed_tp_by_overlap"),
    params:
        # The ratio of the points of a sweep without a tp_overlap axis.
        tp_overlap=config["simulator"]["overlap"]["tp"],
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_exposed_tp_by_overlap")),
    log:
        L.log("plot_exposed_tp_by_overlap"),
    benchmark:
        L.benchmark("plot_exposed_tp_by_overlap")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot exposed-tp-by-overlap {input.summary} --tp-overlap {params.tp_overlap} -o {output.plot}")


rule answer:
    input:
        causes=L.difference_by_cause(),
        sweep=L.sweep_table(),
        figures=[L.plot("difference_by_cause"), L.plot("exposed_tp_by_overlap")],
        after=[L.step_status("difference_by_cause")],
    output:
        markdown=report(L.answer_page(), caption="../report/answer_page.rst", category="1. The answer"),
        # The same page with its figures embedded: the report's front page.
        rst=L.answer_rst(),
        status=L.step_status("answer"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("answer")),
    log:
        L.log("answer"),
    benchmark:
        L.benchmark("answer")
    resources:
        mem_mb=1024,
        runtime=5,
    threads: 1
    shell:
        guarded("answer {input.causes} --sweep {input.sweep} -o {output.markdown} --rst {output.rst}")
