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

**MoE layers** (megatron-core's alltoall dispatcher, balanced routing) keep, in place of the
dense MLP's GEMM inputs, with T tokens on the rank (sb/t with SP, sb without), top-k routing,
E experts of width f_e split over ETP:

* the router's fp32 softmax output TE·4 and the top-k probabilities Tk·4;
* the experts' fc1 input: the kT tokens this rank received over EP (as many as it sent,
  routing balanced), all-gathered over ETP with SP: 2kTh·etp; their activation's input
  and fc2's input, 2kT·etp·f_e(2 if SwiGLU, else 1)/etp and 2kT·etp·f_e/etp;
* the combined tokens unpermute weighs by the probabilities: 2kTh;
* shared experts as a dense MLP of their width, split over TP.

**Multi-latent attention** (DeepSeek-V2/V3) keeps its latents and the heads' Q, K, V in
place of a dense layer's (``mla_attention_activations``); the s² terms and the flash
statistics are those of its a heads.

The routed experts' optimizer states are sharded over the expert data-parallel group
(world / (etp·ep·p)), the other parameters' over DP.

The first pipeline stage holds the most: the 1F1B schedule keeps p micro-batches in
flight there (each with the stage's L/p layers), the interleaved one p·(1 + (p-1)/(p·v))
(Korthikanti et al., equation 5; Narayanan et al. 2021 section 2.2.2); fewer when a batch
has fewer micro-batches. The last stage also keeps the fp32 logits of the cross entropy
(4sbV/t). The peak is the larger of the two stages. With uneven stages (a pipeline layout)
each stage keeps its own layers' activations (stage i of the 1F1B schedule min(g, p - i)
micro-batches of them), so any stage may be the fullest: the peak is the largest of all.

**Fully sharded data parallelism** shards the model states over DP x CP (n ranks):

* megatron-fsdp (NVIDIA/Megatron-LM core_v0.16.1, ``megatron/core/distributed/fsdp/src/
  megatron_fsdp/megatron_fsdp.py``, ``MegatronFSDP``; its buffers in ``param_and_grad_buffer.py``,
  ``ParamAndGradBuffer``): ``no_shard`` shards nothing (the optimizer whole, as DDP without
  the distributed optimizer); ``optim`` the optimizer states (master weights and moments,
  12 bytes, 1/n); ``optim_grads`` and the main gradients (1/n), with one FSDP unit's whole
  gradient alive while it is reduce-scattered; ``optim_grads_params`` and the weights (1/n),
  with the gathered weights of the unit running and of those prefetched ahead of it
  (``AllGatherPipeline.all_gather_params`` prefetches the next units, in forward or backward
  order, until it holds ``suggested_AG_prefetch_size`` elements beyond the unit's own:
  ``MegatronFSDP.__init__`` sets it to half of max(10^9, two units) elements, so at least
  5x10^8; with ``fsdp_double_buffer``, off by default, two units at most).
* torch FSDP2 (``megatron/core/distributed/torch_fully_sharded_data_parallel.py``,
  ``TorchFullyShardedDataParallel.__init__``: ``fully_shard`` on each layer, no
  mixed-precision policy, ``reshard_after_forward``): bf16 weights and gradients and the
  optimizer's 12 bytes all 1/n; the layer running and the one prefetched (FSDP2 prefetches
  one unit ahead, forward and backward) gathered whole, and one unit's whole gradient
  before its reduce-scatter.

A unit is a transformer layer (``fsdp_unit`` parameters on the rank); the embedding and the
output layer are not counted as units here.

Not counted: the CUDA context and allocator fragmentation, communication buffers and
temporary tensors; so ``fits`` is a necessary condition, with ``RESERVE_GIB`` kept free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .training import TrainingSetup

GIB = 1 << 30
HALF = 2
FP32 = 4
# Kept free for the CUDA context, NCCL's buffers and the allocator (about what nvidia-smi
# shows a PyTorch process holding before any tensor exists, plus NCCL's channels).
RESERVE_GIB = 2.0
# megatron-fsdp's smallest all-gather prefetch, in elements (``MegatronFSDP.__init__``:
# ``suggested_AG_prefetch_size`` = max(10^9, two units) // 2).
AG_PREFETCH_ELEMENTS = 500_000_000


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


