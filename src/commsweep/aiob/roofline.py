"""The roofline backend: AIOB compute times from FLOPs and bytes, without a GPU.

For every section AICB's profiler (``AiobMegatron``) times, this module lists the kernels
that section launches on one rank, with their FLOPs and the bytes they move, for the
rank's TP shard. A kernel takes ``max(FLOPs / (peak x efficiency), bytes / (bandwidth x
memory efficiency)) + launch overhead``; a section takes the sum of its kernels. The
profile is written in AICB's format, so it drops in where AICB's own file would.

What each section covers follows what AICB times (``AiobMegatron.py`` and
``utils.cuda_timing_decorator``), with the model's own architecture (GQA, swiglu, biases):

* ``Emb``: AICB's mocked embedding: with t > 1 six small mask kernels on the token ids; a
  gather from an **int64** table (AICB's mock stores the table as int64: 8 bytes per value),
  the fp32 position embedding, their fp32 sum and a transposing copy.
* ``layernorm``, ``layernorm2``, ``layernorm_post``: one fused norm over ``[s, b, h]`` bf16;
  with sequence parallelism over the rank's ``s/t`` rows only (AICB chunks before timing).
* ``atten_qkv``: the qkv GEMM ``[b*s, h] x [h, (heads + 2 kv groups) * head_dim / t]``. The
  GEMMs take the whole sequence also with SP (Megatron all-gathers first; AICB repeats the
  chunk before the GEMM, untimed).
* ``atten_flash``: FlashAttention's causal forward over the rank's heads (GQA-aware bytes).
* ``atten_linear``: AICB rearranges the context to ``[s, b, h/t]`` (a copy) inside the
  timed call, then the projection GEMM ``[b*s, h/t] x [h/t, h]``.
* a model with multi-latent attention has, in place of these three, the five sections of
  AICB's DeepSeek AIOB model (``mla``).
* ``mlp_linear_1``/``mlp_linear_2``: the MLP GEMMs; fc1 is twice as wide with swiglu. MoE:
  one GEMM per local expert on the tokens routed to it, ``b*s*topk*ep/E`` under balanced
  routing (AICB's SequentialMLP; with an expert TP e other than t, e/t of that), at the
  experts' own FFN width split over e; and what AICB's mock lacks and megatron runs: the
  router's GEMM (on the rank's s/t tokens with SP) in ``mlp_linear_1`` and the shared
  experts' MLP (over all b*s tokens) in the three MLP sections.
* ``mlp_gelu``: the bias add (with biases), then gelu, or swiglu's silu and product.
* ``logit_time``: the output GEMM ``[b*s, h] x [h, V'/t]`` (V' the padded vocabulary).
* ``param_time``: AICB's ``Grad_param``: an in-place division of an fp32 buffer of
  ``model_param // t`` elements, where ``model_param`` is AICB's own count of the rank's
  parameters (``aicb_model_param``): it is a pass over the gradient buffer, not Adam.

Recompute does not change any section (AICB's consumers count the flash time twice
instead), and neither do DP or the global batch. Backward kernels (input- and
weight-gradient GEMMs with twice the forward FLOPs, FlashAttention's backward with 2.5x)
are estimated the same way and written to the CSV, next to the AIOB numbers; the AIOB
file itself holds forward times only, as AICB's does.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from ..base.errors import ConfigError
from ..setup.training import TrainingSetup
from .gpus import GpuSpec
from .kernels import BF16, FP32, INT64, Kernel, Operator
from .kernels import elementwise as _elementwise
from .kernels import gemm as _gemm
from .kernels import gemm_backward as _gemm_backward
from . import mla
from .profile_file import DEEPSEEK_SECTIONS, STANDARD_SECTIONS, AiobProfile, OpTime

@dataclass(frozen=True)
class Shard:
    """The shapes one rank works on (b micro batch, s sequence, t TP), from a setup."""

    b: int
    s: int
    h: int
    t: int
    heads: int
    kv_groups: int
    head_dim: int
    ffn: int
    swiglu: bool
    bias: bool
    vocab: int  # padded to a multiple of 128 * t, as Megatron (and AICB) pad it
    sp: bool
    layers: int  # on this pipeline stage
    experts: int | None
    topk: int
    ep: int
    expert_ffn: int = 0  # one routed expert's FFN width (MoE)
    etp: int = 1  # expert TP
    shared_ffn: int = 0  # the shared experts' FFN width, 0 without

    @classmethod
    def of(cls, setup: TrainingSetup) -> "Shard":
        m = setup.model
        return cls(
            b=setup.micro_batch, s=setup.seq_length, h=m.hidden_size, t=setup.tp,
            heads=m.num_attention_heads, kv_groups=m.kv_groups, head_dim=m.head_dim,
            ffn=m.ffn_hidden_size, swiglu=m.swiglu, bias=m.add_bias_linear,
            vocab=setup.padded_vocab, sp=setup.sp and setup.tp > 1,
            layers=m.num_layers // setup.pp, experts=m.num_experts, topk=m.moe_topk, ep=setup.ep,
            expert_ffn=m.expert_ffn_hidden_size, etp=setup.expert_tp,
            shared_ffn=m.moe_shared_expert_intermediate_size or 0,
        )

    @property
    def tokens(self) -> int:
        return self.b * self.s

    @property
    def norm_rows(self) -> int:
        """Rows a norm sees: the first of t sequence chunks with SP (torch.chunk rounds up)."""
        return -(-self.s // self.t) * self.b if self.sp else self.tokens

    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_groups) * self.head_dim // self.t

    @property
    def fc1_width(self) -> int:
        """fc1's output columns on this rank: twice the FFN width with swiglu (gate and up);
        an expert's FFN width split over expert TP for an MoE model."""
        if self.experts is not None:
            return self.expert_ffn * (2 if self.swiglu else 1) // self.etp
        return self.ffn * (2 if self.swiglu else 1) // self.t

    @property
    def fc2_width(self) -> int:
        """fc2's input columns on this rank (an expert's, for an MoE model)."""
        return self.expert_ffn // self.etp if self.experts is not None else self.ffn // self.t

    @property
    def local_experts(self) -> int:
        return (self.experts or 1) // self.ep

    @property
    def expert_tokens(self) -> int:
        """Tokens per local expert under balanced routing: AICB's int(s*b*topk*ep/E) (each of
        the E/ep local experts gets its share of the b*s*topk routed tokens that expert TP
        gathers), times e/t with an expert TP e other than t."""
        if self.experts is None:
            return self.tokens
        return int(self.s * self.b * self.topk * self.ep * self.etp / (self.experts * self.t))


