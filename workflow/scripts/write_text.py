# Write a rule's `params.text`/`params.table` to its output, atomically.
# (A Snakemake `script:`: the text is too large for a command line.)
from commsweep.base.files import write_text

text = snakemake.params.get("table", None) or snakemake.params.get("text")  # noqa: F821
write_text(snakemake.output[0], text)  # noqa: F821
