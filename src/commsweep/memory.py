"""Peak memory per GPU of a Megatron training setup, and whether it fits the GPU.

Model states per parameter of the rank's pipeline stage (mixed precision, Adam):

* weights: the 16-bit model copy, 2 bytes;
* gradients: Megatron's main-gradient buffer, 4 bytes (fp32, ``grad_reduce_in_fp32``) or 2;
* optimizer: the fp32 master weights and Adam's two moments, 12 bytes; the distributed
  optimizer keeps 1/d of them (the gradient buffer stays whole).

That is 18 bytes per parameter without the distributed optimizer: Korthikanti et al.
2022 ("Reducing Activation Recomputation in Large Transformer Models", section 2 and
Figure 1) count the same.

**Activations** follow Korthikanti et al.'s section 4, per transformer layer and
micro-batch (s sequence, b micro batch, h hidden, a heads, t TP, 16-bit values):

* attention: the norm's input 2sbh, the QKV input 2sbh, Q and K 4sbh, the softmax output
  2as²b, its dropout mask as²b and output 2as²b, V 2sbh, the projection's input 2sbh, the
  dropout mask sbh: 11sbh + 5as²b; MLP: the norm's input 2sbh, fc1's input 2sbh, GeLU's
  input 8sbh, fc2's input 8sbh, the dropout mask sbh: 19sbh. In all 34sbh + 5as²b.
* TP splits all but the norms' and the two GEMM inputs and the dropout masks (10sbh):
  sbh(10 + 24/t + 5as/(ht)); sequence parallelism splits those too: sbh(34 + 5as/h)/t.
* selective recompute drops the 5as²b of the attention core; full recompute keeps only
  each layer's input, 2sbh (2sbh/t with SP), and needs one layer's activations while it
  recomputes it.
* flash attention keeps no s² tensor (its softmax statistics are b·a·s fp32 values);
  without dropout there are no masks (and the softmax output is the values' input).

The first pipeline stage holds the most: the 1F1B schedule keeps p micro-batches in
flight there (each with the stage's L/p layers), the interleaved one p·(1 + (p-1)/(p·v))
(Korthikanti et al., equation 5; Narayanan et al. 2021 section 2.2.2); fewer when a batch
has fewer micro-batches. The last stage also keeps the fp32 logits of the cross entropy
(4sbV/t). The peak is the larger of the two stages.

Not counted: the CUDA context and allocator fragmentation, communication buffers and
temporary tensors; so ``fits`` is a necessary condition, with ``RESERVE_GIB`` kept free.
"""

from __future__ import annotations

from dataclasses import dataclass

from .training import TrainingSetup

GIB = 1 << 30
HALF = 2
FP32 = 4
# Kept free for the CUDA context, NCCL's buffers and the allocator (about what nvidia-smi
# shows a PyTorch process holding before any tensor exists, plus NCCL's channels).
RESERVE_GIB = 2.0


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the fullest pipeline stage, by kind."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    stage: int  # the stage that needs the most

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def total_gib(self) -> float:
        return self.total / GIB

    def fits(self, gpu_memory_gib: float) -> bool:
        """Whether it fits a GPU of ``gpu_memory_gib``, ``RESERVE_GIB`` kept free."""
        return self.total_gib <= gpu_memory_gib - RESERVE_GIB


def layer_activations(setup: TrainingSetup, *, flash_attention: bool, dropout: bool) -> tuple[int, int]:
    """Bytes one layer keeps for one micro-batch: (stored until its backward, the whole
    layer's working set while it is recomputed under full recompute)."""
    m, t = setup.model, setup.tp
    s, b, h, a = setup.seq_length, setup.micro_batch, m.hidden_size, m.num_attention_heads
    sp = setup.sp and t > 1
    kv = m.kv_groups * m.head_dim  # K and V are narrower with GQA
    ffn = m.ffn_hidden_size * (2 if m.swiglu else 1)  # the activation's input; its output is f wide
    mask = 1 if dropout else 0
    sbh = s * b * h
    # Replicated over TP unless SP: norm inputs, QKV and fc1 inputs, residual dropout masks.
    replicated = (2 + 2 + 2 + 2) * sbh + 2 * mask * sbh
    split = (HALF * s * b * (h + 2 * kv)  # Q, K, V
             + 2 * sbh  # the projection's input
             + HALF * s * b * ffn + HALF * s * b * m.ffn_hidden_size)  # the activation's and fc2's inputs
    if flash_attention:
        core = FP32 * a * s * b  # the softmax statistics
    else:
        core = (HALF + (mask + HALF if dropout else 0)) * a * s * s * b
    whole = (replicated / t if sp else replicated) + split / t + core / t
    if setup.recompute_mode == "selective":
        return int(whole - core / t), int(whole)
    if setup.recompute_mode == "full":
        return int(2 * sbh / (t if sp else 1)), int(whole)
    return int(whole), int(whole)


def in_flight(setup: TrainingSetup, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak."""
    p, v, g = setup.pp, setup.virtual_pipeline, setup.num_microbatches
    if p == 1:
        return 1.0
    if v > 1 and stage == 0:
        return min(g, p * (1 + (p - 1) / (p * v)))
    return float(min(g, p - stage))


def estimate(setup: TrainingSetup, parameters: dict[int, int], *, flash_attention: bool = True,
             dropout: bool = True) -> Memory:
    """Peak bytes per GPU; ``parameters``: the rank's parameter count per pipeline stage
    (at least the first and the last, ``workload.megatron.local_parameters``)."""
    stored, working = layer_activations(setup, flash_attention=flash_attention, dropout=dropout)
    grad = FP32 if setup.grad_reduce_in_fp32 else HALF
    optimizer_share = setup.dp if setup.distributed_optimizer else 1
    t, sbh = setup.tp, setup.seq_length * setup.micro_batch * setup.model.hidden_size
    best: Memory | None = None
    for stage, params in sorted(parameters.items()):
        activations = stored * setup.layers_per_stage * in_flight(setup, stage)
        if setup.recompute_mode == "full":
            activations += working
        if stage == setup.pp - 1:  # the cross entropy's fp32 logits and the final norm's input
            activations += FP32 * setup.seq_length * setup.micro_batch * setup.padded_vocab / t + HALF * sbh
        memory = Memory(
            weights=HALF * params, gradients=grad * params, optimizer=-(-12 * params // optimizer_share),
            activations=int(activations), stage=stage,
        )
        if best is None or memory.total > best.total:
            best = memory
    if best is None:
        raise ValueError("no stage's parameters given")
    return best