def moe_mlp_activations(setup: TrainingSetup) -> float:
    """Bytes an MoE layer's MLP keeps for one micro-batch beyond its norm's and the router's
    shared input (which a dense MLP's fc1 input counts the same): router, routed experts,
    unpermute and shared experts (the module docstring's list)."""
    m, t, etp = setup.model, setup.tp, setup.expert_tp
    sp = setup.sp and t > 1
    assert m.num_experts is not None
    s, b, h, k = setup.seq_length, setup.micro_batch, m.hidden_size, m.moe_topk
    tokens = s * b / t if sp else s * b
    received = k * tokens * (etp if sp else 1)
    f_e = m.expert_ffn_hidden_size
    experts = HALF * received * (h + f_e * (2 if m.swiglu else 1) / etp + f_e / etp)
    router = FP32 * tokens * (m.num_experts + k)
    unpermute = HALF * k * tokens * h
    shared = 0.0
    if m.moe_shared_expert_intermediate_size:
        f_s = m.moe_shared_expert_intermediate_size
        shared = HALF * s * b * f_s * ((2 if m.swiglu else 1) + 1) / t
    return experts + router + unpermute + shared


def mla_attention_activations(setup: TrainingSetup) -> tuple[float, float, float]:
    """Bytes multi-latent attention keeps beyond the layer's norm and down-projection input
    (the 2sbh a dense layer's QKV input counts), for one micro-batch: (replicated over TP
    unless SP, split over TP, never split).

    megatron-core's MLA: the down projections run on the rank's tokens (s/t with SP) and
    their latents are all-gathered before the up projections, which every TP rank runs on
    the whole sequence. Kept: the latents' norm inputs 2sb(q_lora + kv_lora) and the RoPE
    part of the key 2sb·rope (replicated unless SP); the up projections' inputs, the normed
    latents 2sb(q_lora + kv_lora) (never split); the rank's heads' Q and K, 2sb·a·(nope + rope)
    each, V 2sb·a·v and the output projection's input 2sb·a·v (split over TP). Without a query
    latent the query projection reads the layer's input, already counted.
    """
    m = setup.model
    s, b, a = setup.seq_length, setup.micro_batch, m.num_attention_heads
    assert m.kv_lora_rank and m.qk_nope_head_dim and m.qk_rope_head_dim and m.v_head_dim
    q, kv, qk, v = m.q_lora_rank or 0, m.kv_lora_rank, m.qk_head_dim, m.v_head_dim
    replicated = HALF * s * b * (q + kv + m.qk_rope_head_dim)
    full = HALF * s * b * (q + kv)
    split = HALF * s * b * a * (2 * qk + v) + HALF * s * b * a * v
    return replicated, split, full


def layer_activations(setup: TrainingSetup, *, flash_attention: bool, dropout: bool,
                      moe: bool = False) -> tuple[int, int]:
    """Bytes one layer keeps for one micro-batch: (stored until its backward, the whole
    layer's working set while it is recomputed under full recompute). ``moe``: an MoE
    layer's (its experts in place of the dense MLP's GEMMs)."""
    m, t = setup.model, setup.tp
    s, b, h, a = setup.seq_length, setup.micro_batch, m.hidden_size, m.num_attention_heads
    sp = setup.sp and t > 1
    kv = m.kv_groups * m.head_dim  # K and V are narrower with GQA (MLA: see mla_attention_activations)
    ffn = m.ffn_hidden_size * (2 if m.swiglu else 1)  # the activation's input; its output is f wide
    mask = 1 if dropout else 0
    sbh = s * b * h
    # Replicated over TP unless SP: norm inputs, QKV and fc1 (or router) inputs, residual dropout masks.
    replicated = (2 + 2 + 2 + 2) * sbh + 2 * mask * sbh
    split = (HALF * s * b * (h + 2 * kv)  # Q, K, V
             + 2 * sbh)  # the projection's input
    full = 0.0  # never split over TP
    if m.is_mla:
        replicated_mla, split, full = mla_attention_activations(setup)
        replicated += replicated_mla
    if not moe:
        split += HALF * s * b * ffn + HALF * s * b * m.ffn_hidden_size  # the activation's and fc2's inputs
    if flash_attention:
        core = FP32 * a * s * b  # the softmax statistics
    else:
        core = (HALF + (mask + HALF if dropout else 0)) * a * s * s * b
    whole = (replicated / t if sp else replicated) + split / t + core / t + full
    if moe:
        whole += moe_mlp_activations(setup)  # already per rank
    if setup.recompute_mode == "selective":
        return int(whole - core / t), int(whole)
    if setup.recompute_mode == "full":
        return int(2 * sbh / (t if sp else 1)), int(whole)
    return int(whole), int(whole)


