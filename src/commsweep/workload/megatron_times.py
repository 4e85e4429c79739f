"""The Megatron schedule's compute times per row kind, from the kernel model or an AIOB profile.

Compute times: the kernel model's (``aiob/megatron_kernels.py``: every kernel of Megatron's
rows, backward and optimizer included) when given, else the AIOB profile's (forward
sections only, the backward estimated), else 0 everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..aiob.profile_file import AiobProfile
from .megatron_blocks import Timing

if TYPE_CHECKING:
    from ..aiob.megatron_kernels import RowTimes


def _us_to_ns(*values: float) -> int:
    return round(sum(values) * 1000)


def profile_times(profile: AiobProfile | None, recompute: bool, cp: int = 1) -> dict[str, tuple[int, int, int]]:
    """(fwd, ig, wg) ns per row kind from an AIOB profile's average times.

    ``cp``: the context-parallel size. An AIOB profile times a rank holding whole
    sequences (AICB has no context parallelism); a CP rank holds s/cp tokens, so its GEMMs,
    norms and activations do 1/cp of that work, and its attention, balanced over the causal
    mask (Transformer Engine's 2*cp chunks), 1/cp of the causal attention's: every section
    but the optimizer step's (``param_time``) is taken at 1/cp.

    The profile times forward operators only. Backward is estimated per operator: the
    input-gradient GEMM costs what the forward GEMM costs, the weight-gradient GEMM
    likewise; flash attention's backward costs twice its forward; norms and activations
    cost their forward time again. Selective recompute re-runs flash attention's forward
    in the backward pass.
    """
    if profile is None:
        return {}

    def avg(name: str) -> float:
        times = profile.get(name)
        return (float(times.avg) / (1 if name == "param_time" else cp)) if times else 0.0

    ln, qkv, flash, proj = avg("layernorm"), avg("atten_qkv"), avg("atten_flash"), avg("atten_linear")
    ln2, fc1, act, fc2 = avg("layernorm2"), avg("mlp_linear_1"), avg("mlp_gelu"), avg("mlp_linear_2")
    return {
        "embedding": (_us_to_ns(avg("Emb")), 0, _us_to_ns(avg("Emb"))),
        "attention_qkv": (_us_to_ns(ln, qkv), _us_to_ns(qkv, ln), _us_to_ns(qkv)),
        "attention_proj": (
            _us_to_ns(flash, proj),
            _us_to_ns(proj, 2 * flash, flash if recompute else 0),
            _us_to_ns(proj),
        ),
        "mlp_fc1": (_us_to_ns(ln2, fc1, act), _us_to_ns(fc1, act, ln2), _us_to_ns(fc1)),
        "mlp_fc2": (_us_to_ns(fc2), _us_to_ns(fc2), _us_to_ns(fc2)),
        "output_layer": (_us_to_ns(avg("layernorm_post"), avg("logit_time")), _us_to_ns(avg("logit_time")), _us_to_ns(avg("logit_time"))),
        "optimizer": (0, 0, _us_to_ns(avg("param_time"))),
    }


def core_attention_ns(row) -> tuple[int, int]:
    """The core attention's (forward, backward) ns in an ``attention_proj`` row this module
    timed from a profile (``profile_times``): the forward is flash attention and linear_proj,
    whose weight gradient is linear_proj's again, so the forward's rest is the attention, and
    its backward twice that; 0 in a row without compute. ``row``: a ``format.Row``."""
    forward = max(0, row.fwd_compute - row.wg_compute)
    return forward, 2 * forward


def kernel_times(times: RowTimes) -> dict[str, tuple[int, int, int]]:
    """(fwd, ig, wg) ns per row kind from the kernel model's microseconds."""
    return {kind: (_us_to_ns(f), _us_to_ns(i), _us_to_ns(w)) for kind, (f, i, w) in times.rows.items()}


def timing(profile: AiobProfile | None, times: RowTimes | None, *, recompute: bool, full_recompute: bool,
           cp: int = 1) -> Timing:
    """The schedule's compute times: ``times`` (the kernel model's, already a CP rank's) if
    given, else ``profile``'s (at 1/``cp`` of a whole-sequence rank's work); with full recompute and a profile (which has no recompute rows), the
    recompute rows cost the forward of the attention's and the MLP's rows again."""
    ns = kernel_times(times) if times is not None else profile_times(profile, recompute, cp)
    if full_recompute and ns and "recompute_attention" not in ns:
        fwd = {kind: ts[0] for kind, ts in ns.items()}
        ns["recompute_attention"] = (0, fwd["attention_qkv"] + fwd["attention_proj"], 0)
        ns["recompute_mlp"] = (0, fwd["mlp_fc1"] + fwd["mlp_fc2"], 0)
    return Timing(ns)
