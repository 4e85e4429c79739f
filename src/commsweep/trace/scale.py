"""A sweep point's structure at a size the CPU traces in seconds.

Communication in megatron depends on the structure of a model (which collectives, in
which groups, per layer) and linearly on its sizes (b*s*h per activation). A trace of a
small model with the same structure (TP, SP, PP, position embedding, norm, MLP kind,
biases, tied embeddings, GQA) therefore checks every collective of the schedule, and the
schedule generated for the same small dimensions gives the sizes to compare with.
Points that share a structure share one trace (``family`` names it).

MoE models keep their MoE structure (top-k, shared experts and their gate, the pattern of
MoE and dense layers, the load-balancing loss, EP and expert TP) with a few experts: at
least two per EP rank and k, their number dividing a rank's routed tokens T*k so that the
trace's balanced router gives every expert the same tokens (the sequence grows until it
does); first dense layers (DeepSeek's) become one. MLA models keep MLA (with or without a
query latent) at latent and head widths of their own.

Interleaved pipelines keep their model chunks (v of them, one layer each, and p micro-batches,
which megatron's interleaved schedule needs); uneven stages keep their pattern with as few
layers as tell it apart: each virtual stage gets one layer more than the next-smaller count of
the layout (7, 9, 9, 7 becomes 1, 2, 2, 1; an empty stage stays empty).
"""

from __future__ import annotations

import dataclasses

from ..setup import pipeline_layout
from ..setup.models import ModelSpec
from ..setup.training import TrainingSetup

HEAD_DIM = 16
HEADS_PER_RANK = 2
LAYERS_PER_STAGE = 2
SEQ_LENGTH = 16
MICRO_BATCH = 2
# MLA's latent and head widths at trace size (each other than the others and than HEAD_DIM).
MLA_Q_LORA, MLA_KV_LORA, MLA_ROPE, MLA_V = 24, 20, 8, 12


def _gqa(model: ModelSpec) -> bool:
    """Whether attention is grouped: key/value groups set, and other than the heads."""
    return model.num_query_groups not in (None, model.num_attention_heads)


def family(model: ModelSpec) -> str:
    """The structural family of a model: ``gpt``, ``llama``, ``llama-gqa``, or its traits;
    then qkv biases and the MoE traits (``-moe-k<topk>``, ``-shared``, ``-gate``,
    ``-freq<N>``, ``-aux``) where the model has them."""
    traits = (
        model.position_embedding, model.normalization, "swiglu" if model.swiglu else "gelu",
        "bias" if model.add_bias_linear else "nobias", "tied" if model.tie_embeddings else "untied",
        "gqa" if _gqa(model) else "mha",
    )
    known = {
        ("learned", "layernorm", "gelu", "bias", "tied", "mha"): "gpt",
        ("rope", "rmsnorm", "swiglu", "nobias", "untied", "mha"): "llama",
        ("rope", "rmsnorm", "swiglu", "nobias", "untied", "gqa"): "llama-gqa",
    }
    name = known.get(traits, "-".join(traits))
    if model.add_qkv_bias and not model.add_bias_linear:
        name += "-qkvbias"
    if model.is_moe:
        name += f"-moe-k{model.moe_topk}"
        if model.moe_shared_expert_intermediate_size is not None:
            name += "-shared" + ("-gate" if model.moe_shared_expert_gate else "")
        if model.moe_layer_freq != 1:
            name += f"-freq{model.moe_layer_freq}"
        if model.moe_first_k_dense:
            name += "-firstdense"
        if model.moe_aux_loss_coeff > 0:
            name += "-aux"
    if model.is_mla:
        name += "-mla" + ("" if model.q_lora_rank is not None else "-noqlora")
    return name


def trace_key(setup: TrainingSetup) -> str:
    """The name of the trace covering this setup: family, TP, PP and SP."""
    sp = int(setup.sp and setup.tp > 1)
    key = f"{family(setup.model)}_tp{setup.tp}_pp{setup.pp}_sp{sp}"
    if setup.model.is_moe:
        key += f"_ep{setup.ep}" + (f"_etp{setup.expert_tp}" if setup.expert_tp != setup.tp else "")
    if setup.virtual_pipeline > 1 and setup.stage_layout is None:
        key += f"_vpp{setup.virtual_pipeline}"
    if setup.stage_layout is not None:
        key += f"_pl{pipeline_layout.key(scaled_layout(setup.stage_layout))}"
    return key


