"""Which megatron-core release the Megatron schedule follows, and what changes with it.

Traces of one release per minor release from 0.8.0 to 0.19.2 (``commsweep trace
--megatron-core V``, docs/megatron-versions.md) show the dense schedule identical on all of
them. The MoE layer's all-to-all token dispatcher is not (``megatron_moe.layer_blocks``
reads these switches):

* **The routing probabilities travel from 0.12** (``probs_travel``): an all-to-all over EP
  of their own each way beside the tokens', and with expert TP an all-gather over it
  (reduce-scatter backward). 0.8 to 0.11 keep them on the token's own rank, where they
  weight the experts' outputs after the combine.
* **0.8 routes the whole sequence on every TP rank** (``tp_routing``; with t > 1, which
  megatron runs MoE with SP only): the router all-gathers the sequence-parallel logits
  over TP (reduce-scatter backward); the dispatcher turns the rank's sequence shard into a
  hidden-dimension shard of the whole sequence with an all-to-all over TP before the EP
  dispatch and back after the EP combine (an all-to-all each way in either direction);
  it gathers the token counts over EP alone, and the load-balancing loss reduces its
  counts over the context-parallel group (one rank here) instead of TP.
* **0.9 and 0.10 reduce the token counts without a loss** (``counts_without_loss``):
  they apply megatron's default load balancing (``aux_loss``) even with a coefficient of
  0, so the router all-reduces the token counts per expert over TP whatever
  ``moe_aux_loss_coeff``; 0.11 and later skip it at 0 (0.8 reduces over one rank).
* 0.8 to 0.10 also all-reduce the load-balancing counts at t = 1: over one rank, so
  nothing moves, and the schedule, as everywhere, writes no collective on one rank.

Multi-latent attention (``mla_problems``, ``mla_q_proj_norm``): from 0.10, and as the schedule
follows it (the down projections duplicated on every TP rank) from 0.14, traced on 0.14.0 to
0.19.2; 0.19 adds a norm to linear_q_proj where there is no query latent.

A release older than a model feature cannot build the model (``problems``): before 0.10
shared experts, dense layers between MoE layers and an expert TP of its own; before 0.16
the shared expert's gate. The trace refuses such models the same way (``trace/compat.py``).

The schedule knows the traced releases' minor versions, from the oldest to the newest
(``NEWEST``, the default); a patch release follows its minor release. Older releases
cannot be traced on a CPU, and newer ones are refused until traced: whether their rows
are the newest's is what a trace would tell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.errors import ConfigError
from ..setup.training import TrainingSetup

# The releases docs/megatron-versions.md compares, one per minor release, oldest first;
# the last is the newest traced, the schedule's default (trace.versions traces them).
TRACED = ("0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "0.13.1", "0.14.0", "0.15.3", "0.16.1",
          "0.17.1", "0.18.2", "0.19.2")
NEWEST = TRACED[-1]
_PLAIN = re.compile(r"^\d+(\.\d+){1,3}$")


def _minor(version: str) -> tuple[int, int]:
    major, minor, *_ = (int(part) for part in version.split("."))
    return major, minor


@dataclass(frozen=True)
class Release:
    """A megatron-core release the schedule can follow (made by ``release``)."""

    version: str

    @property
    def minor(self) -> tuple[int, int]:
        return _minor(self.version)

    @property
    def probs_travel(self) -> bool:
        """The routing probabilities go over EP (and expert TP) with the tokens (0.12 on)."""
        return self.minor >= (0, 12)

    @property
    def counts_without_loss(self) -> bool:
        """The router all-reduces the token counts over TP even without a load-balancing
        loss (0.9, 0.10: megatron's default ``aux_loss`` balancing at coefficient 0)."""
        return (0, 9) <= self.minor < (0, 11)

    @property
    def mla_q_proj_norm(self) -> bool:
        """Without a query latent, MLA's linear_q_proj has a norm of the hidden state fused
        in (0.19 on: ``QKNormConfigResolver`` with ``qk_layernorm``)."""
        return self.minor >= (0, 19)

    @property
    def tp_routing(self) -> bool:
        """Every TP rank routes the whole sequence; tokens cross TP by all-to-all (0.8)."""
        return self.minor < (0, 9)


def release(version: str | Release | None = None, *, key: str = "--megatron-version") -> Release:
    """The release ``version`` names (None: ``NEWEST``); a ``ConfigError`` naming ``key``
    for anything but a plain release number from 0.8 to the newest traced minor release."""
    if isinstance(version, Release):
        return version
    if version is None:
        return Release(NEWEST)
    version = str(version)
    if not _PLAIN.match(version):
        raise ConfigError(f"expected a megatron-core release such as {TRACED[0]} or {NEWEST}, got {version!r}",
                          key=key)
    if _minor(version) < _minor(TRACED[0]):
        raise ConfigError(
            f"megatron-core {version}: the megatron schedule follows {TRACED[0]} to {NEWEST}, the releases traced "
            "on a CPU (older ones cannot be; docs/megatron-versions.md)", key=key)
    if _minor(version) > _minor(NEWEST):
        raise ConfigError(
            f"megatron-core {version} is newer than the newest traced release, {NEWEST}: trace it "
            f"(commsweep trace --megatron-core {version} --compare FILE) to see whether {NEWEST}'s schedule holds, "
            f"or generate for {NEWEST}", key=key)
    return Release(version)


def problems(setup: TrainingSetup, release: Release) -> list[str]:
    """The model features of ``setup`` that ``release`` lacks (it cannot build the model)."""
    m = setup.model
    if not m.is_moe:
        return []
    lacking = []
    if release.minor < (0, 10):
        if m.moe_shared_expert_intermediate_size is not None:
            lacking.append("shared experts (from 0.10)")
        if m.moe_layer_freq != 1:
            lacking.append("dense layers between MoE layers (moe_layer_freq, from 0.10)")
        if setup.expert_tp != setup.tp:
            lacking.append("an expert TP of its own (from 0.10)")
    if release.minor < (0, 16) and m.moe_shared_expert_intermediate_size is not None and m.moe_shared_expert_gate:
        lacking.append("the shared expert's gate (from 0.16)")
    if not lacking:
        return []
    return [f"megatron-core {release.version} cannot build this model: it lacks {', '.join(lacking)}"]


MLA_FROM = (0, 14)


def mla_problems(setup: TrainingSetup, release: Release) -> list[str]:
    """Why ``release``'s multi-latent attention is not the schedule's (empty without MLA).
    MLA came in 0.10; 0.10 to 0.13 build its down projections column parallel on GPUs too
    (``TEColumnParallelLinear``: the hidden state gathered, then the latents), 0.14 and later
    duplicated on every TP rank (``TELinear``), which is what ``megatron_mla`` follows."""
    if not setup.model.is_mla or release.minor >= MLA_FROM:
        return []
    if release.minor < (0, 10):
        return [f"megatron-core {release.version} cannot build this model: it lacks multi-latent attention (from 0.10)"]
    return [f"megatron-core {release.version} builds multi-latent attention's down projections column parallel "
            "(0.10 to 0.13); the megatron schedule follows 0.14 and later, where they are duplicated on every TP rank"]
