# Sweep-wide tables and figures.


rule sweep_table:
    output:
        f"{RESULTS}/sweep.csv",
    params:
        # The table itself: a changed sweep reruns this rule and everything after it.
        table=sweep.table_csv(POINTS, INVALID),
    log:
        f"{RESULTS}/logs/sweep_table.log",
    benchmark:
        f"{RESULTS}/benchmarks/sweep_table.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    localrule: True
    script:
        "../scripts/write_text.py"


rule summary:
    input:
        sweep=f"{RESULTS}/sweep.csv",
        volumes=all_volumes,
        simulations=all_simulations,
        status=all_status,
    output:
        f"{RESULTS}/summary.csv",
    log:
        f"{RESULTS}/logs/summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/summary.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep summarize --sweep {input.sweep} --results {RESULTS} -o {output} > {log} 2>&1"


rule plot_volume_by_tp:
    input:
        f"{RESULTS}/summary.csv",
    output:
        report(
            f"{RESULTS}/plots/volume_by_tp.png",
            caption="../report/volume_by_tp.rst",
            category="Communication volumes",
        ),
    log:
        f"{RESULTS}/logs/plot_volume_by_tp.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_volume_by_tp.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot volume-by-tp {input} -o {output} > {log} 2>&1"


rule check:
    # Last: fail the run if a point failed (the summary lists it and why) and let the
    # next run retry the failed points (common.smk, "one bad point never loses the others").
    input:
        sweep=f"{RESULTS}/sweep.csv",
        outputs=final_outputs(),
    output:
        f"{RESULTS}/status.txt",
    log:
        f"{RESULTS}/logs/check.log",
    benchmark:
        f"{RESULTS}/benchmarks/check.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    localrule: True
    shell:
        "commsweep check --sweep {input.sweep} --results {RESULTS} -o {output} > {log} 2>&1"
