"""The kernels Megatron-LM runs on one rank, forward and backward, and their times.

The AIOB profile (``roofline.py``) times what AICB's profiler times: forward operators
only, flash attention, no optimizer. To predict a real iteration, the Megatron schedule
needs more: each row's forward, input-gradient and weight-gradient compute, with every
kernel Megatron launches (the GEMMs, the attention core with or without flash attention,
norms, bias-GeLU, bias-dropout-add, residual gradients, the vocabulary-parallel cross
entropy, the gradient accumulation) and the optimizer step (Adam, once per iteration).
This module lists those kernels with their FLOPs and bytes for one rank and times them on
a GPU of ``gpus.py``. ``workload/megatron.py`` writes the times into the workload's compute
fields, so SimAI (or the built-in engine) simulates the iteration with them.

**Timing.** A kernel takes ``max(FLOPs / (peak x efficiency), bytes / (bandwidth x
memory efficiency), launch)``: GEMMs at ``gemm_efficiency(gpu, kernel)`` (shape-aware,
see there), flash attention at the GPU's ``attention_efficiency``, everything else is
memory-bound at the GPU's ``memory_efficiency``. Launches are asynchronous, so their cost
shows only as a floor: no kernel takes less than the GPU's ``launch_us``. Where the host
cannot keep ahead (Transformer Engine's modules in eager mode, NVIDIA's recipes without
CUDA graphs) each kernel adds the software's ``kernel_gap_us`` of GPU idle time besides
(``row_times``).

**What is counted** (per micro-batch; b micro batch, s sequence, h hidden, t TP, a heads and
g query groups per rank, d head size, f the FFN width per rank; "elements" are of
``[s, b, h]``, ``[s/t, b, h]`` with SP; activations in 16-bit, 2 bytes):

* per layer forward: input norm; QKV GEMM; the attention core: unfused (Megatron's
  ``CoreAttention``: ``baddbmm`` Q K^T, fused scale-mask-softmax, dropout, ``bmm`` with V,
  the context copy back to ``[s, b, h]``) or one flash-attention kernel; the projection
  GEMM; bias-dropout-add; the pre-MLP norm; fc1; bias-GeLU (or SwiGLU); fc2;
  bias-dropout-add. Without dropout (``dropout=False``) the dropouts are plain adds.
* per layer backward: each GEMM's input gradient (``ig``) and weight gradient (``wg``), the
  backward of every element-wise kernel above, the residual-gradient sums, the bias
  gradients (a reduction over the tokens), and, without gradient-accumulation fusion, the
  accumulation of each weight gradient into Megatron's main-gradient buffer (``wg``).
* the attention core again in backward with selective recompute; the whole layer's
  forward again with full recompute (separate rows of the schedule, see there).
* embedding: word and position gathers, their sum and dropout; backward: the dense
  embedding gradient (zeroed, then accumulated).
* output layer: final norm, logits GEMM, Megatron's vocabulary-parallel cross entropy in
  fp32 (the cast, max, subtract, exp, sum, divide; backward: the scale and the cast back).
* optimizer (once per iteration, over the rank's parameters, or its 1/d shard with the
  distributed optimizer): see ``optimizer_bytes_per_parameter``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..base.errors import CommsweepError
from ..setup.training import TrainingSetup
from .gpus import GpuSpec

HALF = 2  # bf16 / fp16
FP32 = 4


@dataclass(frozen=True)
class Software:
    """What Megatron-LM does beyond the model and the parallel layout.

    The presets (``SOFTWARE``) are the Megatron-LM of the published runs, each feature
    with its source; a run names one (``commsweep validate --megatron``).
    """

    name: str
    attention: str  # "unfused" (CoreAttention), "flash" (FlashAttention-2) or "cudnn" (TE's fused attention)
    dropout: bool  # hidden and attention dropout 0.1 (Megatron's defaults) or none
    fp16: bool  # fp16 with a loss scale (unscale and inf-check pass) rather than bf16
    gradient_accumulation_fusion: bool  # wgrad GEMMs accumulate into fp32 main grads
    async_tp: bool  # backward TP collectives overlap the next GEMM (see simulate/overlap.py)
    overlap_grad_reduce: bool  # DP gradient reduction overlaps the last backward pass
    scatter_gather_pp: bool  # pipeline sends split over the TP ranks (u/t each) even without SP
    distributed_optimizer: bool  # --use-distributed-optimizer
    description: str = field(default="", compare=False)
    # Transformer Engine's userbuffers (--tp-comm-overlap): every TP collective of a linear
    # layer, forward and backward, is cut into chunks pipelined with the layer's GEMM.
    tp_comm_overlap: bool = False
    # --overlap-p2p-communication: the interleaved schedule's sends run beside the next
    # chunk's compute (only with virtual pipeline stages; 1F1B's sends stay blocking).
    overlap_p2p: bool = False
    # FP8 GEMMs in the transformer layers (Transformer Engine; the precision column of a
    # runs file): set per run, not per version.
    fp8: bool = False
    # The rest are a training recipe's choices (a runs file's ``recipe`` column, from
    # ``commsweep/data/validation/recipes.csv``, each with its source):
    # the cross entropy: "megatron" (Megatron's vocabulary-parallel cross entropy, its fp32
    # passes counted below) or "te" (Transformer Engine's fused kernels, Megatron-Bridge's
    # cross_entropy_fusion_impl "te": one read of the logits forward, the gradient written
    # over them backward);
    cross_entropy: str = "megatron"
    # megatron-core's defer_embedding_wgrad_compute: the output layer's weight-gradient
    # GEMMs of that many micro-batches (its wgrad_deferral_limit; 0: all) wait for the
    # pipeline flush, where the last stage idles anyway; None: off;
    defer_embedding_wgrad: int | None = None
    # grad_reduce_in_fp32: gradients kept and reduced in fp32 (None: unless fp16, as
    # Megatron-LM's --accumulate-allreduce-grads-in-fp32 of the bf16 runs).
    grad_reduce_in_fp32: bool | None = None
    # vboost: the run's GPUs give more of their power budget to the cores
    # (``GpuSpec.vboosted``).
    vboost: bool = False
    # The GPU's idle time per kernel the host leaves (microseconds, added to each kernel's
    # time in ``row_times``): Transformer Engine's modules in eager mode spend more host
    # time per launch than their kernels take on the GPU whenever the queue runs dry
    # (FP8 te.Linear's forward leaves the H100 idle much of the time: NVIDIA/TransformerEngine
    # issue 761). Its mark on measured runs is a cost per micro-batch: the same layout
    # runs micro batch 2 cheaper per token than micro batch 1. **Fitted** for ``nemo`` on
    # one table, NeMo 24.07's (``bench/validate.py --fit-gap``); 0 elsewhere (the A100
    # fit's memory efficiency carries the gaps of the 2021-2022 Megatron-LM).
    kernel_gap_us: float = 0.0

    def configure(self, setup: TrainingSetup) -> TrainingSetup:
        """``setup`` as this Megatron-LM trains it: its optimizer and gradient precision."""
        fp32 = not self.fp16 if self.grad_reduce_in_fp32 is None else self.grad_reduce_in_fp32
        return replace(setup, distributed_optimizer=self.distributed_optimizer, grad_reduce_in_fp32=fp32)


# Fitted on NeMo 24.07's DGX-H100 table (bench/validate.py --fit-gap): the gap at which its
# two GPT-3 175B runs, the same layout at micro batch 1 (128 GPUs) and 2 (512 GPUs), come
# out with the same error.
NEMO_KERNEL_GAP_US = 20.0

SOFTWARE: dict[str, Software] = {
    s.name: s
    for s in (
        # Narayanan et al. 2021 (SC'21) ran Megatron-LM of early 2021: NVIDIA/Megatron-LM
        # examples/sc21/CONFIG.sh passes --fp16 --loss-scale 8192 and no
        # --accumulate-allreduce-grads-in-fp32 (fp16 gradients, all-reduced in fp16); the
        # unfused attention with Megatron's fused softmax; dropout 0.1 (the defaults);
        # local DDP (--DDP-impl local for the pipelined runs: all-reduce after the backward
        # pass); no gradient-accumulation fusion nor asynchronous TP all-reduce (both came
        # later in 2021); the scatter-gather optimisation of pipeline sends (its section 4.1).
        Software("2021", attention="unfused", dropout=True, fp16=True, gradient_accumulation_fusion=False,
                 async_tp=False, overlap_grad_reduce=False, scatter_gather_pp=True, distributed_optimizer=False,
                 description="Megatron-LM as in Narayanan et al. 2021: fp16, unfused attention, local DDP"),
        # Korthikanti et al. 2022 ran Megatron-LM of 2022: the same attention and dropout,
        # plus --async-tensor-model-parallel-allreduce (the backward all-reduce of the input
        # gradient overlaps the weight-gradient GEMM; with SP the weight-gradient all-gather
        # overlaps the input-gradient GEMM, the paper's section 4.2.2) and
        # --gradient-accumulation-fusion (fp32 main gradients accumulated by the wgrad GEMM),
        # bf16 (no loss-scale pass).
        Software("2022", attention="unfused", dropout=True, fp16=False, gradient_accumulation_fusion=True,
                 async_tp=True, overlap_grad_reduce=False, scatter_gather_pp=True, distributed_optimizer=False,
                 description="Megatron-LM as in Korthikanti et al. 2022: async TP, gradient-accumulation fusion"),
        # megatron-core today: flash attention (Transformer Engine), no dropout in current
        # LLM recipes, bf16, fused accumulation, async TP, overlapped gradient reduction.
        Software("core", attention="flash", dropout=False, fp16=False, gradient_accumulation_fusion=True,
                 async_tp=True, overlap_grad_reduce=True, scatter_gather_pp=False, distributed_optimizer=True,
                 description="megatron-core: flash attention, bf16, overlapped gradient reduction"),
        # NVIDIA's performance recipes (NeMo 24.07 and later, on megatron-core with
        # Transformer Engine): core with TE's cuDNN fused attention, plus the TP communication overlap of userbuffers
        # (tp_comm_overlap), the interleaved schedule's overlapped sends
        # (overlap_p2p_comm) and the distributed optimizer's overlapped gradient reduction
        # and parameter gather; FP8 per run (the tables' precision).
        Software("nemo", attention="cudnn", dropout=False, fp16=False, gradient_accumulation_fusion=True,
                 async_tp=True, overlap_grad_reduce=True, scatter_gather_pp=False, distributed_optimizer=True,
                 tp_comm_overlap=True, overlap_p2p=True, kernel_gap_us=NEMO_KERNEL_GAP_US,
                 description="NeMo performance recipes: megatron-core, TP communication overlap, overlapped sends"),
    )
}


def software(name: str) -> Software:
    from ..base.errors import ConfigError

    if name not in SOFTWARE:
        raise ConfigError(f"unknown Megatron-LM version {name!r}; known: {', '.join(SOFTWARE)}", key="--megatron")
    return SOFTWARE[name]


# -- kernels -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """One kernel: a GEMM (``m x k`` by ``k x n``, ``batch`` of them), flash attention, or
    a memory-bound kernel (FLOPs ignored)."""

    name: str
    kind: str  # "gemm", "attention" (FlashAttention-2), "fused_attention" (cuDNN's) or "memory"
    flops: float
    bytes: float
    m: int = 0  # a GEMM's rows; a fused attention kernel's sequence length (its efficiency table's key)
    n: int = 0
    k: int = 0
    batch: int = 1
    fp8: bool = False  # an FP8 GEMM (the GPU's FP8 peak)


def gemm(name: str, m: int, k: int, n: int, *, batch: int = 1, out_bytes: int = HALF,
         extra_bytes: float = 0.0, fp8: bool = False) -> Kernel:
    """``batch`` products ``[m, k] x [k, n]`` in 16-bit (or with 1-byte FP8 inputs): 2mkn
    FLOPs each; inputs read and the output written once (``out_bytes`` per output value: 8
    for an fp32 accumulation, read and written)."""
    width = 1 if fp8 else HALF
    return Kernel(name, "gemm", 2.0 * batch * m * k * n,
                  batch * (width * (m * k + k * n) + out_bytes * m * n) + extra_bytes, m=m, n=n, k=k, batch=batch,
                  fp8=fp8)


def memory(name: str, nbytes: float) -> Kernel:
    return Kernel(name, "memory", 0.0, float(nbytes))


@dataclass(frozen=True)
class Shape:
    """One rank's shapes."""

    b: int
    s: int
    h: int
    t: int
    a: int  # attention heads on this rank
    g: int  # key/value groups on this rank
    d: int  # head size
    f: int  # FFN width on this rank
    swiglu: bool
    bias: bool
    rmsnorm: bool
    rope: bool
    sp: bool
    vocab: int  # padded vocabulary on this rank (V'/t)
    # Multi-latent attention: d is a query/key head (nope + rope parts), g = a (every head
    # its own key and value), dv a value head, d_rope the rotated part (0: all of d).
    dv: int = 0
    d_rope: int = 0
    # Context parallelism: s is the rank's s/cp tokens; cp_comm_type says how Transformer
    # Engine's attention reaches the others' (``_cp_attention_core``), cp_a2a the
    # all-to-all group's size (a2a: cp; a2a+p2p: the first hierarchical size; else 1).
    cp: int = 1
    cp_comm_type: str = "p2p"
    cp_a2a: int = 1

    @classmethod
    def of(cls, setup: TrainingSetup) -> "Shape":
        m, t = setup.model, setup.tp
        mla = {}
        if m.is_mla:
            mla = dict(g=m.num_attention_heads // t, d=m.qk_head_dim, dv=m.v_head_dim, d_rope=m.qk_rope_head_dim)
        kind = setup.cp_comm_type
        a2a = setup.cp if kind == "a2a" else (setup.hierarchical_cp or (1, 1))[0] if kind == "a2a+p2p" else 1
        return cls(**{
            **dict(b=setup.micro_batch, s=setup.seq_per_rank, h=m.hidden_size, t=t,
                   a=m.num_attention_heads // t, g=m.kv_groups // t, d=m.head_dim, f=m.ffn_hidden_size // t,
                   swiglu=m.swiglu, bias=m.add_bias_linear, rmsnorm=m.normalization == "rmsnorm",
                   rope=m.position_embedding == "rope", sp=setup.sp and t > 1, vocab=setup.padded_vocab // t,
                   cp=setup.cp, cp_comm_type=kind, cp_a2a=a2a),
            **mla})

    @property
    def v(self) -> int:
        """A value head's width (a query/key head's but with MLA)."""
        return self.dv or self.d

    @property
    def n(self) -> int:
        """Tokens of the micro-batch (rows of every GEMM)."""
        return self.b * self.s

    @property
    def rows(self) -> int:
        """Tokens the element-wise kernels outside the TP region see: n/t with SP."""
        return self.n // self.t if self.sp else self.n

    @property
    def fc1(self) -> int:
        return self.f * (2 if self.swiglu else 1)

    @property
    def qkv(self) -> int:
        return (self.a + 2 * self.g) * self.d


def _norm(name: str, rows: int, h: int) -> tuple[Kernel, tuple[Kernel, ...]]:
    """Forward: read x, write y; backward: read x and dy, write dx, then the parameters'
    gradients (a second read of x and dy)."""
    return (memory(f"{name}.fwd", 2 * HALF * rows * h),
            (memory(f"{name}.dgrad", 3 * HALF * rows * h), memory(f"{name}.dparams", 2 * HALF * rows * h)))


def _dropout_add(name: str, elements: int, dropout: bool, bias: bool) -> tuple[Kernel, tuple[Kernel, ...]]:
    """Megatron's fused bias-dropout-add: read x and the residual, write y (and the 1-byte
    mask). Backward: the dropout's gradient (read dy and the mask, write), the residual
    branches' gradient sum (read two, write one) and the bias gradient (read dy)."""
    mask = 1 if dropout else 0
    fwd = memory(f"{name}.fwd", (3 * HALF + mask) * elements)
    bwd = [memory(f"{name}.residual_grad_sum", 3 * HALF * elements)]
    if dropout:
        bwd.append(memory(f"{name}.dropout_bwd", (2 * HALF + mask) * elements))
    if bias:
        bwd.append(memory(f"{name}.bias_grad", HALF * elements))
    return fwd, tuple(bwd)


@dataclass(frozen=True)
class Part:
    """The kernels of one schedule row: forward, input gradient, weight gradient."""

    fwd: tuple[Kernel, ...] = ()
    ig: tuple[Kernel, ...] = ()
    wg: tuple[Kernel, ...] = ()


def _linear(name: str, m: int, k: int, n: int, sw: Software, *, bias: bool, main_grad: int,
            fp8: bool = False) -> Part:
    """A linear layer's GEMMs: forward, input gradient, weight gradient (accumulated into
    the main gradient: by the GEMM with fusion, else by a separate pass that reads the
    16-bit gradient and reads and writes the main gradient of ``main_grad`` bytes).

    ``fp8``: Transformer Engine's FP8 linear: the GEMMs at the FP8 rate, plus the casts it
    adds, each a streaming pass: in forward the input's cast and transpose (read 16-bit,
    write the FP8 value and its transpose for the weight gradient), in backward the output
    gradient's (the same). The weights' casts happen once per iteration, not counted."""
    fwd: tuple[Kernel, ...] = (gemm(f"{name}.fwd", m, k, n, fp8=fp8),)
    dgrad: tuple[Kernel, ...] = (gemm(f"{name}.dgrad", m, n, k, fp8=fp8),)
    if fp8:
        fwd = (memory(f"{name}.cast_transpose", (HALF + 2) * m * k), *fwd)
        dgrad = (memory(f"{name}.grad_cast_transpose", (HALF + 2) * m * n), *dgrad)
    if sw.gradient_accumulation_fusion:
        wg: tuple[Kernel, ...] = (gemm(f"{name}.wgrad", k, m, n, out_bytes=2 * FP32, fp8=fp8),)
    else:
        wg = (gemm(f"{name}.wgrad", k, m, n, fp8=fp8),
              memory(f"{name}.grad_accumulate", (HALF + 2 * main_grad) * k * n))
    if bias:
        wg += (memory(f"{name}.bias_grad", HALF * m * n),)
    return Part(fwd=fwd, ig=dgrad, wg=wg)


def _attention_core(sh: Shape, sw: Software) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """The attention between the QKV and projection GEMMs: (forward, backward)."""
    b, s, a, g, d, n, v = sh.b, sh.s, sh.a, sh.g, sh.d, sh.n, sh.v
    fwd: list[Kernel] = []
    bwd: list[Kernel] = []
    if sh.rope:
        # MLA rotates the queries' RoPE part and the one RoPE key all heads share.
        rotated = HALF * n * (a + 1) * sh.d_rope if sh.d_rope else HALF * n * (a + g) * d
        fwd.append(memory("rope.fwd", 2 * rotated))
        bwd.append(memory("rope.bwd", 2 * rotated))
    if sh.cp > 1:
        cp_fwd, cp_bwd = _cp_attention_core(sh, sw)
        return (*fwd, *cp_fwd), (*bwd, *cp_bwd)
    if sw.attention in ("flash", "cudnn"):
        # One kernel each way (FlashAttention-2, or TE's cuDNN fused attention, timed at the
        # GPU's fused_attention_efficiency): the same FLOPs and bytes.
        kind = "attention" if sw.attention == "flash" else "fused_attention"
        causal = 1.0 * b * s * s * a * (d + v)  # 2 b s^2 a (d + v), halved by the causal mask
        q, k, val, o, lse = HALF * n * a * d, HALF * n * g * d, HALF * n * g * v, HALF * n * a * v, FP32 * b * a * s
        fwd.append(Kernel(f"{sw.attention}.fwd", kind, causal, q + k + val + o + lse, m=s))
        bwd.append(Kernel(f"{sw.attention}.bwd", kind, 2.5 * causal,
                          2 * (q + k + val + o) + lse + 2 * FP32 * n * a * d, m=s))
        return tuple(fwd), tuple(bwd)
    scores = b * a * s * s
    if g != a:  # megatron-core repeats the key/value groups to every head first
        fwd.append(memory("kv_expand", 2 * HALF * n * (g + a) * d))
        bwd.append(memory("kv_expand.bwd", 2 * HALF * n * (g + a) * d))
    mask = 1 if sw.dropout else 0
    fwd += [
        gemm("scores.qk", s, d, s, batch=b * a),
        memory("softmax.fwd", 2 * HALF * scores),
    ]
    if sw.dropout:
        fwd.append(memory("attention_dropout.fwd", (2 * HALF + mask) * scores))
    fwd += [
        gemm("context.av", s, s, v, batch=b * a),
        memory("context.to_sbh", 2 * HALF * n * a * v),
    ]
    bwd += [
        memory("context.to_sbh.bwd", 2 * HALF * n * a * v),
        gemm("context.dprobs", s, v, s, batch=b * a),
        gemm("context.dv", s, s, v, batch=b * a),
    ]
    if sw.dropout:
        bwd.append(memory("attention_dropout.bwd", (2 * HALF + mask) * scores))
    bwd += [
        memory("softmax.bwd", 3 * HALF * scores),
        gemm("scores.dq", s, s, d, batch=b * a),
        gemm("scores.dk", s, s, d, batch=b * a),
    ]
    return tuple(fwd), tuple(bwd)


def cp_attention_kernels(sh: Shape) -> tuple[int, int]:
    """Context parallelism's attention kernels per pass on one rank, and the sequence length
    each one's efficiency is read at: Transformer Engine v2.9
    (``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``).

    Each CP rank holds s/c tokens (the i-th and (2c-1-i)-th of 2c chunks, which balances
    the causal mask), so every variant does 1/c of the causal attention's work, in pieces:
    ``p2p`` (``AttnFuncWithCPAndKVP2P.forward``) c ring steps, each a diagonal (causal s/c
    against s/c) or half a block (s/c against s/(2c), or its second half against s/c): the
    work of a causal s/c kernel each; ``all_gather`` (``AttnFuncWithCPAndKVAllGather``)
    one kernel per local chunk, two; ``a2a`` (``AttnFuncWithCPAndQKVOA2A``) one kernel over
    the whole sequence with a/c heads; ``a2a+p2p`` the ring's r steps over s*a/c tokens
    (a, r the hierarchical sizes)."""
    kind, c = sh.cp_comm_type, sh.cp
    if kind == "p2p":
        return c, sh.s
    if kind == "all_gather":
        return 2, sh.s
    if kind == "a2a":
        return 1, sh.s * c
    return c // sh.cp_a2a, sh.s * sh.cp_a2a


def _cp_attention_core(sh: Shape, sw: Software) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """The fused attention under context parallelism (``cp_attention_kernels``), forward and
    backward, with the passes Transformer Engine adds around its kernels: the ring's output
    correction per step in fp32 (``flash_attn_fwd_out_correction``: read the step's output,
    read and write the running one) and, in backward, dQ and dKV added up step by step
    (``dq.add_``, ``dk.add_``); the all-gather's reordering of the gathered K and V
    (``torch.index_select``), again in backward with dK and dV; the all-to-all's reordering
    of Q, K, V and O before and after (``reorder_seq_chunks_for_a2a_*``). The exchange
    itself is communication, priced in ``workload/megatron_context_parallel.py``."""
    if sw.attention not in ("flash", "cudnn"):
        raise CommsweepError("context parallelism runs in Transformer Engine's fused attention; "
                         f"the {sw.name} Megatron-LM has {sw.attention} attention")
    b, s, a, g, d, n, v = sh.b, sh.s, sh.a, sh.g, sh.d, sh.n, sh.v
    count, length = cp_attention_kernels(sh)
    kind = "attention" if sw.attention == "flash" else "fused_attention"
    work = sh.cp * b * s * s * a * (d + v) / count  # the rank's 1/c of the causal work, per kernel
    q, k, val, o, lse = HALF * n * a * d, HALF * n * g * d, HALF * n * g * v, HALF * n * a * v, FP32 * b * a * s
    step = Kernel(f"{sw.attention}.cp_step.fwd", kind, work, q + k + val + o + lse, m=length)
    step_b = Kernel(f"{sw.attention}.cp_step.bwd", kind, 2.5 * work,
                    2 * (q + k + val + o) + lse + 2 * FP32 * n * a * d, m=length)
    fwd, bwd = [step] * count, [step_b] * count
    if sh.cp_comm_type in ("p2p", "a2a+p2p"):
        fwd += [memory("cp.out_correction", (HALF + 2 * FP32) * n * a * v + 2 * lse)] * count
        bwd += [memory("cp.dq_add", 3 * HALF * n * a * d), memory("cp.dkv_add", 3 * (k + val))] * count
    elif sh.cp_comm_type == "all_gather":
        fwd.append(memory("cp.kv_reorder", 2 * sh.cp * (k + val)))
        bwd += [memory("cp.kv_reorder", 2 * sh.cp * (k + val)), memory("cp.dkv_reorder", 2 * sh.cp * (k + val))]
    if sh.cp_comm_type in ("a2a", "a2a+p2p"):
        fwd = [memory("cp.a2a_reorder", 2 * (q + k + val)), *fwd, memory("cp.a2a_reorder", 2 * o)]
        bwd = [memory("cp.a2a_reorder", 2 * o), *bwd, memory("cp.a2a_reorder", 2 * (q + k + val))]
    return tuple(fwd), tuple(bwd)


def _mla_projections(setup: TrainingSetup, sh: Shape, sw: Software, ln1: Kernel, ln1_b: tuple[Kernel, ...],
                     main_grad: int, fp8: bool) -> Part:
    """Multi-latent attention's projections (``workload/megatron_mla.py``), in place of the
    QKV GEMM: the q and kv down projections, whole on every TP rank, over the rank's tokens
    (its sequence shard with SP); the latent norms; the up projections, split over TP, over
    the whole sequence. Without a query latent, linear_q_proj from the hidden state."""
    m, n, rows, h, a = setup.model, sh.n, sh.rows, sh.h, sh.a
    fwd: list[Kernel] = [ln1]
    ig: list[Kernel] = []
    wg: list[Kernel] = []

    def add(part: Part) -> None:
        fwd.extend(part.fwd)
        ig[:0] = part.ig  # backward runs in reverse
        wg.extend(part.wg)

    if m.q_lora_rank is not None:
        add(_linear("q_down", rows, h, m.q_lora_rank, sw, bias=False, main_grad=main_grad, fp8=fp8))
        q_norm, q_norm_b = _norm("q_latent_norm", rows, m.q_lora_rank)
        add(Part(fwd=(q_norm,), ig=q_norm_b))
        add(_linear("q_up", n, m.q_lora_rank, a * sh.d, sw, bias=False, main_grad=main_grad, fp8=fp8))
    else:
        add(_linear("q_proj", n, h, a * sh.d, sw, bias=False, main_grad=main_grad, fp8=fp8))
    add(_linear("kv_down", rows, h, m.kv_lora_rank + m.qk_rope_head_dim, sw, bias=False, main_grad=main_grad,
                fp8=fp8))
    kv_norm, kv_norm_b = _norm("kv_latent_norm", rows, m.kv_lora_rank)
    add(Part(fwd=(kv_norm,), ig=kv_norm_b))
    add(_linear("kv_up", n, m.kv_lora_rank, a * (m.qk_nope_head_dim + sh.v), sw, bias=False, main_grad=main_grad,
                fp8=fp8))
    return Part(fwd=tuple(fwd), ig=(*ig, *ln1_b), wg=tuple(wg))


@dataclass(frozen=True)
class LayerKernels:
    """One rank's kernels per schedule row kind (see ``workload/megatron.py``)."""

    parts: dict[str, Part]
    attention_core: tuple[Kernel, ...]  # what selective recompute runs again
    attention_core_bwd: tuple[Kernel, ...] = ()


def kernels(setup: TrainingSetup, sw: Software) -> LayerKernels:
    """The kernels of every row kind of the Megatron schedule, for one micro-batch."""
    sh = Shape.of(setup)
    n, h, rows = sh.n, sh.h, sh.rows
    main_grad = FP32 if setup.grad_reduce_in_fp32 else HALF
    parts: dict[str, Part] = {}

    ln1, ln1_b = _norm("input_norm", rows, h)
    fp8 = sw.fp8  # the transformer layers' linears; the output layer stays 16-bit
    if setup.model.is_mla:
        parts["attention_qkv"] = _mla_projections(setup, sh, sw, ln1, ln1_b, main_grad, fp8)
    else:
        qkv = _linear("qkv", n, h, sh.qkv, sw, bias=sh.bias, main_grad=main_grad, fp8=fp8)
        parts["attention_qkv"] = Part(fwd=(ln1, *qkv.fwd), ig=(*qkv.ig, *ln1_b), wg=qkv.wg)

    core, core_b = _attention_core(sh, sw)
    proj = _linear("proj", n, sh.a * sh.v, h, sw, bias=False, main_grad=main_grad, fp8=fp8)
    parts["attention_proj"] = Part(fwd=(*core, *proj.fwd), ig=(*proj.ig, *core_b), wg=proj.wg)

    bda1, bda1_b = _dropout_add("attention_residual", rows * h, sw.dropout, sh.bias)
    ln2, ln2_b = _norm("pre_mlp_norm", rows, h)
    fc1 = _linear("fc1", n, h, sh.fc1, sw, bias=sh.bias, main_grad=main_grad, fp8=fp8)
    wide = n * sh.f
    if sh.swiglu:
        act, act_b = memory("swiglu.fwd", 3 * HALF * wide), memory("swiglu.bwd", 5 * HALF * wide)
    else:  # bias-GeLU: read the fc1 output, write the activation; backward reads both
        act, act_b = memory("bias_gelu.fwd", 2 * HALF * wide), memory("bias_gelu.bwd", 3 * HALF * wide)
    parts["mlp_fc1"] = Part(fwd=(bda1, ln2, *fc1.fwd, act), ig=(act_b, *fc1.ig, *ln2_b, *bda1_b), wg=fc1.wg)

    fc2 = _linear("fc2", n, sh.f, h, sw, bias=False, main_grad=main_grad, fp8=fp8)
    bda2, bda2_b = _dropout_add("mlp_residual", rows * h, sw.dropout, sh.bias)
    parts["mlp_fc2"] = Part(fwd=(*fc2.fwd, bda2), ig=(*bda2_b, *fc2.ig), wg=fc2.wg)

    # Embedding: gathers of the word (and learned position) rows, their sum, dropout.
    m = setup.model
    emb_fwd = [memory("word_gather", 2 * HALF * n * h)]
    emb_wg = [memory("word_grad.zero", HALF * sh.vocab * h), memory("word_grad.accumulate", 3 * HALF * n * h)]
    if m.position_embedding == "learned":
        emb_fwd.append(memory("position_add", 3 * HALF * n * h))
        emb_wg.append(memory("position_grad", 3 * HALF * n * h))
    if sw.dropout:
        emb_fwd.append(memory("embedding_dropout", (2 * HALF + 1) * n * h))
        emb_wg.insert(0, memory("embedding_dropout.bwd", (2 * HALF + 1) * n * h))
    parts["embedding"] = Part(fwd=tuple(emb_fwd), wg=tuple(emb_wg))

    # Output layer: final norm, logits, and the vocabulary-parallel cross entropy in fp32.
    lnf, lnf_b = _norm("final_norm", rows, h)
    logits = _linear("logits", n, h, sh.vocab, sw, bias=False, main_grad=main_grad)
    cells = n * sh.vocab
    if sw.cross_entropy == "te":
        # Transformer Engine's Triton kernels (transformer_engine/pytorch/triton/cross_entropy.py):
        # an online softmax reads the 16-bit logits once (the max and the sum in one pass);
        # backward reads them again and writes the gradient over them.
        ce_fwd = memory("cross_entropy.fwd", HALF * cells)
        ce_bwd = memory("cross_entropy.bwd", 2 * HALF * cells)
    else:
        ce_fwd = memory("cross_entropy.fwd", (HALF + FP32 + FP32 + 2 * FP32 + 2 * FP32 + FP32 + 2 * FP32) * cells)
        ce_bwd = memory("cross_entropy.bwd", (2 * FP32 + FP32 + HALF) * cells)
    parts["output_layer"] = Part(fwd=(lnf, *logits.fwd, ce_fwd), ig=(ce_bwd, *logits.ig, *lnf_b), wg=logits.wg)
    return LayerKernels(parts=parts, attention_core=core, attention_core_bwd=core_b)


def optimizer_bytes_per_parameter(setup: TrainingSetup, sw: Software) -> dict[str, int]:
    """HBM bytes per parameter of Megatron's mixed-precision optimizer step, pass by pass.

    ``grad_copy``: the 16-bit main gradient cast to fp32 (none when it is fp32 already);
    ``unscale``: fp16's loss-scale division and inf check (read and write fp32);
    ``grad_norm``: the L2 norm for clipping (read) and the clipping scale (read, write);
    ``adam``: apex's fused Adam (read the gradient, parameter and both moments, write the
    parameter and both moments, fp32); ``param_copy``: the fp32 parameters cast back to the
    16-bit model copy; ``zero_grad``: the main-gradient buffer cleared for the next
    iteration (the whole buffer, also with the distributed optimizer).
    """
    main_grad = FP32 if setup.grad_reduce_in_fp32 else HALF
    return {
        "grad_copy": 0 if main_grad == FP32 else HALF + FP32,
        "unscale": 2 * FP32 if sw.fp16 else 0,
        "grad_norm": 3 * FP32,
        "adam": 7 * FP32,
        "param_copy": FP32 + HALF,
    }


# -- times -------------------------------------------------------------------------------


def gemm_efficiency(gpu: GpuSpec, kernel: Kernel) -> float:
    """The fraction of peak a GEMM of this shape reaches on ``gpu``.

    A GPU entry with a measured table (``GpuSpec.gemm_table``: FLOPs per GEMM ->
    efficiency) is interpolated in log FLOPs. Otherwise the GPU's large-GEMM efficiency is
    scaled by the **wave quantization** of the output tiles: cuBLAS cuts the result into
    tiles, each computed by one SM, in waves of ``sm_count`` tiles; the last wave runs
    part-empty, so ``w`` tiles use ``w / (sm_count * ceil(w / sm_count))`` of the GPU.
    cuBLAS's Ampere and Hopper kernels come in tiles of 256x128, 128x256 and 128x128
    outputs (the ``..._256x128_...`` in their names); it picks the one that fills the GPU
    best, and splits the K dimension over more SMs when there are fewer tiles than SMs
    (``split_k``). Batched products tile each matrix of the batch.
    """
    if gpu.gemm_table and not kernel.fp8:
        return _interpolate(gpu.gemm_table, kernel.flops / kernel.batch)
    large = gpu.fp8_gemm_efficiency if kernel.fp8 else gpu.gemm_efficiency
    return large * max(_wave_use(kernel, tile, gpu.sm_count) for tile in GEMM_TILES)


GEMM_TILES = ((256, 128), (128, 256), (128, 128))
SPLIT_K_MIN = 256  # no split leaves a slice of K shorter than this


def _wave_use(kernel: Kernel, tile: tuple[int, int], sms: int) -> float:
    """The share of the SMs' time the GEMM's tiles keep busy, with split-K when they are few."""
    tiles = kernel.batch * math.ceil(kernel.m / tile[0]) * math.ceil(kernel.n / tile[1])
    if tiles < sms:
        tiles *= max(1, min(sms // tiles, kernel.k // SPLIT_K_MIN))
    return tiles / (math.ceil(tiles / sms) * sms)


def _interpolate(table: tuple[tuple[float, float], ...], flops: float) -> float:
    points = sorted(table)
    if flops <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if flops <= x1:
            w = (math.log(flops) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + w * (y1 - y0)
    return points[-1][1]


def kernel_us(kernel: Kernel, gpu: GpuSpec) -> float:
    """Microseconds of one kernel on ``gpu``: its compute or its memory traffic, whichever
    is longer, and never less than the GPU's ``launch_us`` (eager PyTorch issues one kernel
    at a time from one CPU thread, so tiny kernels run at the launch rate)."""
    memory_us = kernel.bytes / (gpu.peak_bytes * gpu.memory_efficiency) * 1e6
    if kernel.kind == "memory":
        return max(memory_us, gpu.launch_us)
    if kernel.kind == "attention":
        eff = gpu.attention_efficiency
    elif kernel.kind == "fused_attention" and gpu.fused_attention_table and kernel.m:
        eff = _interpolate(gpu.fused_attention_table, kernel.m)  # by sequence length
    elif kernel.kind == "fused_attention":
        eff = gpu.fused_attention_efficiency or gpu.attention_efficiency
    else:
        eff = gemm_efficiency(gpu, kernel)
    peak = gpu.fp8_tflops * 1e12 if kernel.fp8 else gpu.peak_flops
    return max(kernel.flops / (peak * eff) * 1e6, memory_us, gpu.launch_us)


def total_us(ks: tuple[Kernel, ...] | list[Kernel], gpu: GpuSpec) -> float:
    return sum(kernel_us(k, gpu) for k in ks)


@dataclass(frozen=True)
class RowTimes:
    """Compute per row kind of the Megatron schedule, in microseconds: (fwd, ig, wg) for
    each of ``embedding``, ``attention_qkv``, ``attention_proj``, ``mlp_fc1``,
    ``mlp_fc2``, ``output_layer``, ``optimizer``; with full recompute also
    ``recompute_attention`` and ``recompute_mlp`` (the layer's forward, run in backward)."""

    rows: dict[str, tuple[float, float, float]]
    # per row kind, (weight-gradient, input-gradient) GEMM us: what an asynchronous TP
    # collective of that row hides behind (``simulate/overlap.py``)
    gemm_us: dict[str, tuple[float, float]]
    # per row kind, the forward GEMM us (what userbuffers hide a forward TP collective behind)
    fwd_gemm_us: dict[str, float] = field(default_factory=dict)
    # context parallelism: one attention kernel's time forward and backward (with the
    # host's gap), what each step of the ring's KV exchange hides behind
    cp_step_us: tuple[float, float] = (0.0, 0.0)

    def get(self, kind: str) -> tuple[float, float, float]:
        return self.rows.get(kind, (0.0, 0.0, 0.0))


def row_times(setup: TrainingSetup, gpu: GpuSpec, sw: Software, *, parameters: int) -> RowTimes:
    """The compute of every row kind of the Megatron schedule for ``setup`` on ``gpu``;
    ``parameters``: the rank's (its pipeline stage's) parameter count, for the optimizer.
    Each kernel of a row adds ``sw.kernel_gap_us`` (the host's gaps); the GEMM times that
    TP collectives hide behind (``gemm_us``, ``fwd_gemm_us``) are the GPU's alone."""
    lk = kernels(setup, sw)
    rows: dict[str, tuple[float, float, float]] = {}
    gemm_us: dict[str, tuple[float, float]] = {}
    fwd_gemm_us: dict[str, float] = {}

    def busy(ks: tuple[Kernel, ...]) -> float:
        return total_us(ks, gpu) + sw.kernel_gap_us * len(ks)

    for kind, part in lk.parts.items():
        fwd, ig, wg = (busy(part.fwd), busy(part.ig), busy(part.wg))
        if kind == "attention_proj" and setup.recompute_mode == "selective":
            ig += busy(lk.attention_core)
        rows[kind] = (fwd, ig, wg)
        gemm_us[kind] = (busy(tuple(k for k in part.wg if k.kind == "gemm")),
                         busy(tuple(k for k in part.ig if k.kind == "gemm")))
        fwd_gemm_us[kind] = busy(tuple(k for k in part.fwd if k.kind == "gemm"))
    if sw.defer_embedding_wgrad is not None and setup.pp > 1 and "output_layer" in rows:
        rows["output_layer"] = _deferred_output_wgrad(setup, sw.defer_embedding_wgrad, rows)
    if setup.recompute_mode == "full":
        rows["recompute_attention"] = (0.0, rows["attention_qkv"][0] + rows["attention_proj"][0], 0.0)
        rows["recompute_mlp"] = (0.0, rows["mlp_fc1"][0] + rows["mlp_fc2"][0], 0.0)
    rows["optimizer"] = (0.0, 0.0, optimizer_us(setup, gpu, sw, parameters))
    steps = [busy((k,)) for k in (*lk.attention_core, *lk.attention_core_bwd) if ".cp_step." in k.name]
    cp_step_us = (steps[0], steps[-1]) if steps else (0.0, 0.0)
    return RowTimes(rows=rows, gemm_us=gemm_us, fwd_gemm_us=fwd_gemm_us, cp_step_us=cp_step_us)


def _deferred_output_wgrad(setup: TrainingSetup, limit: int,
                           rows: dict[str, tuple[float, float, float]]) -> tuple[float, float, float]:
    """The output layer's (fwd, ig, wg) per micro-batch with megatron-core's
    defer_embedding_wgrad_compute: the weight-gradient GEMMs of ``limit`` micro-batches (0:
    all of them) run in the pipeline flush, where the last stage waits for the p - 1
    stages before it to finish their last backward passes. They leave the steady state
    (the per-micro-batch rows) as far as they fit in that wait: p - 1 backward passes of
    one model chunk (the stage's layers over the virtual pipeline)."""
    fwd, ig, wg = rows["output_layer"]
    ga = max(1, setup.global_batch // (setup.micro_batch * setup.dp))
    deferred = ga if limit == 0 else min(limit, ga)
    layer_bwd = sum(rows[k][1] + rows[k][2] for k in ("attention_qkv", "attention_proj", "mlp_fc1", "mlp_fc2"))
    wait = (setup.pp - 1) * setup.layers_per_chunk * layer_bwd
    return fwd, ig, wg - min(deferred * wg, wait) / ga


def optimizer_us(setup: TrainingSetup, gpu: GpuSpec, sw: Software, parameters: int) -> float:
    """The optimizer step over the rank's ``parameters`` (its 1/(d c) shard with the
    distributed optimizer), a streaming pass at the GPU's memory efficiency."""
    # The distributed optimizer shards over DP x CP (megatron-core's intra_dp_cp group).
    step = parameters // (setup.dp * setup.cp) if setup.distributed_optimizer else parameters
    main_grad = FP32 if setup.grad_reduce_in_fp32 else HALF
    nbytes = sum(optimizer_bytes_per_parameter(setup, sw).values()) * step + main_grad * parameters
    return kernel_us(memory("optimizer", nbytes), gpu)
