"""The roofline's multi-latent attention (DeepSeek-V2/V3): the five AIOB sections of AICB's
DeepSeek AIOB model, and AICB's ``model_param`` of its DeepSeek mock.

AICB's DeepSeek AIOB model (aliyun/aicb 23eec3c, ``mocked_model/training/AiobDeepSeek.py``,
``DeepSeekMLA.forward``) times an MLA layer in five calls and writes them as sections that
replace ``atten_qkv``, ``atten_flash`` and ``atten_linear``; AICB's DeepSeek frame reads them
back as the compute times of its MLA lines (``utils.extract_averages``' per-layer keys). The
sections and what each covers on one rank (n = b*s tokens, H/t local heads):

* ``attention_linear_q_lora``: the query down projection ``[n, h] x [h, q_lora]`` and its
  RMSNorm; no kernel without a query latent (DeepSeek-V2-Lite);
* ``attention_q_column``: the query up projection ``[n, q_lora] x [q_lora, H/t (nope + rope)]``
  (from h directly without a latent);
* ``attention_linear_kv_lora``: the key/value down projection ``[n, h] x [h, kv_lora + rope]``
  and the latent's RMSNorm;
* ``attention_kv_column``: the key/value up projection ``[n, kv_lora] x [kv_lora, H/t (nope + v)]``
  and the attention core: causal flash attention with query/key width nope + rope and value
  width v. Here the roofline follows training, as megatron-core runs it, where AICB's model
  times an inference kernel (the up projection absorbed into the query and output, a full
  non-causal s x s product over the latent);
* ``attention_o_row``: the output projection ``[n, H/t v] x [H/t v, h]``.

Backward kernels as for the other sections (``roofline``): GEMM input and weight gradients,
the norms' backward, flash attention's backward at 2.5x its forward FLOPs.
"""

from __future__ import annotations

from ..setup.training import TrainingSetup
from .kernels import BF16, FP32, Kernel, Operator
from .kernels import gemm as _gemm
from .kernels import gemm_backward as _gemm_backward
from .profile_file import MLA_SECTIONS


def operators(setup: TrainingSetup) -> list[Operator]:
    """The kernels of the five MLA sections for this setup's rank, in AICB's order."""
    m, t = setup.model, setup.tp
    assert m.is_mla and m.kv_lora_rank and m.qk_nope_head_dim and m.qk_rope_head_dim and m.v_head_dim
    b, s, h = setup.micro_batch, setup.seq_length, m.hidden_size
    n, heads = b * s, m.num_attention_heads // t
    q, kv, nope, rope, v = m.q_lora_rank or 0, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    qk = nope + rope

    def rmsnorm(name: str, width: int) -> tuple[Kernel, tuple[Kernel, ...]]:
        rows = n
        fwd = Kernel(f"{name}.fwd", "memory", 4.0 * rows * width, BF16 * rows * width * 2 + BF16 * width + FP32 * rows)
        bwd = (Kernel(f"{name}.dgrad", "memory", 8.0 * rows * width, BF16 * rows * width * 3 + FP32 * rows),
               Kernel(f"{name}.dparams", "memory", 2.0 * rows * width, BF16 * rows * width * 2 + FP32 * width))
        return fwd, bwd

    ops = []
    if q:
        norm, norm_b = rmsnorm("q_norm", q)
        ops.append(Operator("attention_linear_q_lora", (_gemm("q_down", n, h, q), norm),
                            (*_gemm_backward("q_down", n, h, q), *norm_b)))
    else:
        ops.append(Operator("attention_linear_q_lora", ()))
    q_in = q or h
    ops.append(Operator("attention_q_column", (_gemm("q_up", n, q_in, heads * qk),),
                        _gemm_backward("q_up", n, q_in, heads * qk)))
    norm, norm_b = rmsnorm("kv_norm", kv)
    ops.append(Operator("attention_linear_kv_lora", (_gemm("kv_down", n, h, kv + rope), norm),
                        (*_gemm_backward("kv_down", n, h, kv + rope), *norm_b)))
    # Causal attention: Q K^T over qk and P V over v, half the s x s products.
    core_flops = 1.0 * b * s * s * heads * (qk + v)
    q_bytes, k_bytes, v_bytes = BF16 * n * heads * qk, BF16 * n * heads * qk, BF16 * n * heads * v
    out_bytes, lse = BF16 * n * heads * v, FP32 * b * heads * s
    flash = Kernel("flash.fwd", "attention", core_flops, q_bytes + k_bytes + v_bytes + out_bytes + lse)
    flash_b = Kernel("flash.bwd", "attention", 2.5 * core_flops,
                     2 * (q_bytes + k_bytes + v_bytes + out_bytes) + lse + FP32 * n * heads * v)
    ops.append(Operator("attention_kv_column", (_gemm("kv_up", n, kv, heads * (nope + v)), flash),
                        (*_gemm_backward("kv_up", n, kv, heads * (nope + v)), flash_b)))
    ops.append(Operator("attention_o_row", (_gemm("proj", n, heads * v, h),), _gemm_backward("proj", n, heads * v, h)))
    assert tuple(op.section for op in ops) == MLA_SECTIONS
    return ops


def aicb_model_param(setup: TrainingSetup) -> int:
    """AICB's ``model_param`` under ``--frame DeepSeek``: the parameters of its mocked
    ``DeepSeekV3Model`` on one rank of one stage (``sum(p.numel() for p in model.parameters())``).

    Per TP rank: the embedding (4 V'/t x h and an s x h position table), per layer the MLA's
    two down projections (unsharded), their norms (weight and bias), the two up projections
    and the output layer (sharded), the MLP's norm and a bias of h, then a dense MLP or the MoE
    layer (three h x f matrices per local expert, and one shared MLP, counted once here), and
    the output layer h x V'/t; biases with ``--add_bias_linear``. AICB gives every MLP the
    experts' width (its one ``--ffn_hidden_size``); each stage numbers its layers from 0, so its
    first ``moe_first_k_dense`` are dense.
    """
    m, t = setup.model, setup.tp
    h, heads = m.hidden_size, m.num_attention_heads
    q, kv = m.q_lora_rank or 0, m.kv_lora_rank or 0
    nope, rope, v = m.qk_nope_head_dim or 0, m.qk_rope_head_dim or 0, m.v_head_dim or 0
    f = m.expert_ffn_hidden_size
    vocab = setup.padded_vocab // t

    def b(x: int) -> int:
        return x if m.add_bias_linear else 0

    q_up, kv_up = heads * (nope + rope) // t, heads * (nope + v) // t
    attention = (h * q + b(q) + 2 * q + q * q_up + b(q_up) + h * (kv + rope) + b(kv + rope) + 2 * kv
                 + kv * kv_up + b(kv_up) + h * (heads * v // t) + b(h))
    mlp = 2 * h * (f // t) + b(f // t) + b(h)
    experts = 3 * h * (f * ((m.num_experts or 1) // setup.ep) // t)
    shared = mlp if m.moe_shared_expert_intermediate_size else 0
    layers = setup.model.num_layers // setup.pp
    dense_first = m.moe_first_k_dense if m.is_moe else layers
    total = 4 * vocab * h + setup.seq_length * h + h * vocab + b(vocab)
    for layer in range(layers):
        total += attention + 3 * h + (mlp if layer < dense_first else experts + shared)
    return total
