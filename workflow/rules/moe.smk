# The MoE view of a sweep with MoE points (docs/moe.md): bytes per group, EP and DP_EP
# beside TP and DP. Asked for by final_outputs() (common.smk, moe_outputs) only then.


rule plot_volume_by_group:
    input:
        summary=L.summary(),
        after=L.step_status("summarize"),
    output:
        plot=report(L.plot("volume_by_group"), caption="../report/volume_by_group.rst",
                    category="Communication volumes"),
        status=L.step_status("plot_volume_by_group"),
    params:
        provenance=provenance(),
        attempt=attempt(L.step_status("plot_volume_by_group")),
    conda:
        COMMSWEEP_ENV
    log:
        L.log("plot_volume_by_group"),
    benchmark:
        L.benchmark("plot_volume_by_group")
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        guarded("plot volume-by-group {input.summary} -o {output.plot}")
