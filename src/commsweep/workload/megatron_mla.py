"""Megatron's multi-latent attention (MLA, DeepSeek-V2/V3): what megatron-core's
``MLASelfAttention`` issues over TP, as GPUs run it.

The attention part of the Megatron schedule (``megatron_attention.py``) calls
``layer_blocks`` for every layer of an MLA model (``ModelSpec.is_mla``) in place of
linear_qkv's rows. The facts come
from megatron-core's source (``transformer/multi_latent_attention.py``, the Transformer
Engine layer spec of ``models/gpt/gpt_layer_specs.py``, ``extensions/transformer_engine.py``
``TELinear``, ``distributed/finalize_model_grads.py``) and are checked row for row against
traces of real megatron-core (``commsweep trace``, ``tests/test_trace_mla.py``).

Notation: b micro batch, s sequence, h hidden, t TP, n heads, r_q the query latent
(``q_lora_rank``), r_kv the key/value latent (``kv_lora_rank``), d_r the RoPE part of a
query/key head (``qk_rope_head_dim``), d_n its other part, d_v a value head.

megatron's Transformer Engine spec (``--transformer-impl transformer_engine``, its default
and what a GPU run builds) makes the down projections (h -> r_q, h -> r_kv + d_r)
``TELinear`` in parallel mode "duplicated": whole on every TP rank, no collective. So the
hidden state is never gathered for attention: with SP each rank projects its own sequence
shard, and what crosses TP are the compressed latents, not u = 2*b*s*h. Per layer and
micro-batch (t > 1), in forward order:

* with SP: the RoPE part of the key (b*s*d_r values) is all-gathered over TP from the
  sequence shards (``gather_from_sequence_parallel_region``; reduce-scatter backward);
  the query up projection (``linear_q_up_proj``, column parallel, its latent norm fused
  in) all-gathers the query latent (b*s*r_q values) before its GEMM, reduce-scatters its
  input gradient and re-gathers its input for the weight gradient in backward, as a dense
  linear_qkv does with u; the key/value up projection (``linear_kv_up_proj``) the same with
  b*s*r_kv; linear_proj reduce-scatters u forward and all-gathers u backward;
* without SP: the up projections all-reduce their input gradients (b*s*r_q and b*s*r_kv
  values) in backward, linear_proj all-reduces u forward;
* without a query latent (``q_lora_rank`` null, DeepSeek-V2-Lite) the query is projected
  from the hidden state by ``linear_q_proj``, column parallel: u as linear_qkv moves it.

After the backward pass, with SP, the duplicated down projections' weights join the TP
all-reduce of the sequence-parallel parameters (TE marks them ``sequence_parallel``) with
the latent norms; without SP nothing reduces them (the trace shows none: megatron issues no
collective for them there). From 0.19, without a query latent, linear_q_proj fuses a norm of
the hidden state in (megatron's ``QKNormConfigResolver`` builds it with ``qk_layernorm``): h
more parameters per layer, in the SP all-reduce with SP.

Not modelled: megatron's local spec (``--transformer-impl local``), whose column-parallel
down projections gather the hidden state and then the latents again, and which cannot
run MLA at all (its ``DotProductAttention`` takes one width for keys and values);
full recompute of MLA layers; multi-token prediction (DeepSeek-V3's MTP module).
"""

from __future__ import annotations

from ..setup.training import TrainingSetup
from .megatron_blocks import BF16, Block, Build
from .megatron_linear import column_parallel, row_parallel
from .megatron_releases import Release, release as newest
from .row_names import MLA_K_ROPE_GATHER, MLA_KV_UP_PROJ, MLA_PROJ, MLA_Q_PROJ, MLA_Q_UP_PROJ, in_layer


def problems(setup: TrainingSetup) -> list[str]:
    """What the MLA schedule cannot describe for this setup."""
    m = setup.model
    out = []
    if setup.recompute_mode == "full":
        out.append("the megatron schedule does not model full recompute of multi-latent attention")
    if m.num_attention_heads % setup.tp:
        out.append(f"megatron splits MLA's {m.num_attention_heads} heads over TP {setup.tp}: they must divide")
    return out


# -- parameters ------------------------------------------------------------------------


def _q_proj_norm(setup: TrainingSetup, release: Release | None) -> int:
    """The norm of the hidden state 0.19 fuses into linear_q_proj (no query latent)."""
    m = setup.model
    return m.hidden_size if m.q_lora_rank is None and (release or newest()).mla_q_proj_norm else 0


def attention_parameters(setup: TrainingSetup, release: Release | None = None) -> int:
    """One layer's MLA parameters on one TP rank, its input norm excluded: the duplicated
    down projections and latent norms whole, the up projections and linear_proj split
    (``release``, default the newest traced, for 0.19's norm in linear_q_proj)."""
    m, t = setup.model, setup.tp
    h, n = m.hidden_size, m.num_attention_heads
    assert m.kv_lora_rank is not None and m.qk_nope_head_dim and m.qk_rope_head_dim and m.v_head_dim
    q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank is not None:
        query = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * q_head // t
    else:
        query = h * n * q_head // t + _q_proj_norm(setup, release)
    key_value = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank + m.kv_lora_rank * n * (
        m.qk_nope_head_dim + m.v_head_dim) // t
    proj = n * m.v_head_dim * h // t + (h if m.add_bias_linear else 0)
    return query + key_value + proj


def sequence_parallel_parameters(setup: TrainingSetup, release: Release | None = None) -> int:
    """One layer's MLA parameters in the SP gradient all-reduce: the duplicated down
    projections and the latent norms (linear_proj's bias is counted with the dense ones)."""
    m, h = setup.model, setup.model.hidden_size
    assert m.kv_lora_rank is not None and m.qk_rope_head_dim
    query = h * m.q_lora_rank + m.q_lora_rank if m.q_lora_rank is not None else _q_proj_norm(setup, release)
    return query + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank


# -- one layer's attention -------------------------------------------------------------


def layer_blocks(build: Build, layer: int, micro_batch: int) -> list[Block]:
    """The rows of one layer's MLA for one micro-batch, in megatron's forward order (the
    attention's projections timed on the first row, core attention and linear_proj on the
    last, as for linear_qkv and linear_proj)."""
    setup = build.setup
    m = setup.model
    tokens = setup.micro_batch * setup.seq_length
    attention = f"decoder.layers.{layer}.self_attention"
    rows: list[Block] = []
    kind: str | None = "attention_qkv"
    if build.sp:
        rope = BF16 * tokens * m.qk_rope_head_dim
        rows.append(Block(in_layer(layer, MLA_K_ROPE_GATHER), attention, layer, micro_batch,
                          fwd=build.tp_comm("allgather", rope), ig=build.tp_comm("reducescatter", rope),
                          **build.timed(kind)))
        kind = None
    if m.q_lora_rank is not None:
        rows += column_parallel(build, in_layer(layer, MLA_Q_UP_PROJ), f"{attention}.linear_q_up_proj", layer, micro_batch,
                                size=BF16 * tokens * m.q_lora_rank, kind=kind)
    else:
        rows += column_parallel(build, in_layer(layer, MLA_Q_PROJ), f"{attention}.linear_q_proj", layer, micro_batch,
                                size=build.u, kind=kind)
    rows += column_parallel(build, in_layer(layer, MLA_KV_UP_PROJ), f"{attention}.linear_kv_up_proj", layer, micro_batch,
                            size=BF16 * tokens * m.kv_lora_rank)
    rows += row_parallel(build, in_layer(layer, MLA_PROJ), f"{attention}.linear_proj", layer, micro_batch, kind="attention_proj")
    return rows
