# Packet-level points (the sweep's `simulation` axis, docs/ns3.md): each is simulated by
# SimAI_simulator in a batch of its own (rule batch, commsweep.orchestration.batch.own_batch); this
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


rule packet_difference_by_cause:
    # The answer under packet-level simulation: each packet-level AICB point against its
    # packet-level Megatron point, from their SimAI_simulator runs and the workload's audit
    # (commsweep causes --simulation packet). Reads the points' files the manifests list.
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        after=[],
        **point_inputs("status", "volumes", "times", "collectives", "audits"),
    output:
        table=report(L.packet_causes(), caption="../report/packet_difference_by_cause.rst", category="1. The answer"),
        status=L.step_status("packet_difference_by_cause"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("packet_difference_by_cause")),
        command=guarded_argv("causes", "--simulation", "packet", "--sweep", "<input.sweep>",
                             "--status", "<batches.status>", "--volumes", "<batches.volumes>",
                             "--times", "<batches.times>", "--collectives", "<batches.collectives>",
                             "--audits", "<batches.audits>", "-o", "<output.table>"),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("packet_difference_by_cause"),
    benchmark:
        L.benchmark("packet_difference_by_cause")
    resources:
        **steps.resources("packet_difference_by_cause"),
    threads: 1
    script:
        "../scripts/commsweep.py"