def gathered_units(setup: TrainingSetup, unit: int, layers: int) -> int:
    """FSDP units whose weights are gathered at once with sharded parameters: the running
    one and those prefetched (megatron-fsdp: until the prefetched hold at least
    ``AG_PREFETCH_ELEMENTS``, or the larger half of two units; torch FSDP2: one), at most the
    stage's ``layers``."""
    if setup.fsdp == "torch_fsdp2":
        ahead = 1
    else:
        limit = max(AG_PREFETCH_ELEMENTS, unit)
        ahead = -(-limit // unit) if unit else 0
    return max(1, min(layers, 1 + ahead))


def fsdp_states(setup: TrainingSetup, params: int, unit: int, layers: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer) bytes of a rank holding ``params`` parameters, of which
    one FSDP unit (a transformer layer) is ``unit`` and the stage has ``layers``, sharded as
    ``setup.fsdp`` says over DP x CP (the module docstring); ``none`` is not FSDP."""
    n, grad = setup.dp * setup.cp, FP32 if setup.grad_reduce_in_fp32 else HALF

    def shard(nbytes: int) -> int:
        return -(-nbytes // n)

    if setup.fsdp == "torch_fsdp2":
        alive = gathered_units(setup, unit, layers)
        return shard(HALF * params) + HALF * unit * alive, shard(HALF * params) + HALF * unit, shard(12 * params)
    if setup.fsdp == "no_shard":
        return HALF * params, grad * params, 12 * params
    if setup.fsdp == "optim":
        return HALF * params, grad * params, shard(12 * params)
    if setup.fsdp == "optim_grads":
        return HALF * params, shard(grad * params) + grad * unit, shard(12 * params)
    assert setup.fsdp == "optim_grads_params", setup.fsdp
    alive = gathered_units(setup, unit, layers)
    return shard(HALF * params) + HALF * unit * alive, shard(grad * params) + grad * unit, shard(12 * params)


def in_flight(setup: TrainingSetup, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak."""
    p, v, g = setup.pp, setup.virtual_pipeline, setup.num_microbatches
    if p == 1:
        return 1.0
    if v > 1 and stage == 0:
        return min(g, p * (1 + (p - 1) / (p * v)))
    return float(min(g, p - stage))


def estimate(setup: TrainingSetup, parameters: dict[int, int], *, flash_attention: bool = True,
             dropout: bool = True, expert_parameters: dict[int, int] | None = None,
             moe_layers: dict[int, int] | None = None, fsdp_unit: int = 0) -> Memory:
    """Peak bytes per GPU; ``parameters``: the rank's parameter count per pipeline stage
    (at least the first and the last, ``workload.megatron.local_parameters``). For an MoE
    model, ``expert_parameters``: the part of them in routed experts sharded over EP
    (``workload.megatron.expert_parameters``), and ``moe_layers``: the stage's MoE layers.
    With FSDP (``setup.fsdp``), ``fsdp_unit``: one transformer layer's parameters on the rank
    (``workload.megatron_fsdp.unit_parameters``), the unit gathered and reduced whole."""
    # Context parallelism: a rank keeps the activations of its s/cp tokens, and the
    # distributed optimizer shards over DP x CP.
    rank = replace(setup, seq_length=setup.seq_per_rank, cp=1, cp_comm_type="p2p", hierarchical_cp=None)
    stored, working = layer_activations(rank, flash_attention=flash_attention, dropout=dropout)
    moe_stored, moe_working = (layer_activations(rank, flash_attention=flash_attention, dropout=dropout, moe=True)
                               if moe_layers else (0, 0))
    grad = FP32 if setup.grad_reduce_in_fp32 else HALF
    dense_share = setup.dp * setup.cp if setup.distributed_optimizer else 1
    expert_share = setup.expert_dp if setup.distributed_optimizer else 1
    t, sbh = setup.tp, rank.seq_length * setup.micro_batch * setup.model.hidden_size
    best: Memory | None = None
    for stage, params in sorted(parameters.items()):
        experts = (expert_parameters or {}).get(stage, 0)
        moe = (moe_layers or {}).get(stage, 0)
        per_micro_batch = stored * (setup.stage_layer_count(stage) - moe) + moe_stored * moe
        activations = per_micro_batch * in_flight(setup, stage)
        if setup.recompute_mode == "full":
            activations += moe_working if moe else working
        if stage == setup.pp - 1:  # the cross entropy's fp32 logits and the final norm's input
            activations += FP32 * rank.seq_length * setup.micro_batch * setup.padded_vocab / t + HALF * sbh
        if setup.fsdp != "none":
            weights, gradients, optimizer = fsdp_states(setup, params, fsdp_unit, setup.stage_layer_count(stage))
        else:
            weights, gradients = HALF * params, grad * params
            optimizer = -(-12 * (params - experts) // dense_share) + -(-12 * experts // expert_share)
        memory = Memory(weights=weights, gradients=gradients, optimizer=optimizer,
                        activations=int(activations), stage=stage)
        if best is None or memory.total > best.total:
            best = memory
    if best is None:
        raise ValueError("no stage's parameters given")
    return best
