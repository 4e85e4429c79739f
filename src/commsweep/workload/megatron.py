"""The Megatron schedule: the collectives Megatron-LM (megatron-core) really issues.

One source of truth for the pipeline: ``schedule()`` lists, for one pipeline stage's
view of one training iteration, every collective with its module, layer, phase, group
and bytes (NVIDIA/Megatron-LM's ``megatron/core/tensor_parallel/mappings.py`` and ``layers.py``,
``megatron/core/pipeline_parallel/schedules.py``, ``megatron/core/transformer/moe/token_dispatcher.py``;
Shoeybi et al. 2019, Narayanan et al. 2021, Korthikanti et al. 2022; checked against traces of
real megatron-core by ``commsweep trace``). ``Schedule.workload()`` writes it as a SimAI
workload; what that format cannot carry is kept in ``Schedule.unexpressed``.

Conventions (those of SimAI workload files): a collective's size is the whole tensor,
not a rank's shard; activations are bf16, u = 2*b*s*h bytes; gradients are reduced in
fp32 (4 bytes per parameter) and parameters gathered in bf16 (2 bytes). TP communicates
only at t > 1; SP is off at t = 1, as megatron switches it off.

The schedule is written by parts, each a module of its own that says what it issues and
from which source, put together here:

* once per iteration, after the backward pass (``megatron_data_parallel``): the SP
  gradients' TP all-reduce, the DP (and expert-DP) gradient reduces and the distributed
  optimizer's parameter all-gathers; SimAI runs rows backwards in backward, so these rows
  come first;
* per micro-batch: on the first stage the embedding (``megatron_embedding``); for each
  layer the stage holds (``megatron_pipeline.stage_layers``) the attention
  (``megatron_attention``: MHA/GQA, or multi-latent attention, ``megatron_mla``; with
  context parallelism its exchange of keys and values, ``megatron_context_parallel``), the MLP
  (``megatron_mlp``: dense, or an MoE layer, ``megatron_moe``) and, with full recompute, the
  layer's forward collectives again (``megatron_recompute``); on the last stage the output
  layer and the cross entropy (``megatron_embedding``);
* the pipeline sends (``megatron_pipeline``): carried by the header's ``pp_comm`` and
  ``vpp``, listed as unexpressed; so is the tied word embedding's gradient all-reduce
  between the first and last stage.

The MoE rows are those of the megatron-core release asked for (``megatron_version``;
``megatron_releases.py``: 0.8 to 0.19 traced, the newest by default); every traced
release issues the same dense rows. Compute times: the kernel model's
(``aiob/megatron_kernels.py``) when given, else the AIOB profile's, else 0 everywhere
(``megatron_times``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from typing import TYPE_CHECKING

from ..aiob.profile_file import AiobProfile
from ..setup.training import TrainingSetup
from . import (megatron_attention, megatron_context_parallel, megatron_data_parallel, megatron_embedding,
               megatron_fsdp, megatron_mla, megatron_mlp, megatron_moe, megatron_pipeline, megatron_recompute, megatron_releases,
               megatron_times)
from .format import Header, Row, Workload
# The schedule's vocabulary and the parameter counts, for the modules that read schedules.
from .megatron_blocks import (BF16, COLUMN_GROUPS, FP32, Block, Build, Comm, Rows, Unexpressed,  # noqa: F401
                              as_unexpressed)
from .megatron_parameters import (dense_parameters, expert_parameters, local_parameters,  # noqa: F401
                                  sequence_parallel_parameters)
from .megatron_pipeline import pipeline_bytes, stage_layers  # noqa: F401

if TYPE_CHECKING:
    from ..aiob.megatron_kernels import RowTimes


@dataclass(frozen=True)
class Expected:
    """One collective Megatron issues in the iteration, for the audit and the trace check."""

    phase: str  # fwd | ig | wg | pp | after (after backward, outside any row)
    comm: Comm
    module: str
    layer: int | None
    micro_batch: int | None
    row: int | None  # index of the workload row that carries it; None if unexpressed


@dataclass(frozen=True)
class Schedule:
    setup: TrainingSetup
    stage: int
    blocks: tuple[Block, ...]
    # What the SimAI format cannot carry (``Unexpressed``, or (module, phase, comm, why)).
    unexpressed: tuple[Unexpressed, ...] = field(default=())

    pp_scatter_gather: bool = False

    @cached_property
    def header(self) -> Header:
        s = self.setup
        return Header(
            tp=s.tp, ep=s.ep, pp=s.pp, vpp=s.virtual_pipeline, ga=s.num_microbatches, all_gpus=s.world_size,
            pp_comm=pipeline_bytes(s, scatter_gather=self.pp_scatter_gather) if s.pp > 1 else 0,
        )

    def workload(self) -> Workload:
        return Workload(header=self.header, rows=tuple(map(_row, self.blocks)))

    def expected(self) -> list[Expected]:
        """Every collective of the iteration, expressed or not, in row order."""
        out = [
            Expected(phase=phase, comm=comm, module=b.module, layer=b.layer, micro_batch=b.micro_batch, row=i)
            for i, b in enumerate(self.blocks)
            for phase in ("fwd", "ig", "wg")
            if (comm := b.comm(phase)) is not None
        ]
        out += [
            Expected(phase=u.phase, comm=u.comm, module=u.module, layer=u.layer, micro_batch=u.micro_batch, row=None)
            for u in map(as_unexpressed, self.unexpressed)
            if not u.in_rows
        ]
        return out


def _row(block: Block) -> Row:
    """The SimAI row of ``block``: one collective (or NONE) per column."""
    cols: dict[str, tuple[str, int]] = {}
    for phase in ("fwd", "ig", "wg"):
        comm = block.comm(phase)
        if comm is None:
            cols[phase] = ("NONE", 0)
            continue
        if comm.group not in COLUMN_GROUPS[phase]:
            raise AssertionError(f"{block.name}: group {comm.group} cannot stand in the {phase} column")
        cols[phase] = (comm.comm_type(), comm.bytes)
    return Row(
        name=block.name, dependency=-1,
        fwd_compute=block.fwd_compute, fwd_comm=cols["fwd"][0], fwd_size=cols["fwd"][1],
        ig_compute=block.ig_compute, ig_comm=cols["ig"][0], ig_size=cols["ig"][1],
        wg_compute=block.wg_compute, wg_comm=cols["wg"][0], wg_size=cols["wg"][1],
        update_time=100,
    )


def unsupported(setup: TrainingSetup, megatron_version: str | megatron_releases.Release | None = None) -> list[str]:
    """Why the Megatron schedule of megatron-core ``megatron_version`` (default: the newest
    traced release) cannot describe this setup (empty when it can)."""
    out = megatron_mla.problems(setup) if setup.model.is_mla else []
    out += megatron_context_parallel.problems(setup, megatron_releases.release(megatron_version))
    out += megatron_fsdp.problems(setup)
    out += megatron_releases.mla_problems(setup, megatron_releases.release(megatron_version))
    if setup.model.is_moe:
        out += megatron_moe.problems(setup) + megatron_releases.problems(setup, megatron_releases.release(megatron_version))
        if setup.recompute_mode == "full":
            out.append("the megatron schedule does not model full recompute of MoE layers")
    return out


# -- the schedule ----------------------------------------------------------------------


def schedule(setup: TrainingSetup, profile: AiobProfile | None = None, *, stage: int = 0,
             times: RowTimes | None = None, pp_scatter_gather: bool = False,
             megatron_version: str | megatron_releases.Release | None = None) -> Schedule:
    """The collectives of one iteration as pipeline stage ``stage`` (0-based) sees them,
    as megatron-core ``megatron_version`` issues them (default: the newest traced release;
    older releases differ in MoE layers only, see ``megatron_releases``).

    Compute times come from ``times`` (``aiob.megatron_kernels.row_times``: every kernel of
    Megatron's rows, backward and optimizer included) when given, else from ``profile``
    (an AIOB profile: forward sections, backward estimated), else 0.
    ``pp_scatter_gather``: pipeline sends of u/t also without SP (Megatron-LM 2021-22).
    """
    if not 0 <= stage < setup.pp:
        raise ValueError(f"stage {stage} is outside 0..{setup.pp - 1}")
    if profile is not None and times is not None:
        raise ValueError("give an AIOB profile or the kernel model's times, not both")
    timing = megatron_times.timing(profile, times, recompute=setup.recompute,
                                   full_recompute=setup.recompute_mode == "full", cp=setup.cp)
    build = Build(setup, megatron_releases.release(megatron_version), timing)
    # Once per iteration; SimAI runs rows backwards in backward, so these come first and run last.
    rows = megatron_data_parallel.iteration_rows(build, stage)
    rows.unexpressed += megatron_pipeline.tied_embedding(setup, stage)
    for mb in range(setup.num_microbatches):
        rows += _micro_batch_rows(build, stage, mb)
        rows.unexpressed += megatron_pipeline.sends(setup, stage, scatter_gather=pp_scatter_gather)
    rows = megatron_data_parallel.place_bucket_reduces(build, stage, rows)
    return Schedule(setup=setup, stage=stage, blocks=tuple(rows.blocks), unexpressed=tuple(rows.unexpressed),
                    pp_scatter_gather=pp_scatter_gather)


def _micro_batch_rows(build: Build, stage: int, mb: int) -> Rows:
    """One micro-batch's rows on stage ``stage``: the embedding on the first stage, each
    layer's attention and MLP (and full recompute's forward again), the output layer and
    loss on the last; with FSDP, its per-micro-batch collectives around them (``megatron_fsdp``)."""
    segments: list[tuple[int, Rows]] = []
    if stage == 0:
        segments.append((megatron_fsdp.EMBEDDING, Rows(blocks=megatron_embedding.embedding_rows(build, mb))))
    for layer in stage_layers(build.setup, stage):
        out = Rows()
        out += megatron_attention.layer_rows(build, layer, mb)
        out += megatron_mlp.layer_rows(build, layer, mb)
        if build.setup.recompute_mode == "full":
            out += megatron_recompute.layer_rows(build, layer, mb)
        segments.append((layer, out))
    if stage == build.setup.pp - 1:
        segments.append((megatron_fsdp.OUTPUT, Rows(blocks=megatron_embedding.output_rows(build, mb))))
    return megatron_fsdp.micro_batch_rows(build, stage, mb, segments)
