# The answer first: each AICB point's difference from its Megatron point by cause, its
# figures, and the landing page (results/answer.md; the report's front page includes
# results/answer.rst, see workflow/report/workflow.rst). Input functions: common.smk.


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
    params:
        # The files of the points the inputs name, found there by their keys.
        results=RESULTS,
    shell:
        "commsweep causes --sweep {input.sweep} --results {params.results} -o {output} > {log} 2>&1"


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
