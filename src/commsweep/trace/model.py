"""A small megatron-core GPT on the CPU, and one traced training step.

Imports megatron: load this module only after ``collectives.install`` (see there) and
after ``torch.distributed`` is initialised with the gloo backend.

What it takes to run megatron-core 0.16.1 on a CPU-only torch, and why:

* megatron allocates communication buffers on ``torch.cuda.current_device()``: that
  function is pointed at the CPU (``cpu_device``) for the whole process;
* the default causal mask would be built on ``cuda``: an explicit mask is passed;
* the pipeline schedules make a counter with ``device="cuda"``, and a tied embedding is
  moved with ``.cuda()`` before its first all-reduce: ``CudaFactoriesOnCpu`` keeps both
  on the CPU while a step is traced;
* the RNG tracker must not touch CUDA states: ``compat.cpu_rng_tracker`` installs one that
  does nothing;
* weights are made on the CPU (``use_cpu_initialization``) in fp32, with every fusion off
  and the local (non Transformer-Engine) layer spec;
* torch's own LayerNorm/RMSNorm refuse sequence parallelism in megatron's wrapper
  (apex's FusedLayerNorm is what megatron uses there); ``SequenceParallelNorm`` is
  torch's norm with its parameters marked ``sequence_parallel``, which is what tells
  ``finalize_model_grads`` to all-reduce their gradients over TP, as apex's does;
* MoE: megatron-core 0.16.1's router reads ``moe_utils.te_general_gemm`` (and its MoE
  utilities other Transformer Engine functions), which it defines only when Transformer
  Engine imports: ``compat.moe_te_functions_none`` sets them to None, what megatron tests for;
* MoE: the all-to-all token dispatcher copies its split sizes to the host on a side CUDA
  stream (``torch.cuda.Stream``, ``current_stream``, ``stream``, events): the stand-ins of
  ``compat.cuda_stream_on_cpu`` take their place (a CPU tensor is already on the host), and
  ``compat.moe_split_sizes_on_host`` that of its copy, which turns CUDA split sizes into
  numpy but leaves CPU ones as tensors, which ``all_to_all_single`` refuses; the router is
  megatron's ``TopKRouter`` with balanced routing (``BalancedRouter``), so that every
  collective has the sizes the schedule assumes.

Interleaved pipelines (v > 1) and uneven stages: the rank builds one GPT model chunk per
virtual stage (the parallel state's virtual rank set while each is built, as megatron's
``training.get_model`` does), each in its own ``DistributedDataParallel`` (bucketing off for
chunks after the first, as there), and runs megatron's interleaved schedule over the list;
an uneven layout goes to megatron as its ``pipeline_model_parallel_layout`` string, which
older releases lack (0.8.0: such a trace is refused).

What one megatron-core release needs beyond that is in ``compat`` (each workaround named;
the names applied come back in the rank's ``meta``; the MoE ones above are named there
too, and recorded for the MoE traces that need them).

What torch 2.13.0's gloo backend does with megatron's MoE collectives (measured,
``tests/test_trace_moe.py``): ``all_to_all_single`` with and without split sizes, the
list ``all_to_all``, ``reduce_scatter_tensor`` and the list ``reduce_scatter`` (uneven
splits too) all work; the list ``all_gather`` refuses tensors of different sizes
("ProcessGroupGloo::allgather: invalid tensor size"), and megatron calls it with the
expert-TP split sizes of the tokens a rank received. With balanced routing every split is
equal and gloo runs megatron's own call unchanged; for uneven splits (a router's own
routing) ``collectives.uneven_all_gather`` gathers them the only way gloo can (padded to the
largest, then cut) behind the counting wrapper, so that megatron's call is the one recorded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from ..setup.training import TrainingSetup


def cpu_device() -> str:
    return "cpu"


torch.cuda.current_device = cpu_device  # megatron allocates its buffers there

from . import compat  # noqa: E402

with compat.megatron_imports() as IMPORT_WORKAROUNDS:
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    from megatron.core.transformer import transformer_config as _transformer_config
TransformerConfig = _transformer_config.TransformerConfig
# Multi-latent attention's config, from megatron-core 0.10 (older releases refuse MLA traces).
MLATransformerConfig = getattr(_transformer_config, "MLATransformerConfig", None)

compat.cuda_stream_on_cpu()  # the MoE dispatcher's side stream; 0.19's DDP waits on the current one
compat.moe_split_sizes_on_host()
compat.integer_histc()
# Applied to every trace, needed by MoE ones: recorded with those (see _trace_step).
MOE_WORKAROUNDS = [w for w in (compat.moe_te_functions_none(),) if w]
reset_moe_state = compat.moe_state_reset()

from . import collectives  # noqa: E402
from .attribution import Attribution  # noqa: E402


class BalancedRouter(TopKRouter):
    """megatron's top-k router with balanced routing: the k experts of a rank's i-th token
    are (i*k + j) mod E, j < k, chosen by adding a large constant to their logits before
    megatron's own top-k and softmax. Every expert then gets T*k/E tokens from every rank
    (T a rank's tokens; the trace sizes keep E dividing T*k), so every all-to-all and
    expert-TP gather has the size of balanced routing, and the router's weights still get
    their gradient (the constant cancels in the softmax over the chosen experts)."""

    BIAS = 1.0e4

    def gating(self, input: torch.Tensor) -> torch.Tensor:
        logits = super().gating(input)
        tokens = logits.shape[0] * logits.shape[1] if logits.dim() == 3 else logits.shape[0]
        k, experts = self.topk, self.config.num_moe_experts
        chosen = (torch.arange(tokens).unsqueeze(1) * k + torch.arange(k)) % experts
        mask = torch.zeros(tokens, experts, dtype=logits.dtype).scatter(1, chosen, self.BIAS)
        return logits + mask.view(logits.shape)


class CudaFactoriesOnCpu(TorchFunctionMode):
    """Keep on the CPU what megatron asks for on ``cuda`` (see the module docstring):
    factory calls with ``device="cuda"`` and ``Tensor.cuda()``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        device = kwargs.get("device")
        if device is not None and str(device).startswith("cuda"):
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


class SequenceParallelNorm:
    """torch's LayerNorm or RMSNorm with parameters marked ``sequence_parallel`` (see above)."""

    def __new__(cls, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **_: Any):
        norm_cls = torch.nn.RMSNorm if config.normalization == "RMSNorm" else torch.nn.LayerNorm
        norm = norm_cls(hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


class DuplicatedLinear(torch.nn.Module):
    """Transformer Engine's ``TELinear(parallel_mode="duplicated")`` on the CPU: MLA's down
    projections in megatron's Transformer Engine spec, whole on every TP rank, fed the
    rank's sequence shard with SP, no collective of their own. As TE's does, it marks its
    weight ``sequence_parallel`` (with SP), so ``finalize_model_grads`` all-reduces its
    gradient over TP with the norms'."""

    def __init__(self, input_size: int, output_size: int, *, config: TransformerConfig, init_method: Any,
                 bias: bool = False, parallel_mode: str = "duplicated", **_: Any):
        super().__init__()
        assert parallel_mode == "duplicated" and not bias, "the stand-in is MLA's down projection only"
        self.weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=config.params_dtype))
        init_method(self.weight)
        self.weight.allreduce = True
        self.weight.sequence_parallel = config.sequence_parallel

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.nn.functional.linear(x, self.weight), None


