# Write a rule's `params.text`/`params.table` to its output, atomically.
# (A Snakemake `script:`: the text is too large for a command line; a pipeline.Unrecorded,
# so that Snakemake records its digest, not the text.)
from commsweep.orchestration.interrupts import accepting

with accepting(f"rule {snakemake.rule}: interrupted (Ctrl-C); the next run does it again",  # noqa: F821
               snakemake.log[0] if snakemake.log else None):  # noqa: F821
    from commsweep.base.files import write_text

    text = snakemake.params.get("table", None) or snakemake.params.get("text")  # noqa: F821
    write_text(snakemake.output[0], getattr(text, "value", text))  # noqa: F821
