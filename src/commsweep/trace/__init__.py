"""Measured ground truth: trace the collectives real megatron-core issues, on the CPU.

``runner.run`` launches gloo processes that build a small megatron-core GPT
(``model.py``) and trace one training step through counting wrappers on
``torch.distributed`` (``collectives.py``, ``attribution.py``); ``compare.compare``
checks the Megatron schedule against the trace; ``scale.scaled_setup`` shrinks a sweep
point to a size the CPU traces in seconds. ``versions.environment`` makes any
megatron-core release ready to trace (``compat`` holds what each needs on a CPU), and
``tally`` sets several releases' traces side by side. Only ``collectives``,
``attribution``, ``compat``, ``model`` and the worker import torch and megatron
(``pip install '.[megatron]'``).
"""