def normed_column_parallel_linear() -> type:
    """Transformer Engine's ``TELayerNormColumnParallelLinear`` on the CPU (MLA's up
    projections with the q/kv latent norms fused in): the norm on the rank's sequence shard,
    then megatron's own ``ColumnParallelLinear``, whose collectives (the SP all-gather of the
    normed latent, ...) are TE's. Made on first use: it subclasses a megatron class."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    class NormedColumnParallelLinear(ColumnParallelLinear):
        def __init__(self, input_size: int, output_size: int, *, config: TransformerConfig, **kwargs: Any):
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.layer_norm = SequenceParallelNorm(config, input_size, eps=config.layernorm_epsilon)

        def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any):
            return super().forward(self.layer_norm(x), *args, **kwargs)

    return NormedColumnParallelLinear


class CoreAttention(torch.nn.Module):
    """Transformer Engine's ``TEDotProductAttention`` on the CPU, for MLA's keys and values
    of different widths (megatron's local ``DotProductAttention`` takes one width for
    both): causal softmax attention per head, no collective (no context parallelism)."""

    def __init__(self, config: TransformerConfig, layer_number: int, attn_mask_type: Any, attention_type: str,
                 softmax_scale: float | None = None, **_: Any):
        super().__init__()
        self.softmax_scale = softmax_scale

    def forward(self, query, key, value, attention_mask, **_: Any) -> torch.Tensor:
        q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))  # [b, n, s, d]
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=~attention_mask if attention_mask is not None else None, scale=self.softmax_scale)
        s, b = query.shape[0], query.shape[1]
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)


def mla_config(setup: TrainingSetup) -> dict[str, Any]:
    """megatron's MLA options (``MLATransformerConfig``) for the setup's model; empty without MLA."""
    m = setup.model
    if not m.is_mla:
        return {}
    return dict(
        multi_latent_attention=True,
        q_lora_rank=m.q_lora_rank,
        kv_lora_rank=m.kv_lora_rank,
        qk_head_dim=m.qk_nope_head_dim,
        qk_pos_emb_head_dim=m.qk_rope_head_dim,
        v_head_dim=m.v_head_dim,
        qk_layernorm=True,  # DeepSeek's q/kv latent norms
        rope_type="rope",
        rotary_base=10000,
    )


def moe_layer_freq(model) -> int | list[int]:
    """megatron's ``moe_layer_freq``: the integer, or with first dense layers the list of
    0 (dense) and 1 (MoE) per layer (``--moe-layer-freq "([0]*k+[1]*(L-k))"``)."""
    if not model.moe_first_k_dense:
        return model.moe_layer_freq
    return [int(model.is_moe_layer(layer)) for layer in range(model.num_layers)]


def moe_config(setup: TrainingSetup) -> dict[str, Any]:
    """megatron's MoE options for the setup (empty for a dense model): the all-to-all
    dispatcher, dropless, no grouped GEMM or fusions."""
    m = setup.model
    if not m.is_moe:
        return {}
    return dict(
        num_moe_experts=m.num_experts,
        moe_router_topk=m.moe_topk,
        moe_ffn_hidden_size=m.expert_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
        moe_shared_expert_gate=m.moe_shared_expert_gate,
        moe_layer_freq=moe_layer_freq(m),
        moe_aux_loss_coeff=float(m.moe_aux_loss_coeff),
        moe_token_dispatcher_type="alltoall",
        moe_router_pre_softmax=m.moe_topk == 1,  # megatron refuses top-1 softmax routing without it
        expert_model_parallel_size=setup.ep,
        expert_tensor_parallel_size=setup.expert_tp,
    )


def transformer_config(setup: TrainingSetup, applied: list[str] | None = None) -> TransformerConfig:
    """megatron's configuration of the setup's model. MoE options an older release lacks
    are left out where what is asked is what the release does without them, else refused
    (``compat.config_options``); ``applied`` hears a workaround needed, if any."""
    m = setup.model
    options = dict(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        ffn_hidden_size=m.ffn_hidden_size,
        tensor_model_parallel_size=setup.tp,
        pipeline_model_parallel_size=setup.pp,
        sequence_parallel=setup.sp and setup.tp > 1,
        normalization="RMSNorm" if m.normalization == "rmsnorm" else "LayerNorm",
        gated_linear_unit=m.swiglu,
        activation_func=torch.nn.functional.silu if m.swiglu else torch.nn.functional.gelu,
        add_bias_linear=m.add_bias_linear,
        add_qkv_bias=m.add_qkv_bias,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        batch_p2p_comm=False,  # batched p2p would call torch.cuda.synchronize
        recompute_granularity="selective" if setup.recompute else None,
        **pipeline_config(setup),
        **moe_config(setup),
        **mla_config(setup),
    )
    config_class = MLATransformerConfig if m.is_mla else TransformerConfig
    # What a release without the option does: the even split of the layers; for MoE, no
    # shared expert, every layer MoE, experts split over TP.
    implied: dict[str, Any] = dict(pipeline_model_parallel_layout=None)
    if m.is_moe:
        options, workaround = compat.experts_as_wide_as_ffn(config_class, options)
        if applied is not None and workaround:
            applied.append(workaround)
        implied.update(moe_shared_expert_intermediate_size=None, moe_shared_expert_gate=False, moe_layer_freq=1,
                       expert_tensor_parallel_size=setup.tp)
    return config_class(**compat.config_options(config_class, options, implied))


def pipeline_config(setup: TrainingSetup) -> dict[str, Any]:
    """The interleaved schedule's and the uneven stages' options (none for the plain 1F1B)."""
    from ..setup import pipeline_layout

    out: dict[str, Any] = {}
    if setup.virtual_pipeline > 1:
        out["virtual_pipeline_model_parallel_size"] = setup.virtual_pipeline
    if setup.stage_layout is not None:
        out["pipeline_model_parallel_layout"] = pipeline_layout.text(setup.stage_layout)
    return out


def layer_spec(config: TransformerConfig, layers: int, model=None, first_layer: int = 0,
               applied: list[str] | None = None) -> TransformerBlockSubmodules:
    """The local layer spec with ``SequenceParallelNorm`` for the norms, for the stage's
    ``layers`` layers from global layer ``first_layer``: MoE layers (``model.is_moe_layer``,
    megatron's ``moe_layer_freq`` pattern) get the MoE spec with ``BalancedRouter``.
    ``applied`` hears the workaround ``compat.local_layer_spec`` needed, if any."""

    mla = getattr(config, "multi_latent_attention", False)

    def spec_of(moe: bool):
        spec, workaround = compat.local_layer_spec(config.normalization, config.num_moe_experts if moe else None,
                                                   multi_latent_attention=mla)
        if applied is not None and workaround and workaround not in applied:
            applied.append(workaround)
        spec.submodules.input_layernorm = SequenceParallelNorm
        spec.submodules.pre_mlp_layernorm = SequenceParallelNorm
        if mla:
            workaround = compat.mla_transformer_engine_spec(
                spec.submodules.self_attention.submodules, down=DuplicatedLinear, up=normed_column_parallel_linear(),
                core_attention=CoreAttention)
            if applied is not None and workaround not in applied:
                applied.append(workaround)
        if moe:
            workaround = compat.moe_router(spec.submodules.mlp, BalancedRouter)
            if applied is not None and workaround and workaround not in applied:
                applied.append(workaround)
        return spec

    dense, moe = spec_of(False), spec_of(True) if config.num_moe_experts else None
    specs = [moe if model is not None and model.is_moe_layer(first_layer + i) else dense for i in range(layers)]
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=SequenceParallelNorm)


def group_namer() -> Any:
    """A function naming a process group as the schedule does (TP, DP, PP, EMB, ...)."""
    candidates = [
        ("TP", lambda: ps.get_tensor_model_parallel_group()),
        ("PP", lambda: ps.get_pipeline_model_parallel_group()),
        ("DP", lambda: ps.get_data_parallel_group()),
        ("DP", lambda: ps.get_data_parallel_group(with_context_parallel=True)),
        ("DP", lambda: ps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True)),
        ("DP", lambda: ps.get_intra_distributed_optimizer_instance_group()),
        ("EMB", lambda: ps.get_embedding_group()),
        ("POS_EMB", lambda: ps.get_position_embedding_group()),
        ("EP", lambda: ps.get_expert_model_parallel_group()),
        ("DP_EP", lambda: ps.get_expert_data_parallel_group()),
        ("DP_EP", lambda: ps.get_expert_data_parallel_group(partial_expert_data_parallel=True)),
        ("DP_EP", lambda: ps.get_data_modulo_expert_parallel_group()),  # its name before 0.10
        ("MP", lambda: ps.get_model_parallel_group()),
        ("TP_DP", lambda: ps.get_tensor_and_data_parallel_group()),
    ]
    # MoE's own groups take the name of the group above with the same ranks (the expert-TP
    # group is TP at megatron's default; expert TP x EP is EP without expert TP), else
    # their own (no SimAI group has them).
    aliases = [
        ("ETP", lambda: ps.get_expert_tensor_parallel_group(), ("TP",)),
        ("TP_EP", lambda: ps.get_expert_tensor_and_model_parallel_group(), ("EP", "TP")),
        ("TP_EP", lambda: ps.get_tensor_and_expert_parallel_group(), ("EP", "TP")),  # its name before 0.10
        ("TP", lambda: ps.get_tensor_and_context_parallel_group(), ("TP",)),
    ]
    by_id: dict[int, str] = {}
    by_ranks: dict[tuple[int, ...], str] = {}

    def groups(listed):
        for name, get, *preferred in listed:
            try:
                group = get()
            except (AssertionError, AttributeError, RuntimeError, TypeError):  # not in this release
                continue
            if group is None or isinstance(group, list):
                continue
            yield name, group, tuple(dist.get_process_group_ranks(group)), (preferred or [()])[0]

    ranks_of: dict[str, tuple[int, ...]] = {}
    for name, group, ranks, _ in groups(candidates):
        by_id.setdefault(id(group), name)
        by_ranks.setdefault(ranks, name)
        ranks_of.setdefault(name, ranks)
    for name, group, ranks, preferred in groups(aliases):
        same = next((known for known in preferred if ranks_of.get(known) == ranks), None)
        by_id.setdefault(id(group), same or name)

    def name(group) -> tuple[str, int]:
        if group is None or group is dist.group.WORLD:
            return "WORLD", dist.get_world_size()
        size = group.size()
        if id(group) in by_id:
            return by_id[id(group)], size
        ranks = tuple(dist.get_process_group_ranks(group))
        return by_ranks.get(ranks, "ranks_" + "_".join(map(str, ranks))), size

    return name


def trace_step(setup: TrainingSetup, *, seed: int = 1234) -> tuple[list, dict]:
    """One training step (forward, backward, gradient finalisation and the distributed
    optimizer's parameter gather) of ``setup`` on this process: its collectives, and
    facts about this rank (``meta``: its stage, parameter count, and the padding
    megatron's gradient buffer adds to it, which the DP collectives carry)."""
    with CudaFactoriesOnCpu():
        return _trace_step(setup, seed)


def _trace_step(setup: TrainingSetup, seed: int) -> tuple[list, dict]:
    """Build the stage's model in megatron's parallel state, run one step, record its collectives."""
    rank = dist.get_rank()
    reset_moe_state()  # a new model starts a new MoE loss tracker and scale (see compat)
    compat.USED.clear()  # what this setup's step calls (a launch traces several setups)
    sizes = compat.parallel_sizes(setup.tp, setup.pp, setup.ep, setup.expert_tp)
    if setup.virtual_pipeline > 1:
        sizes["virtual_pipeline_model_parallel_size"] = setup.virtual_pipeline
    ps.initialize_model_parallel(**sizes)
    applied = list(IMPORT_WORKAROUNDS) + [w for w in (compat.stale_parallel_state(),) if w]
    applied += MOE_WORKAROUNDS if setup.model.is_moe else []
    try:
        compat.cpu_rng_tracker()
        torch.manual_seed(seed)
        config = transformer_config(setup, applied)
        stage = ps.get_pipeline_model_parallel_rank()
        chunks = _model_chunks(setup, config, stage, applied)
        gathers = [compat.param_gather(ddp) for ddp in chunks]
        applied += sorted({w for _, w in gathers if w})
        attribution = Attribution(group_namer(), rank=rank, stage=stage,
                                  layer_offset=setup.chunk_layers(stage, 0).start)
        for chunk, ddp in enumerate(chunks):
            prefix = f"chunk{chunk}/" if len(chunks) > 1 else ""
            attribution.attach(ddp.module, prefix=prefix, layer_offset=setup.chunk_layers(stage, chunk).start)
        collectives.install(attribution.on_call)

        def finalize(*args, **kwargs):
            attribution.after_backward = True
            finalize_model_grads(*args, **kwargs)

        config.finalize_model_grads_func = finalize
        config.no_sync_func = [ddp.no_sync for ddp in chunks] if len(chunks) > 1 else chunks[0].no_sync

        batches = _batches(setup, seed)
        if setup.overlap_grad_reduce:
            _warm_up_step(setup, chunks, batches, gathers, attribution)
        for ddp in chunks:
            ddp.zero_grad_buffer()
        attribution.enabled = True
        _forward_backward(setup, chunks, batches)
        attribution.after_backward = True
        if not setup.overlap_param_gather:
            for gather, _ in gathers:
                gather()  # what the distributed optimizer's step issues
        attribution.enabled = False
        paddings = [_buffer_padding(ddp) for ddp in chunks]
        padding = {group: sum(p[group] for p in paddings) for group in ("DP", "DP_EP")}
        parameters = sum(p.numel() for ddp in chunks for p in ddp.module.parameters())
        meta = {"rank": rank, "stage": stage, "parameters": parameters, "buffer_padding": padding["DP"],
                "expert_buffer_padding": padding["DP_EP"],
                "megatron_core": compat.megatron_version(), "workarounds": applied + sorted(compat.USED)}
        collectives.install(lambda call: None)
        dist.barrier()  # every rank done before the groups go
        return attribution.records, meta
    finally:
        # On an error no barrier: the other ranks would wait in theirs (or in the step) and
        # the error would never be seen; this process exits and the runner stops the rest.
        collectives.install(lambda call: None)
        ps.destroy_model_parallel()


def _model_chunks(setup: TrainingSetup, config, stage: int, applied: list) -> list:
    """This pipeline stage's model chunks, each in megatron's ``DistributedDataParallel``
    (one chunk without interleaving); bucketing only in the first, as ``training.get_model``."""
    v, p = setup.virtual_pipeline, setup.pp
    chunks = []
    for chunk in range(v):
        if v > 1:
            ps.set_virtual_pipeline_model_parallel_rank(chunk)
        first, last = stage == 0 and chunk == 0, stage == p - 1 and chunk == v - 1
        model = _gpt_model(setup, config, stage, chunk, first, last, applied)
        chunks.append(DistributedDataParallel(
            config,
            DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, use_distributed_optimizer=True,
                # The gradient buckets as the schedule's options set them (megatron_buckets).
                overlap_grad_reduce=setup.overlap_grad_reduce, bucket_size=setup.ddp_bucket_size,
                **({"overlap_param_gather": True} if setup.overlap_param_gather else {}),
            ),
            model,
            **({"disable_bucketing": True} if chunk > 0 else {}),
        ))
    if v > 1:
        ps.set_virtual_pipeline_model_parallel_rank(0)
    return chunks


def _gpt_model(setup: TrainingSetup, config, stage: int, chunk: int, first: bool, last: bool,
               applied: list) -> GPTModel:
    """Model chunk ``chunk`` of this pipeline stage, as megatron's GPT model."""
    import inspect

    m = setup.model
    layers = setup.chunk_layers(stage, chunk)
    chunk_option = {"vp_stage": chunk} if "vp_stage" in inspect.signature(GPTModel.__init__).parameters else {}
    return GPTModel(
        **chunk_option,
        config=config,
        transformer_layer_spec=layer_spec(config, len(layers), m, layers.start, applied),
        vocab_size=setup.padded_vocab,
        max_sequence_length=m.max_position_embeddings,
        pre_process=first,
        post_process=last,
        parallel_output=True,
        share_embeddings_and_output_weights=m.tie_embeddings,
        position_embedding_type="learned_absolute" if m.position_embedding == "learned" else "rope",
    )


def _batches(setup: TrainingSetup, seed: int) -> list[dict]:
    """One iteration's micro-batches of random tokens and labels, from their own generator."""
    b, s, vocab = setup.micro_batch, setup.seq_length, setup.model.vocab_size
    generator = torch.Generator().manual_seed(seed + 7)
    return [
        {
            "tokens": torch.randint(0, vocab, (b, s), generator=generator),
            "labels": torch.randint(0, vocab, (b, s), generator=generator),
        }
        for _ in range(setup.num_microbatches)
    ]


def _warm_up_step(setup: TrainingSetup, chunks: list, batches: list[dict], gathers: list, attribution) -> None:
    """An untraced step before the traced one, with overlap_grad_reduce: in its first step
    megatron-core issues every bucket's reduce after the backward pass, while it learns which
    parameters get gradients (``param_and_grad_buffer.py``, ``finish_grad_sync`` with
    ``is_first_batch``); from the second on, each bucket's as it fills. With
    overlap_param_gather the parameters are then gathered in the traced step's forward pass
    (the forward pre-hooks), not by its optimizer step."""
    for ddp in chunks:
        ddp.zero_grad_buffer()
    _forward_backward(setup, chunks, batches)
    if not setup.overlap_param_gather:
        for gather, _ in gathers:
            gather()
    attribution.after_backward = False


def _forward_backward(setup: TrainingSetup, chunks: list, batches: list[dict]) -> None:
    """Megatron's forward-backward schedule over ``batches`` (a mean of the logits as loss)."""
    b, s = setup.micro_batch, setup.seq_length
    position_ids = torch.arange(s).unsqueeze(0).expand(b, s)
    # True marks a position a token must not attend to (megatron's convention).
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1).expand(b, 1, s, s)

    def forward_step(data_iterator, model_chunk):
        batch = next(data_iterator)
        output = model_chunk(batch["tokens"], position_ids, mask, labels=batch["labels"])

        def loss_func(output_tensor):
            loss = output_tensor.float().mean()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=[iter(batches) for _ in chunks] if len(chunks) > 1 else iter(batches),
        model=chunks,
        num_microbatches=setup.num_microbatches,
        seq_length=s,
        micro_batch_size=b,
        forward_only=False,
    )


def _buffer_padding(ddp) -> dict[str, int]:
    """What each gradient buffer pads its parameters with (the DP and DP_EP collectives carry it)."""
    padding = {}
    for group, buffers in (("DP", ddp.buffers), ("DP_EP", ddp.expert_parallel_buffers)):
        # (a bucket's params: 0.8's buffers do not list theirs)
        params = sum(p.numel() for buffer in buffers for bucket in buffer.buckets for p in bucket.params)
        buffered = sum(bucket.grad_data.numel() for buffer in buffers for bucket in buffer.buckets)
        padding[group] = buffered - params
    return padding
