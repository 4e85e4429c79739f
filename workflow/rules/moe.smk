# The MoE view of a sweep with MoE points (docs/moe.md): bytes per group, EP and DP_EP
# beside TP and DP. Asked for by final_outputs() (common.smk, moe_outputs) only then.


rule plot_volume_by_group:
    input:
        f"{RESULTS}/summary.csv",
    output:
        report(
            f"{RESULTS}/plots/volume_by_group.png",
            caption="../report/volume_by_group.rst",
            category="Communication volumes",
        ),
    log:
        f"{RESULTS}/logs/plot_volume_by_group.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_volume_by_group.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot volume-by-group {input} -o {output} > {log} 2>&1"