def check_shard(setup: TrainingSetup) -> Shard:
    problems = setup.shard_problems()
    if problems:
        raise ConfigError("; ".join(problems), key="arguments")
    return Shard.of(setup)


# -- parameters ------------------------------------------------------------------------


def aicb_model_param(setup: TrainingSetup) -> int:
    """AICB's ``model_param``: the parameter count of its mocked Megatron model on one rank.

    AICB sizes ``param_time``'s buffer with it (``model_param // t`` fp32 values). Its mock
    (``MockedMegatron.py``) counts per TP rank: a word embedding four times too tall
    (4 V'/t x h), a position embedding of s x h, per layer the qkv and projection weights,
    fc1 and fc2 of width f/t (not doubled for swiglu) or the local experts' 2 h f (E/ep)/t,
    three h-vectors (one fused norm and a bias), and the output layer h x V'/t; biases of
    the linear layers with ``--add_bias_linear``. Layers are those of one pipeline stage.
    The qkv width follows the model's query groups (AICB knows no GQA; for multi-head
    attention this is AICB's count exactly). Checked against AICB 23eec3c for dense,
    swiglu with biases, MoE and pp = 2.
    """
    sh = Shard.of(setup)
    h, t, v = sh.h, sh.t, sh.vocab
    f = sh.expert_ffn if sh.experts is not None else sh.ffn  # AICB's --ffn_hidden_size
    qkv_out = (sh.heads + 2 * sh.kv_groups) * sh.head_dim
    embedding = 4 * (v // t) * h + sh.s * h
    layer = h * (qkv_out // t) + h * (sh.heads * sh.head_dim // t) + 3 * h
    if sh.experts is not None:
        layer += 2 * h * (f * sh.local_experts // t)
    else:
        layer += 2 * h * (f // t)
    if sh.bias:
        layer += qkv_out // t + h
        if sh.experts is None:
            layer += f // t + h
    output = h * (v // t) + (v // t if sh.bias else 0)
    return embedding + sh.layers * layer + output


# -- the kernels of each section -------------------------------------------------------


def operators(setup: TrainingSetup) -> list[Operator]:
    """The kernels of every AIOB section for this setup's rank, in AICB's order."""
    sh = check_shard(setup)
    n, h, t = sh.tokens, sh.h, sh.t
    ops: list[Operator] = []

    # Emb: AICB's MegatronEmbedding._apply.
    emb: list[Kernel] = []
    if t > 1:
        ids = INT64 * n
        emb += [
            _elementwise("ids<0", ids, n), _elementwise("ids>=V/t", ids, n), _elementwise("mask_or", 2 * n, n),
            _elementwise("clone", ids, ids), _elementwise("sub", ids, ids), _elementwise("masked_fill", ids + n, ids),
        ]
    emb += [
        _elementwise("word_gather_int64", INT64 * n * h + INT64 * n, INT64 * n * h),
        _elementwise("position_embedding_fp32", FP32 * sh.s * h + INT64 * sh.s, FP32 * sh.s * h),
        _elementwise("add_to_fp32", INT64 * n * h + FP32 * sh.s * h, FP32 * n * h, flops=n * h),
        _elementwise("transpose_copy", FP32 * n * h, FP32 * n * h),
    ]
    ops.append(Operator("Emb", tuple(emb), (_elementwise("embedding.grad", BF16 * n * h + INT64 * n, 2 * FP32 * n * h),)))

    def norm(section: str) -> Operator:
        rows = sh.norm_rows
        fwd = Kernel(f"{section}.fwd", "memory", 8.0 * rows * h, BF16 * rows * h * 2 + 2 * BF16 * h + 2 * FP32 * rows)
        bwd = (
            Kernel(f"{section}.dgrad", "memory", 10.0 * rows * h, BF16 * rows * h * 3 + 2 * FP32 * rows),
            Kernel(f"{section}.dparams", "memory", 2.0 * rows * h, BF16 * rows * h * 2 + 2 * FP32 * h),
        )
        return Operator(section, (fwd,), bwd)

    ops.append(norm("layernorm"))
    if setup.model.is_mla:
        ops += mla.operators(setup)
    else:
        ops += _attention(sh)
    ops.append(norm("layernorm2"))
    ops += _mlp(sh)
    ops.append(norm("layernorm_post"))
    vocab_local = sh.vocab // t
    ops.append(Operator("logit_time", (_gemm("logits", n, h, vocab_local),), _gemm_backward("logits", n, h, vocab_local)))

    param = mla.aicb_model_param(setup) if setup.model.is_mla else aicb_model_param(setup)
    values = param // t
    ops.append(Operator("param_time", (_elementwise("grad_buffer_div_dp", FP32 * values, FP32 * values, flops=values),)))
    assert [op.section for op in ops] == list(DEEPSEEK_SECTIONS if setup.model.is_mla else STANDARD_SECTIONS)
    return ops


def _attention(sh: Shard) -> list[Operator]:
    """The three attention sections of AICB's Megatron AIOB model."""
    n, h, t = sh.tokens, sh.h, sh.t
    ops: list[Operator] = []
    ops.append(Operator("atten_qkv", (_gemm("qkv", n, h, sh.qkv_width),), _gemm_backward("qkv", n, h, sh.qkv_width)))

    heads, groups, d = sh.heads // t, sh.kv_groups // t, sh.head_dim
    causal_flops = 2.0 * sh.b * sh.s * sh.s * heads * d  # 4 b s^2 heads d, halved by the causal mask
    q_bytes, kv_bytes, lse = BF16 * n * heads * d, BF16 * n * groups * d, FP32 * sh.b * heads * sh.s
    flash_fwd = Kernel("flash.fwd", "attention", causal_flops, 2 * q_bytes + 2 * kv_bytes + lse)
    flash_bwd = Kernel("flash.bwd", "attention", 2.5 * causal_flops,
                       3 * q_bytes + 2 * kv_bytes + lse + q_bytes + 2 * kv_bytes + 2 * FP32 * n * heads * d)
    ops.append(Operator("atten_flash", (flash_fwd,), (flash_bwd,)))

    context = BF16 * n * heads * d
    ops.append(Operator(
        "atten_linear",
        (_elementwise("context_to_sbh", context, context), _gemm("proj", n, heads * d, h)),
        _gemm_backward("proj", n, heads * d, h),
    ))
    return ops


def _mlp(sh: Shard) -> list[Operator]:
    """The three MLP sections: a dense MLP, or the routed and shared experts and the router."""
    n, h, t = sh.tokens, sh.h, sh.t
    ops: list[Operator] = []
    m_e, experts = sh.expert_tokens, sh.local_experts
    # (name, tokens, fc1 width, fc2 width): the routed experts, then a shared expert's MLP.
    mlps = [(f"fc1[{e}]" if sh.experts else "fc1", m_e, sh.fc1_width, sh.fc2_width) for e in range(experts)]
    if sh.shared_ffn:
        mlps.append(("shared_fc1", n, sh.shared_ffn * (2 if sh.swiglu else 1) // t, sh.shared_ffn // t))
    fc1 = [_gemm(name, m, h, width) for name, m, width, _ in mlps]
    fc1_b = [k for name, m, width, _ in mlps for k in _gemm_backward(name, m, h, width)]
    if sh.experts is not None:
        router_tokens = n // t if sh.sp else n
        fc1.insert(0, _gemm("router", router_tokens, h, sh.experts))
        fc1_b[:0] = _gemm_backward("router", router_tokens, h, sh.experts)
    ops.append(Operator("mlp_linear_1", tuple(fc1), tuple(fc1_b)))

    act: list[Kernel] = []
    act_b: list[Kernel] = []
    for _, m, width, _ in mlps:
        wide = m * width  # fc1's output elements
        if sh.bias:
            act.append(_elementwise("bias_add", BF16 * wide + BF16 * width, BF16 * wide, flops=wide))
        if sh.swiglu:
            half = wide // 2
            act += [_elementwise("silu", BF16 * half, BF16 * half, flops=4 * half),
                    _elementwise("gate_mul", 2 * BF16 * half, BF16 * half, flops=half)]
            act_b.append(_elementwise("swiglu.bwd", 3 * BF16 * half, 2 * BF16 * half, flops=8 * half))
        else:
            act.append(_elementwise("gelu", BF16 * wide, BF16 * wide, flops=8 * wide))
            act_b.append(_elementwise("gelu.bwd", 2 * BF16 * wide, BF16 * wide, flops=12 * wide))
    ops.append(Operator("mlp_gelu", tuple(act), tuple(act_b)))

    fc2 = tuple(_gemm(name.replace("fc1", "fc2"), m, width, h) for name, m, _, width in mlps)
    fc2_b = tuple(k for name, m, _, width in mlps for k in _gemm_backward(name.replace("fc1", "fc2"), m, width, h))
    ops.append(Operator("mlp_linear_2", fc2, fc2_b))
    return ops


# -- times -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SectionEstimate:
    """One section's modelled time and what it rests on (times in microseconds)."""

    section: str
    kernels: int
    flops: float
    bytes: float
    compute_us: float  # sum over kernels of FLOPs / (peak x efficiency)
    memory_us: float  # sum over kernels of bytes / (bandwidth x efficiency)
    launch_us: float
    time_us: float  # sum over kernels of max(compute, memory) + launch
    bound: str  # the largest of the three terms: "compute", "memory" or "launch"
    bwd_flops: float
    bwd_bytes: float
    bwd_us: float


def kernel_us(kernel: Kernel, gpu: GpuSpec) -> tuple[float, float]:
    """(compute, memory) microseconds of one kernel on ``gpu`` at its efficiencies."""
    eff = gpu.attention_efficiency if kernel.kind == "attention" else gpu.gemm_efficiency
    compute = kernel.flops / (gpu.peak_flops * eff) * 1e6
    memory = kernel.bytes / (gpu.peak_bytes * gpu.memory_efficiency) * 1e6
    return compute, memory


def _time(kernels: tuple[Kernel, ...], gpu: GpuSpec) -> tuple[float, float, float, float]:
    compute = memory = total = 0.0
    for k in kernels:
        c, m = kernel_us(k, gpu)
        compute += c
        memory += m
        total += max(c, m) + gpu.launch_us
    return compute, memory, gpu.launch_us * len(kernels), total


def estimate(setup: TrainingSetup, gpu: GpuSpec) -> list[SectionEstimate]:
    """Every section's modelled time on ``gpu``."""
    out = []
    for op in operators(setup):
        compute, memory, launch, total = _time(op.forward, gpu)
        *_, bwd_total = _time(op.backward, gpu) if op.backward else (0.0, 0.0, 0.0, 0.0)
        terms = {"compute": compute, "memory": memory, "launch": launch}
        out.append(SectionEstimate(
            section=op.section, kernels=len(op.forward),
            flops=sum(k.flops for k in op.forward), bytes=sum(k.bytes for k in op.forward),
            compute_us=compute, memory_us=memory, launch_us=launch, time_us=total,
            bound=max(terms, key=terms.__getitem__),
            bwd_flops=sum(k.flops for k in op.backward), bwd_bytes=sum(k.bytes for k in op.backward),
            bwd_us=bwd_total,
        ))
    return out


def _us(value: float) -> int | float:
    """Microseconds at nanosecond resolution, written without an exponent (AICB's reader
    takes digits and one decimal point only)."""
    value = round(value, 3)
    return int(value) if value == int(value) else value


def to_profile(estimates: list[SectionEstimate], *, train_iter: int = 10) -> AiobProfile:
    """The estimates as an AIOB file: a model has no spread, so max = min = avg."""
    return AiobProfile(
        sections=tuple((e.section, OpTime(max=_us(e.time_us), min=_us(e.time_us), avg=_us(e.time_us))) for e in estimates),
        train_iter=train_iter,
    )


def profile(setup: TrainingSetup, gpu: GpuSpec, *, train_iter: int = 10) -> tuple[AiobProfile, list[SectionEstimate]]:
    estimates = estimate(setup, gpu)
    return to_profile(estimates, train_iter=train_iter), estimates


# -- the tidy table --------------------------------------------------------------------

CSV_COLUMNS = (
    "backend", "gpu", "section", "time_gpu_max", "time_gpu_min", "time_gpu_avg",
    "kernels", "flops", "bytes", "roofline_us", "compute_us", "memory_us", "launch_us", "bound",
    "bwd_flops", "bwd_bytes", "bwd_roofline_us",
)


def tidy_csv(profile: AiobProfile, *, backend: str, gpu: str, estimates: list[SectionEstimate] | None) -> str:
    """One row per section of ``profile``: its times (us) and, where the roofline covers the
    section, the FLOPs and bytes behind it and the roofline's own estimate for ``gpu``."""
    by_name = {e.section: e for e in estimates or ()}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for name, times in profile.sections:
        row: dict[str, object] = {
            "backend": backend, "gpu": gpu, "section": name,
            "time_gpu_max": times.max, "time_gpu_min": times.min, "time_gpu_avg": times.avg,
        }
        e = by_name.get(name)
        if e is not None:
            row.update(
                kernels=e.kernels, flops=int(e.flops), bytes=int(e.bytes), roofline_us=_us(e.time_us),
                compute_us=_us(e.compute_us), memory_us=_us(e.memory_us), launch_us=_us(e.launch_us), bound=e.bound,
                bwd_flops=int(e.bwd_flops), bwd_bytes=int(e.bwd_bytes), bwd_roofline_us=_us(e.bwd_us),
            )
        writer.writerow(row)
    return buf.getvalue()


def floor_us(flops: float, nbytes: float, gpu: GpuSpec) -> float:
    """The physical limit: no kernel is faster than its FLOPs at peak or its bytes at full bandwidth."""
    return max(flops / gpu.peak_flops, nbytes / gpu.peak_bytes) * 1e6