def scaled_layout(counts: tuple[int, ...]) -> tuple[int, ...]:
    """A layout's pattern with few layers: the rank of each count among the distinct counts
    (an empty stage keeps none)."""
    distinct = sorted(set(counts) - {0})
    return tuple(0 if n == 0 else distinct.index(n) + 1 for n in counts)


def scaled_setup(setup: TrainingSetup, *, dp: int = 1) -> TrainingSetup:
    """``setup``'s structure with tiny sizes: 2 heads of 16 per TP rank (one key/value
    group per rank with GQA), FFN 4h, 2 layers per stage, sequence 16, micro batch 2, one
    micro-batch per DP rank (two with PP, so that the 1F1B schedule has a steady state),
    and a vocabulary that megatron pads. It depends only on ``trace_key(setup)`` and ``dp``
    (at least EP for an MoE model: megatron carves the EP group out of DP)."""
    m, t, p = setup.model, setup.tp, setup.pp
    heads = HEADS_PER_RANK * t
    hidden = HEAD_DIM * heads
    ffn = 4 * hidden  # the MLP's width moves no bytes; a fixed one keeps the trace a function of the key
    seq = max(SEQ_LENGTH, t)
    seq = -(-seq // t) * t
    moe: dict = {"num_experts": None}
    if m.is_moe:
        dp = max(dp, setup.ep)
        experts = setup.ep * max(2, -(-m.moe_topk // setup.ep))
        while (MICRO_BATCH * seq // t * m.moe_topk) % experts:  # balanced routing needs E | T*k
            seq += t
        moe = {
            "num_experts": experts,
            "moe_ffn_hidden_size": 2 * hidden,
            "moe_shared_expert_intermediate_size": None if m.moe_shared_expert_intermediate_size is None else ffn,
        }
    if m.moe_first_k_dense:
        moe["moe_first_k_dense"] = 1  # a dense layer first, then MoE ones
    mla = {}
    if m.is_mla:  # distinct widths, so that each latent's collectives are told apart
        mla = dict(q_lora_rank=None if m.q_lora_rank is None else MLA_Q_LORA, kv_lora_rank=MLA_KV_LORA,
                   qk_nope_head_dim=HEAD_DIM, qk_rope_head_dim=MLA_ROPE, v_head_dim=MLA_V)
    v, layout = setup.virtual_pipeline, setup.stage_layout
    layout = None if layout is None else scaled_layout(layout)
    layers = sum(layout) if layout is not None else (v * p if v > 1 else LAYERS_PER_STAGE * p)
    model = dataclasses.replace(
        m,
        name=f"{family(m)}-scaled",
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=t if _gqa(m) else None,
        ffn_hidden_size=ffn,
        vocab_size=128 * t - 28,  # padded by megatron to 128 * t
        max_position_embeddings=seq,
        aicb_name=None,
        **moe,
        **mla,
    )
    micro_batches = (p if v > 1 else 2) if p > 1 else 1
    return TrainingSetup(
        model=model, world_size=t * p * dp, tp=t, pp=p, ep=setup.ep if m.is_moe else 1, sp=setup.sp and t > 1,
        micro_batch=MICRO_BATCH, global_batch=MICRO_BATCH * dp * micro_batches, seq_length=seq,
        etp=setup.etp if m.is_moe else None, virtual_pipeline=v, stage_layout=layout,
        # the buckets' overlap as given (a bucket size is the user's, in the small model's parameters)
        overlap_grad_reduce=setup.overlap_grad_reduce, overlap_param_gather=setup.overlap_param_gather,
        ddp_bucket_size=setup.ddp_bucket_size,
    )


def pipeline_dp(setup: TrainingSetup) -> int:
    """The DP size the pipeline traces a key with: 2 where a model replica has at most 2
    ranks (so the DP reduce-scatter and all-gather are checked for at most 4 processes),
    else 1 (TP and PP collectives only; DP ones on a group of one move nothing); at least
    EP for an MoE model."""
    dp = 2 if setup.tp * setup.pp <= 2 else 1
    return max(dp, setup.ep) if setup.model.is_moe else dp


def trace_setups(setups) -> dict[str, TrainingSetup]:
    """One setup per trace key among ``setups`` (first seen), leaving out what the megatron
    schedule, which a trace checks, cannot describe."""
    from ..workload import megatron

    out: dict[str, TrainingSetup] = {}
    for setup in setups:
        # (an interleaved pipeline of 2 stages: its messages' direction cannot be told, see runner.run)
        if not megatron.unsupported(setup) and not (setup.virtual_pipeline > 1 and setup.pp == 2):
            out.setdefault(trace_key(setup), setup)
    return out
