# Run the batch of `params.plan` (rule batch): every task of its points in this process,
# those already current skipped, then its manifest. See commsweep.orchestration.batch.run_rule.
from commsweep.orchestration.batch import run_rule

run_rule(snakemake)  # noqa: F821
