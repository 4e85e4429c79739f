# Run the batch of `params.plan` (rule batch): every task of its points in this process,
# those already current skipped, then its manifest. See commsweep.orchestration.batch.run_rule.
# Ctrl-C before the batch starts (held back until here: commsweep.orchestration.interrupts) is one line too.
from commsweep.orchestration.interrupts import accepting

with accepting(f"batch {snakemake.wildcards.get('batch', snakemake.rule)}: interrupted (Ctrl-C); "  # noqa: F821
               "the tasks it finished are kept, the next run does the others", snakemake.log[0]):  # noqa: F821
    from commsweep.orchestration.batch import run_rule

    run_rule(snakemake)  # noqa: F821
