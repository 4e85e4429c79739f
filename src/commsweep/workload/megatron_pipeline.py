"""The Megatron schedule's pipeline part: which layers a stage holds, and what crosses stages.

megatron-core's ``pipeline_parallel/schedules.py`` (1F1B and the interleaved 1F1B of
Narayanan et al. 2021) and ``p2p_communication.py``; ``distributed/finalize_model_grads.py``
for the tied word embedding. Stage i of p holds, with v virtual stages (model chunks),
chunks i, i+p, ... of L/(p*v) layers each; with uneven stages (megatron's
--pipeline-model-parallel-layout, ``setup/pipeline_layout.py``) each chunk its own count.

Pipeline sends (u, or u/t with SP, per micro-batch, model chunk and direction) are carried
by the header's ``pp_comm`` and ``vpp``, not by rows, so that SimAI's bubble
(pp-1)/(ga*vpp) and PP formulas follow the (interleaved) 1F1B schedule; they are listed in
``Schedule.unexpressed`` for the audit. With p > 1 and tied embeddings, the first and last
stages all-reduce the word-embedding gradient after the backward pass (no SimAI group).
"""

from __future__ import annotations

from ..setup.training import TrainingSetup
from .megatron_blocks import FP32, Comm, Unexpressed

SENDS_WHY = "pipeline sends are carried by the header's pp_comm, not by rows"


def stage_layers(setup: TrainingSetup, stage: int) -> list[int]:
    """The global indices of the transformer layers stage ``stage`` holds, in the order of
    its model chunks: with v virtual stages, chunk c holds layers (c*p + stage)*L/(p*v) on,
    or, with uneven stages, those of virtual stage c*p + stage (``setup.chunk_layers``)."""
    return [layer for chunk in range(setup.virtual_pipeline) for layer in setup.chunk_layers(stage, chunk)]


def pipeline_bytes(setup: TrainingSetup, *, scatter_gather: bool = False) -> int:
    """Bytes of one pipeline send per rank: u, or u/t with SP (the rank holds a sequence
    shard) or with Megatron-LM's 2021 scatter-gather optimisation (each TP rank sends its
    1/t of the activation and the receiver all-gathers it)."""
    u, t = setup.activation_bytes, setup.tp
    return u // t if ((setup.sp or scatter_gather) and t > 1) else u


def sends(setup: TrainingSetup, stage: int, *, scatter_gather: bool = False) -> list[Unexpressed]:
    """One micro-batch's pipeline sends from stage ``stage`` (none with p = 1).

    Each model chunk sends on (and receives back) once per micro-batch; with v > 1 the
    first stage's later chunks receive from the last stage, and the last stage's earlier
    chunks send to the first."""
    if setup.pp == 1:
        return []
    first, last, v = stage == 0, stage == setup.pp - 1, setup.virtual_pipeline
    send = Comm("sendrecv", "PP", pipeline_bytes(setup, scatter_gather=scatter_gather))
    out = []
    for chunk in range(v):
        if not last or chunk < v - 1:
            out.append(Unexpressed("pipeline.send_forward", "pp", send, SENDS_WHY))
        if not first or chunk > 0:
            out.append(Unexpressed("pipeline.send_backward", "pp", send, SENDS_WHY))
    return out


def tied_embedding(setup: TrainingSetup, stage: int) -> list[Unexpressed]:
    """The word-embedding gradient all-reduce between the first and last stage (p > 1 and
    tied embeddings), after the backward pass: fp32, the rank's V'/t x h shard."""
    m = setup.model
    if setup.pp == 1 or not m.tie_embeddings or stage not in (0, setup.pp - 1):
        return []
    return [Unexpressed(
        "finalize_model_grads.embedding", "after",
        Comm("allreduce", "EMB", FP32 * setup.padded_vocab * m.hidden_size // setup.tp),
        "the word-embedding gradient all-reduce between the first and last stage has no SimAI group",
    )]
