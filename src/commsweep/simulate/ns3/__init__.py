"""SimAI's packet-level simulator (``SimAI_simulator``, its NS-3 backend): inputs, outputs, checks, runs.

One module per file or concern: ``topology`` (the topology file and SimAI's generator's
templates), ``conf`` (``SimAI.conf`` and the environment knobs), ``outputs`` (the files a
run writes), ``checks`` (what is known to hang or crash it, refused or transformed before
a run), ``runner`` (one run in a private directory, judged afterwards).
"""
