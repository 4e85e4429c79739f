"""From a config to finished results: the points, their batches, the Snakefile's hooks, provenance, locks, the command line."""
