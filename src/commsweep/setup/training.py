"""One training configuration: a model and how it is split over the GPUs.

This is the single description every stage shares (AIOB profiling, both workload
generators, the audit, the trace). Derived quantities use Megatron's definitions and
the notation of the reference documents: b micro batch, s sequence, h hidden, t TP,
p PP, d DP, c CP, g micro-batches per iteration, u = 2*b*(s/c)*h bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import pipeline_layout
from .models import ModelSpec

# The counts that must be at least 1: those of one rank's shard, then those of the whole job.
_SHARD_COUNTS = ("tp", "pp", "ep", "cp", "micro_batch", "seq_length")
_JOB_COUNTS = ("world_size", "global_batch")
RECOMPUTE_GRANULARITIES = ("selective", "full")
# megatron-core's TransformerConfig.cp_comm_type: how the attention exchanges the sequence.
CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")
# How data parallelism shards the model (the megatron schedule only; ``workload/megatron_fsdp.py``):
# ``none`` (megatron's DDP, with or without the distributed optimizer), megatron-fsdp's
# --data-parallel-sharding-strategy values (with --use-megatron-fsdp), or torch FSDP2
# (--use-torch-fsdp2).
FSDP_STRATEGIES = ("no_shard", "optim", "optim_grads", "optim_grads_params")
FSDP_CHOICES = ("none", *FSDP_STRATEGIES, "torch_fsdp2")


@dataclass(frozen=True)
class TrainingSetup:
    model: ModelSpec
    world_size: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    sp: bool = False
    micro_batch: int = 1
    global_batch: int = 1
    seq_length: int = 2048
    recompute: bool = False
    make_vocab_size_divisible_by: int = 128
    # Beyond AICB's arguments (the Megatron schedule only; see ``workload/megatron.py``).
    # With ``recompute`` on: "selective" (AICB's and Megatron's --recompute-activations: the
    # core attention) or "full" (--recompute-granularity full --recompute-method uniform
    # --recompute-num-layers 1: every layer's forward again, collectives included).
    recompute_granularity: str = "selective"
    # The interleaved 1F1B schedule's model chunks per stage (Megatron's
    # --virtual-pipeline-model-parallel-size); 1 is the plain 1F1B schedule.
    virtual_pipeline: int = 1
    # Uneven stages (megatron's --pipeline-model-parallel-layout, or
    # --decoder-first/last-pipeline-num-layers): the transformer layers of each virtual stage,
    # p*v counts in megatron's virtual-stage order (``setup/pipeline_layout.py``); None: L/(p*v) each.
    stage_layout: tuple[int, ...] | None = None
    # DP: Megatron's distributed optimizer (reduce-scatter of gradients, all-gather of
    # parameters) or plain DDP (one all-reduce of the gradients) ...
    distributed_optimizer: bool = True
    # ... reduced in fp32 (--accumulate-allreduce-grads-in-fp32, which bf16 implies) or in
    # the 16-bit training type (fp16 without that flag, as Megatron-LM's 2021 runs did).
    grad_reduce_in_fp32: bool = True
    # Megatron's expert tensor parallelism (--expert-tensor-parallel-size): None follows tp.
    etp: int | None = None
    # Megatron's context parallelism (--context-parallel-size, --cp-comm-type,
    # --hierarchical-context-parallel-sizes; the megatron schedule only, see
    # ``workload/megatron_context_parallel.py``): c ranks share each sequence, s/c tokens each.
    cp: int = 1
    cp_comm_type: str = "p2p"
    # a2a+p2p: (all-to-all group size, ring size), their product c.
    hierarchical_cp: tuple[int, int] | None = None
    # The distributed optimizer's buckets (the megatron schedule only; see
    # ``workload/megatron_buckets.py``): Megatron's --overlap-grad-reduce (gradients reduced
    # bucket by bucket, buckets of --ddp-bucket-size parameters, default max(40M, 1M*d)) and
    # --overlap-param-gather (parameters gathered bucket by bucket in the next forward pass).
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    ddp_bucket_size: int | None = None
    # Fully sharded data parallelism (``FSDP_CHOICES``; see ``workload/megatron_fsdp.py``) and
    # megatron's --fp8-param-gather (FP8 weights: the parameter all-gathers of the distributed
    # optimizer and of FSDP carry the linear layers' weights in 1 byte instead of 2).
    fsdp: str = "none"
    fp8_param_gather: bool = False

    # -- derived sizes -------------------------------------------------------------
    @property
    def dp(self) -> int:
        """Data-parallel size d = world / (t * c * p)."""
        return self.world_size // (self.tp * self.cp * self.pp)

    @property
    def dp_cp(self) -> int:
        """The group gradients are reduced over: DP x CP, world / (t * p) ranks (megatron's
        ``get_data_parallel_group(with_context_parallel=True)``; SimAI's DP group)."""
        return self.world_size // (self.tp * self.pp)

    @property
    def seq_per_rank(self) -> int:
        """The tokens of a sequence one rank holds: s / c."""
        return self.seq_length // self.cp

    @property
    def num_microbatches(self) -> int:
        """g = global batch / (micro batch * d), Megatron's gradient-accumulation steps."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def layers_per_stage(self) -> int:
        """L / p: the layers of a stage of the even split (``stage_layer_count`` for a stage's own)."""
        return self.model.num_layers // self.pp

    @property
    def padded_vocab(self) -> int:
        """V': the vocabulary padded to a multiple of 128 * t, as Megatron pads it."""
        multiple = self.make_vocab_size_divisible_by * self.tp
        return -(-self.model.vocab_size // multiple) * multiple

    @property
    def activation_bytes(self) -> int:
        """u = 2*b*(s/c)*h: one bf16 [s/c, b, h] activation (the rank's share of the
        sequence with context parallelism), the size unit of workload files."""
        return 2 * self.micro_batch * self.seq_per_rank * self.model.hidden_size

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel size: ``etp``, or t when it is not set (megatron's default)."""
        return self.tp if self.etp is None else self.etp

    @property
    def recompute_mode(self) -> str:
        """``none``, ``selective`` or ``full``."""
        return self.recompute_granularity if self.recompute else "none"

    @property
    def layers_per_chunk(self) -> int:
        """Layers of one model chunk: L / (p * v) (the stage's layers with v = 1)."""
        return self.model.num_layers // (self.pp * self.virtual_pipeline)

    @property
    def layer_counts(self) -> tuple[int, ...]:
        """The layers of each virtual stage (``chunk * p + stage``): the layout's, or the even split."""
        if self.stage_layout is not None:
            return self.stage_layout
        return pipeline_layout.even(self.model.num_layers, self.pp, self.virtual_pipeline)

    def chunk_layers(self, stage: int, chunk: int) -> range:
        """The global ids of the layers model chunk ``chunk`` of pipeline stage ``stage`` holds."""
        return pipeline_layout.chunk_layers(self.layer_counts, self.pp, stage, chunk)

    def stage_layer_count(self, stage: int) -> int:
        """The layers pipeline stage ``stage`` holds over all its model chunks."""
        return sum(len(self.chunk_layers(stage, c)) for c in range(self.virtual_pipeline))

    @property
    def max_stage_layers(self) -> int:
        """The layers of the fullest pipeline stage (L / p for the even split)."""
        return max(self.stage_layer_count(stage) for stage in range(self.pp))

    @property
    def uneven_pipeline(self) -> bool:
        """Whether the stages hold different numbers of layers (a layout other than the even split)."""
        return self.stage_layout is not None and len(set(self.stage_layout)) > 1

    @property
    def expert_dp(self) -> int:
        """The expert-data-parallel size world / (etp * ep * p): d / ep when etp = t."""
        return self.world_size // (self.expert_tp * self.ep * self.pp)

    # -- validity ------------------------------------------------------------------
    def _below_one(self, names: tuple[str, ...]) -> list[str]:
        """The counts among ``names`` that are below 1: every later rule divides by them."""
        return [f"{name} must be at least 1 (got {getattr(self, name)})" for name in names if getattr(self, name) < 1]

    def shard_problems(self) -> list[str]:
        """The rules one rank's model shard breaks: how TP, PP and EP split the model.

        What an AIOB profile needs; ``problems`` adds the rules of the whole job.
        """
        m, t, p = self.model, self.tp, self.pp
        out = self._below_one(_SHARD_COUNTS)
        if out:
            return out
        if m.num_attention_heads % t:
            out.append(f"tp={t} does not divide the {m.num_attention_heads} attention heads")
        if m.num_query_groups is not None and m.num_query_groups % t:
            out.append(f"tp={t} does not divide the {m.num_query_groups} query groups (GQA)")
        if m.hidden_size % t:
            out.append(f"tp={t} does not divide hidden_size={m.hidden_size}")
        if m.ffn_hidden_size % t:
            out.append(f"tp={t} does not divide ffn_hidden_size={m.ffn_hidden_size}")
        if m.num_layers % p and self.stage_layout is None:
            out.append(f"pp={p} does not divide num_layers={m.num_layers}")
        if m.is_moe:
            assert m.num_experts is not None
            if m.num_experts % self.ep:
                out.append(f"ep={self.ep} does not divide the {m.num_experts} experts")
            if m.moe_topk > m.num_experts:
                out.append(f"moe_topk={m.moe_topk} exceeds the {m.num_experts} experts")
            if self.expert_tp < 1:
                out.append(f"etp must be at least 1 (got {self.expert_tp})")
            elif m.expert_ffn_hidden_size % self.expert_tp:
                out.append(f"etp={self.expert_tp} does not divide the experts' FFN width {m.expert_ffn_hidden_size}")
            shared = m.moe_shared_expert_intermediate_size
            if shared is not None and shared % t:
                out.append(f"tp={t} does not divide the shared experts' FFN width {shared}")
        else:
            if self.ep != 1:
                out.append(f"ep={self.ep} needs an MoE model ({m.name} is dense)")
            if self.etp is not None and self.etp != t:
                out.append(f"etp={self.etp} needs an MoE model ({m.name} is dense)")
        if self.recompute_granularity not in RECOMPUTE_GRANULARITIES:
            out.append(f"recompute_granularity must be one of {', '.join(RECOMPUTE_GRANULARITIES)}, "
                       f"got {self.recompute_granularity!r}")
        out += self._context_parallel_problems()
        out += self._bucket_problems()
        out += self._fsdp_problems()
        return out + self._pipeline_problems()

    def _pipeline_problems(self) -> list[str]:
        """Megatron's rules for the (interleaved, uneven) pipeline's split of the layers:
        megatron-core 0.16.1's ``transformer_block.get_num_layers_to_build`` (L divisible by
        p*v for the even split) and ``PipelineParallelLayerLayout`` (p*v stages, every layer once)."""
        m, p, v, layout = self.model, self.pp, self.virtual_pipeline, self.stage_layout
        if v < 1:
            return [f"virtual_pipeline must be at least 1 (got {v})"]
        if v > 1 and p == 1:
            return [f"virtual_pipeline={v} needs pipeline parallelism (pp > 1)"]
        if layout is None:
            if v > 1 and m.num_layers % (p * v):
                return [f"pp*virtual_pipeline={p * v} does not divide num_layers={m.num_layers}"]
            return []
        out = []
        if p == 1:
            out.append("a pipeline layout needs pipeline parallelism (pp > 1)")
        if len(layout) != p * v:
            out.append(f"the pipeline layout has {len(layout)} stages, pp*virtual_pipeline is {p * v}")
        if min(layout, default=0) < 0 or sum(layout) != m.num_layers:
            out.append(f"the pipeline layout's stages hold {sum(layout)} layers, the model has {m.num_layers}")
        return out

    def _bucket_problems(self) -> list[str]:
        """Megatron-LM's rules for the gradient buckets' options."""
        out = []
        if self.ddp_bucket_size is not None and self.ddp_bucket_size < 1:
            out.append(f"ddp_bucket_size must be at least 1 (got {self.ddp_bucket_size})")
        if self.ddp_bucket_size is not None and not self.overlap_grad_reduce:
            out.append("ddp_bucket_size needs overlap_grad_reduce (without it megatron uses one bucket)")
        if self.overlap_param_gather and self.fsdp == "none" and not (
                self.overlap_grad_reduce and self.distributed_optimizer):
            out.append("overlap_param_gather needs the distributed optimizer and overlap_grad_reduce")
        return out

    def _fsdp_problems(self) -> list[str]:
        """Megatron-LM's argument checks for FSDP and FP8 parameter gathers
        (NVIDIA/Megatron-LM core_v0.16.1, ``megatron/training/arguments.py``, ``validate_args``)."""
        if self.fsdp not in FSDP_CHOICES:
            return [f"fsdp must be one of {', '.join(FSDP_CHOICES)}, got {self.fsdp!r}"]
        out = []
        if self.fsdp == "torch_fsdp2":
            if self.pp > 1:
                out.append("torch FSDP2 is not supported with pipeline parallelism (megatron's --use-torch-fsdp2)")
            if self.ep > 1:
                out.append("torch FSDP2 is not supported with expert parallelism (megatron's --use-torch-fsdp2)")
            if self.model.tie_embeddings:
                out.append("torch FSDP2 needs untied embeddings (megatron's --untie-embeddings-and-output-weights)")
            if self.fp8_param_gather:
                out.append("torch FSDP2 with fp8_param_gather: megatron turns the FP8 gather off "
                           "(TransformerEngine 2.0 and later) and gathers in bf16")
        if self.fp8_param_gather and self.fsdp == "none" and not self.distributed_optimizer:
            out.append("fp8_param_gather needs the distributed optimizer or FSDP")
        if self.overlap_param_gather and self.fsdp in FSDP_STRATEGIES and not self.overlap_grad_reduce:
            out.append("overlap_param_gather needs overlap_grad_reduce")
        return out

    def _context_parallel_problems(self) -> list[str]:
        """megatron's and TransformerEngine's rules for context parallelism (none at c = 1)."""
        m, t, c = self.model, self.tp, self.cp
        if c == 1:
            return []
        out = []
        if self.cp_comm_type not in CP_COMM_TYPES:
            return [f"cp_comm_type must be one of {', '.join(CP_COMM_TYPES)}, got {self.cp_comm_type!r}"]
        if self.seq_length % (2 * c):
            out.append(f"context parallelism needs 2*cp={2 * c} to divide seq_length={self.seq_length} "
                       "(the sequence is split into 2*cp chunks)")
        scattered = c  # the ranks an all-to-all scatters the heads over
        if self.cp_comm_type == "a2a+p2p":
            sizes = self.hierarchical_cp
            if sizes is None or len(sizes) != 2 or sizes[0] * sizes[1] != c or min(sizes) < 2:
                return out + [f"cp_comm_type a2a+p2p needs two hierarchical CP sizes above 1 whose product is "
                              f"cp={c} (got {sizes})"]
            scattered = sizes[0]
        elif self.hierarchical_cp is not None:
            out.append("hierarchical CP sizes are for cp_comm_type a2a+p2p")
        if self.cp_comm_type in ("a2a", "a2a+p2p"):
            for what, heads in (("attention heads", m.num_attention_heads), ("query groups", m.kv_groups)):
                if heads % t == 0 and (heads // t) % scattered:
                    out.append(f"the all-to-all of cp_comm_type {self.cp_comm_type} scatters the {heads // t} "
                               f"{what} of a TP rank over {scattered} ranks: they must divide")
        return out

    def problems(self) -> list[str]:
        """Every rule of Megatron's this setup breaks, as sentences (empty when valid)."""
        m, t, p = self.model, self.tp, self.pp
        out = self._below_one(_JOB_COUNTS) + self.shard_problems()
        if self._below_one(_JOB_COUNTS + _SHARD_COUNTS):
            return out
        if self.world_size % (t * self.cp * p):
            named = f"tp*pp={t * p}" if self.cp == 1 else f"tp*cp*pp={t * self.cp * p}"
            out.append(f"world_size={self.world_size} is not divisible by {named}")
            return out
        per_iteration = self.micro_batch * self.dp
        if self.global_batch < per_iteration:
            out.append(
                f"global_batch={self.global_batch} gives fewer than one micro-batch per iteration "
                f"(needs at least micro_batch*dp = {self.micro_batch}*{self.dp} = {per_iteration})"
            )
        elif self.global_batch % per_iteration:
            out.append(
                f"global_batch={self.global_batch} is not a multiple of micro_batch*dp = {per_iteration}"
            )
        if self.sp and t > 1 and self.seq_length % t:
            out.append(f"sequence parallelism needs tp={t} to divide seq_length={self.seq_length}")
        elif self.sp and t > 1 and self.seq_per_rank % t:
            out.append(f"sequence parallelism needs tp={t} to divide the {self.seq_per_rank} tokens of a CP rank")
        if self.virtual_pipeline > 1 and self.num_microbatches % p:
            # pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving: 0.8.0
            # and 0.9.0 raise unless p divides the micro-batches; 0.16.1 and 0.19.2 check them
            # against microbatch_group_size_per_vp_stage (default p), which asks the same.
            out.append(f"the interleaved schedule needs pp={p} to divide the {self.num_microbatches} "
                       "micro-batches per iteration")
        if m.is_moe and self.dp % self.ep:
            out.append(f"ep={self.ep} does not divide dp={self.dp}")
        if m.is_moe and self.expert_tp >= 1 and self.world_size % (self.expert_tp * self.ep * p):
            out.append(f"world_size={self.world_size} is not divisible by etp*ep*pp="
                       f"{self.expert_tp * self.ep * p}")
        return out
