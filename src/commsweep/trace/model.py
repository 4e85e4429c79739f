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
  ``finalize_model_grads`` to all-reduce their gradients over TP, as apex's does.

What one megatron-core release needs beyond that is in ``compat`` (each workaround named;
the names applied come back in the rank's ``meta``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from ..training import TrainingSetup


def cpu_device() -> str:
    return "cpu"


torch.cuda.current_device = cpu_device  # megatron allocates its buffers there

from . import compat  # noqa: E402

compat.cuda_stream_on_cpu()
with compat.megatron_imports() as IMPORT_WORKAROUNDS:
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    from megatron.core.transformer.transformer_config import TransformerConfig

from . import collectives  # noqa: E402
from .attribution import Attribution  # noqa: E402


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


def transformer_config(setup: TrainingSetup) -> TransformerConfig:
    m = setup.model
    return TransformerConfig(
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
    )


def layer_spec(config: TransformerConfig, layers: int, applied: list[str]) -> TransformerBlockSubmodules:
    """The local layer spec with ``SequenceParallelNorm`` for the norms."""
    spec, workaround = compat.local_layer_spec(config.normalization)
    applied += [workaround] if workaround else []
    spec.submodules.input_layernorm = SequenceParallelNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelNorm
    return TransformerBlockSubmodules(layer_specs=[spec] * layers, layer_norm=SequenceParallelNorm)


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
        ("MP", lambda: ps.get_model_parallel_group()),
        ("TP_DP", lambda: ps.get_tensor_and_data_parallel_group()),
    ]
    by_id: dict[int, str] = {}
    by_ranks: dict[tuple[int, ...], str] = {}
    for name, get in candidates:
        try:
            group = get()
        except (AssertionError, AttributeError, RuntimeError, TypeError):  # not in this release
            continue
        if group is None or isinstance(group, list):
            continue
        by_id.setdefault(id(group), name)
        by_ranks.setdefault(tuple(dist.get_process_group_ranks(group)), name)

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
    rank = dist.get_rank()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=setup.tp, pipeline_model_parallel_size=setup.pp,
        expert_model_parallel_size=setup.ep,
    )
    applied = list(IMPORT_WORKAROUNDS) + [w for w in (compat.stale_parallel_state(),) if w]
    try:
        compat.cpu_rng_tracker()
        torch.manual_seed(seed)
        config = transformer_config(setup)
        stage = ps.get_pipeline_model_parallel_rank()
        first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
        m = setup.model
        model = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec(config, setup.layers_per_stage, applied),
            vocab_size=setup.padded_vocab,
            max_sequence_length=m.max_position_embeddings,
            pre_process=first,
            post_process=last,
            parallel_output=True,
            share_embeddings_and_output_weights=m.tie_embeddings,
            position_embedding_type="learned_absolute" if m.position_embedding == "learned" else "rope",
        )
        ddp = DistributedDataParallel(
            config,
            DistributedDataParallelConfig(
                grad_reduce_in_fp32=True, use_distributed_optimizer=True, overlap_grad_reduce=False,
            ),
            model,
        )
        param_gather, workaround = compat.param_gather(ddp)
        applied += [workaround] if workaround else []
        attribution = Attribution(group_namer(), rank=rank, stage=stage, layer_offset=stage * setup.layers_per_stage)
        attribution.attach(model)
        collectives.install(attribution.on_call)

        def finalize(*args, **kwargs):
            attribution.after_backward = True
            finalize_model_grads(*args, **kwargs)

        config.finalize_model_grads_func = finalize
        config.no_sync_func = ddp.no_sync

        b, s = setup.micro_batch, setup.seq_length
        generator = torch.Generator().manual_seed(seed + 7)
        batches = [
            {
                "tokens": torch.randint(0, m.vocab_size, (b, s), generator=generator),
                "labels": torch.randint(0, m.vocab_size, (b, s), generator=generator),
            }
            for _ in range(setup.num_microbatches)
        ]
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

        ddp.zero_grad_buffer()
        attribution.enabled = True
        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter(batches),
            model=[ddp],
            num_microbatches=setup.num_microbatches,
            seq_length=s,
            micro_batch_size=b,
            forward_only=False,
        )
        attribution.after_backward = True
        param_gather()  # what the distributed optimizer's step issues
        attribution.enabled = False
        parameters = sum(p.numel() for p in model.parameters())
        buffered = sum(bucket.grad_data.numel() for buffer in ddp.buffers for bucket in buffer.buckets)
        meta = {"rank": rank, "stage": stage, "parameters": parameters, "buffer_padding": buffered - parameters,
                "megatron_core": compat.megatron_version(), "workarounds": applied + sorted(compat.USED)}
        return attribution.records, meta
    finally:
        collectives.install(lambda call: None)
        with contextlib.suppress(Exception):
            dist.barrier()
        ps.destroy_model_parallel()
