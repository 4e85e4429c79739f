# The answer first: each AICB point's difference from its Megatron point by cause, its
# figures, and the landing page (results/answer.md; the report's front page includes
# results/answer.rst, see workflow/report/workflow.rst).

from commsweep.analysis.causes import megatron_partners as _megatron_partners


def cause_points():
    """The audited AICB points, and the Megatron point each is compared with."""
    rows = {p.point_key: {k: str(v) for k, v in p.row().items()} for p in POINTS}
    audited = {p.point_key for p in AUDITED}
    partners = _megatron_partners(list(rows.values()))
    return {p: partners.get(p) for p in sorted(audited) if rows[p]["schedule"] == "aicb"}


def cause_inputs(wildcards):
    """What `commsweep causes` reads: the AICB points' audits, both sides' simulations."""
    pairs = cause_points()
    audits = [f"{RESULTS}/points/{p}/audit.csv" for p in pairs]
    simulated = sorted(set(pairs) | {m for m in pairs.values() if m})
    simulations = [f"{RESULTS}/points/{p}/{name}" for p in simulated for name in ("collectives.csv", "times.csv")]
    return {"audits": audits, "simulations": simulations}


rule difference_by_cause:
    input:
        unpack(cause_inputs),
        sweep=f"{RESULTS}/sweep.csv",
        volumes=all_volumes,
        status=all_status,
    output:
        report(
            f"{RESULTS}/difference_by_cause.csv",
            caption="../report/difference_by_cause.rst",
            category="1. The answer",
        ),
    log:
        f"{RESULTS}/logs/difference_by_cause.log",
    benchmark:
        f"{RESULTS}/benchmarks/difference_by_cause.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep causes --sweep {input.sweep} --results {RESULTS} -o {output} > {log} 2>&1"


rule plot_difference_by_cause:
    input:
        causes=f"{RESULTS}/difference_by_cause.csv",
        sweep=f"{RESULTS}/sweep.csv",
    output:
        report(
            f"{RESULTS}/plots/difference_by_cause.png",
            caption="../report/difference_by_cause_plot.rst",
            category="1. The answer",
        ),
    log:
        f"{RESULTS}/logs/plot_difference_by_cause.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_difference_by_cause.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot difference-by-cause {input.causes} --sweep {input.sweep} -o {output} > {log} 2>&1"


rule plot_exposed_tp_by_overlap:
    input:
        f"{RESULTS}/summary.csv",
    output:
        report(
            f"{RESULTS}/plots/exposed_tp_by_overlap.png",
            caption="../report/exposed_tp_by_overlap.rst",
            category="1. The answer",
        ),
    params:
        # The ratio of the points of a sweep without a tp_overlap axis.
        tp_overlap=config["simulator"]["overlap"]["tp"],
    log:
        f"{RESULTS}/logs/plot_exposed_tp_by_overlap.log",
    benchmark:
        f"{RESULTS}/benchmarks/plot_exposed_tp_by_overlap.tsv"
    resources:
        mem_mb=2048,
        runtime=10,
    threads: 1
    shell:
        "commsweep plot exposed-tp-by-overlap {input} --tp-overlap {params.tp_overlap} -o {output} > {log} 2>&1"


rule answer:
    input:
        causes=f"{RESULTS}/difference_by_cause.csv",
        sweep=f"{RESULTS}/sweep.csv",
        figures=[f"{RESULTS}/plots/difference_by_cause.png", f"{RESULTS}/plots/exposed_tp_by_overlap.png"],
    output:
        markdown=report(
            f"{RESULTS}/answer.md",
            caption="../report/answer_page.rst",
            category="1. The answer",
        ),
        # The same page with its figures embedded: the report's front page.
        rst=f"{RESULTS}/answer.rst",
    log:
        f"{RESULTS}/logs/answer.log",
    benchmark:
        f"{RESULTS}/benchmarks/answer.tsv"
    resources:
        mem_mb=1024,
        runtime=5,
    threads: 1
    shell:
        "commsweep answer {input.causes} --sweep {input.sweep} -o {output.markdown} --rst {output.rst} > {log} 2>&1"
