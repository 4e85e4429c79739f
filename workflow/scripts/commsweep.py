# Run the rule's `params.command` (a commsweep command line with <input.NAME>-style
# placeholders) in this process, its output in the rule's log: for sweep-wide steps
# whose file lists are too long for a shell command line. See commsweep.orchestration.pipeline.run_rule.
from commsweep.orchestration.pipeline import run_rule

run_rule(snakemake)  # noqa: F821
