# ASTRA-sim beside SimAI (simulator.astra.root set; docs/astra-sim.md): every finished analytical
# point's workload through the user's ASTRA-sim on the point's network, beside SimAI's time, and
# each AICB point minus its Megatron twin in both simulators. Each run happens in
# results/astra/<point>/ with its command kept. A point ASTRA-sim gives no time for is a failed
# row with its reason; the step then fails, naming those points, and keeps both tables
# (commsweep.base.errors.PartialResult). Asked for by final_outputs() only then.


rule astra_compare:
    input:
        sweep=L.sweep_table(),
        batches=all_batches,
        after=[],
        **point_inputs("status", "times", "workloads"),
    output:
        table=report(L.astra_vs_simai(), caption="../report/astra_vs_simai.rst", category="ASTRA-sim beside SimAI"),
        pairs=report(L.astra_difference(), caption="../report/astra_difference.rst",
                     category="ASTRA-sim beside SimAI"),
        status=L.step_status("astra_compare"),
    params:
        # The binary's checksum: a rebuilt ASTRA-sim reruns the step.
        provenance=provenance("simulator.astra.root"),
        attempt=attempt(L.step_status("astra_compare")),
        command=guarded_argv("astra-compare", *astra_arguments()),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("astra_compare"),
    benchmark:
        L.benchmark("astra_compare")
    resources:
        **steps.resources("astra_compare"),
    threads: 1
    script:
        "../scripts/commsweep.py"
