# The answer first: the landing page (results/answer.md; the report's front page includes
# results/answer.rst, see workflow/report/workflow.rst), from each AICB point's difference from
# its Megatron point by cause (rule tables, summary.smk) and its figures. Input functions: common.smk.


rule answer:
    input:
        causes=L.difference_by_cause(),
        sweep=L.sweep_table(),
        figures=[L.plot(name) for name in figure_names.ON_THE_ANSWER_PAGE],
        # With packet-level points, the answer under packet-level simulation too (packet.smk).
        packet=[L.packet_causes()] if PACKET_POINTS else [],
        # With ASTRA-sim, its two tables (astra.smk); not after its status: a failed run of it
        # leaves markers, which the page reports, and SimAI's answer stands.
        astra=[L.astra_difference(), L.astra_vs_simai()] if ASTRA else [],
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
                + (" --packet {input.packet}" if PACKET_POINTS else "")
                + (" --astra {input.astra}" if ASTRA else ""))
