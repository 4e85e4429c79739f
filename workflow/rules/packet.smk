# Packet-level points (the sweep's `simulation` axis, docs/ns3.md): each is simulated by
# SimAI_simulator in a batch of its own (rule batch, commsweep.orchestration.batch.packet_batch); this
# step sets each beside its analytical twin. Asked for by final_outputs() only then.


rule packet_vs_analytical:
    input:
        summary=L.summary(),
        batches=all_batches,
        after=L.step_status("summarize"),
        **storage_inputs(records=[L.packet_record(p.point_key) for p in PACKET_POINTS]),
    output:
        table=report(L.packet_comparison(), caption="../report/packet_vs_analytical.rst",
                     category="Packet-level simulation"),
        status=L.step_status("packet_vs_analytical"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("packet_vs_analytical")),
        records=[L.packet_record(p.point_key) for p in PACKET_POINTS],
        command=guarded_argv("packet-compare", "--summary", "<input.summary>", "--records", "<params.records>",
                             "-o", "<output.table>"),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("packet_vs_analytical"),
    benchmark:
        L.benchmark("packet_vs_analytical")
    resources:
        **steps.resources("packet_vs_analytical"),
    threads: 1
    script:
        "../scripts/commsweep.py"
