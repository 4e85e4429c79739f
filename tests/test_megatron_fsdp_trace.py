"""torch FSDP2 as megatron-core wraps it, traced on two gloo processes, against the schedule.

megatron-core core_v0.16.1's ``TorchFullyShardedDataParallel`` runs on a CPU-only torch 2.13
with two stand-ins: its device mesh is made on ``cpu`` (it asks for ``cuda``), and the output
layer is marked as the one ``ColumnParallelLinear`` to wrap: with Transformer Engine's layers
(megatron's default) that is the only one, but the local layer spec the CPU trace runs builds
linear_qkv and linear_fc1 as ``ColumnParallelLinear`` too, which megatron would wrap as units of
their own. The model is cast to bf16 as Megatron-LM's ``Float16Module`` does. Every
all-gather and reduce-scatter FSDP2 issues (``torch.distributed.all_gather_single``,
``reduce_scatter_single``) is counted with its whole tensor's bytes.

megatron-fsdp cannot run here: building ``FullyShardedDataParallel`` asserts einops (not
installed), then makes ``cuda`` device meshes (``mcore_fsdp_adapter.py``, ``_init_dist_index``)
and ``torch.cuda.Stream()`` objects (``MegatronFSDP._init_fsdp_param_and_grad_buffer``).
"""

from __future__ import annotations

import json

import pytest

from commsweep.setup.training import TrainingSetup
from commsweep.trace import runner
from commsweep.workload import chakra_graph, megatron

from test_megatron import TINY_LLAMA

MISSING = runner.missing_dependencies()


def setup() -> TrainingSetup:
    return TrainingSetup(model=TINY_LLAMA, world_size=2, micro_batch=1, global_batch=4, seq_length=64,
                         fsdp="torch_fsdp2")


def _worker(rank: int, world: int, store: str, out: str) -> None:
    """One gloo process: megatron's GPT under TorchFullyShardedDataParallel, two micro-batches."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    calls: list = []
    for name, kind, index, key in (("all_gather_single", "allgather", 0, "output_tensor"),
                                   ("reduce_scatter_single", "reducescatter", 1, "input")):
        original = getattr(dist, name)

        def counted(*args, _original=original, _kind=kind, _index=index, _key=key, **kwargs):
            whole = args[_index] if len(args) > _index else kwargs[_key]
            calls.append([_kind, whole.numel() * whole.element_size()])
            return _original(*args, **kwargs)

        setattr(dist, name, counted)
    from commsweep.trace import model as tm  # megatron, on the CPU
    from megatron.core.distributed import torch_fully_sharded_data_parallel as fsdp
    from megatron.core.distributed.torch_fully_sharded_data_parallel_config import TorchFullyShardedDataParallelConfig
    from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.tensor_parallel import ColumnParallelLinear
    from megatron.core.transformer.transformer_layer import TransformerLayer

    make_mesh = fsdp.DeviceMesh.from_group

    class CpuMesh:
        @staticmethod
        def from_group(group, device_type, *args, **kwargs):
            return make_mesh(group, "cpu", *args, **kwargs)

    class OutputLayer(ColumnParallelLinear):
        """The output layer, the one ColumnParallelLinear megatron wraps with TE's layers."""

    fsdp.DeviceMesh = CpuMesh
    s = setup()
    with tm.CudaFactoriesOnCpu():
        tm.ps.initialize_model_parallel(**tm.compat.parallel_sizes(1, 1, 1, 1))
        tm.compat.cpu_rng_tracker()
        torch.manual_seed(1)
        config = tm.transformer_config(s)
        model = tm._gpt_model(s, config, 0, 0, True, True, []).to(torch.bfloat16)
        model.output_layer.__class__ = OutputLayer
        wrapped = fsdp.TorchFullyShardedDataParallel(
            config, TorchFullyShardedDataParallelConfig(), model,
            sub_modules_to_wrap={TransformerLayer, LanguageModelEmbedding, RotaryEmbedding, OutputLayer})
        b, length = s.micro_batch, s.seq_length
        positions = torch.arange(length).unsqueeze(0)
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1).expand(b, 1, length, length)
        generator = torch.Generator().manual_seed(3)
        for mb in range(s.num_microbatches):
            calls.append(["micro-batch", mb])
            tokens = torch.randint(0, s.model.vocab_size, (b, length), generator=generator)
            wrapped(tokens, positions, mask, labels=tokens).float().mean().backward()
        tm.ps.destroy_model_parallel()
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(calls, fh)
    dist.destroy_process_group()


def traced(tmp_path) -> list[list[tuple[str, int]]]:
    """Rank 0's FSDP collectives per micro-batch: (collective, bytes) in issue order."""
    import torch.multiprocessing as mp

    out = tmp_path / "calls.json"
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    per_mb: list[list[tuple[str, int]]] = []
    for call in json.loads(out.read_text()):
        if call[0] == "micro-batch":
            per_mb.append([])
        else:
            per_mb[-1].append((call[0], call[1]))
    return per_mb


def scheduled(s: TrainingSetup) -> list[list[tuple[str, int]]]:
    """Rank 0's DP collectives per micro-batch in the schedule's Chakra traces."""
    nodes, _ = chakra_graph.megatron_traces([megatron.schedule(s)])
    sc = megatron.schedule(s)
    per_mb: list[list[tuple[str, int]]] = [[] for _ in range(s.num_microbatches)]
    for n in nodes[0]:
        if n.kind == "coll" and n.group == "DP":
            per_mb[sc.blocks[n.row].micro_batch].append((n.collective, n.size))
    return per_mb


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_traced_torch_fsdp2_matches_the_schedule(tmp_path):
    s = setup()
    real, ours = traced(tmp_path), scheduled(s)
    assert len(real) == len(ours) == 2
    for mb in range(2):
        # The same collectives of the same sizes: per kind in the same order; FSDP2 prefetches
        # a unit's backward gather before the reduce-scatter of the unit after it, which the
        # schedule places at the layer it serves.
        for kind in ("allgather", "reducescatter"):
            assert [c for c in real[mb] if c[0] == kind] == [c for c in ours[mb] if c[0] == kind], (mb, kind)
        assert sorted(real[mb]) == sorted(ours[mb])
    # root (final norm 64), embedding (1024 x 64), 4 layers (44,160), output layer, in bf16:
    # forward, then backward from the root's regather.
    assert [c[1] for c in real[0][:8]] == [128, 131_072] + [88_320] * 4 + [131_072, 128]
