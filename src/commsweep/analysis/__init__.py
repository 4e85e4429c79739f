"""The audit and the sweep-wide tables: volumes, findings, causes, the summary, the answer, the figures."""
