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
    conda:
        COMMSWEEP_ENV
    log:
        L.log("difference_by_cause"),
    benchmark:
        L.benchmark("difference_by_cause")
    resources:
        **steps.resources("difference_by_cause"),
    threads: 1
    script:
        "../scripts/commsweep.py"


rule answer:
    input:
        causes=L.difference_by_cause(),
        sweep=L.sweep_table(),
        figures=[L.plot("difference_by_cause"), L.plot("exposed_tp_by_overlap")],
        # With packet-level points, the answer under packet-level simulation too (packet.smk).
        packet=[L.packet_causes()] if PACKET_POINTS else [],
        after=[L.step_status("difference_by_cause")]
        + ([L.step_status("packet_difference_by_cause")] if PACKET_POINTS else []),
    output:
        markdown=report(L.answer_page(), caption="../report/answer_page.rst", category="1. The answer"),
        # The same page with its figures embedded: the report's front page.
        rst=L.answer_rst(),
        status=L.step_status("answer"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("answer")),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("answer"),
    benchmark:
        L.benchmark("answer")
    resources:
        **steps.resources("answer"),
    threads: 1
    shell:
        guarded("answer {input.causes} --sweep {input.sweep} -o {output.markdown} --rst {output.rst}"
                + (" --packet {input.packet}" if PACKET_POINTS else ""))
