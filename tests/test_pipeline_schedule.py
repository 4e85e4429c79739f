"""The time model's pipeline against megatron's interleaved 1F1B schedule, event by event:
megatron-core's order of passes (read from the installed release's own functions), and the
engine's bubble on a workload of one rank's passes against the schedule's iteration time."""

from __future__ import annotations

import pytest

from commsweep.setup.models import preset
from commsweep.setup.network import Network
from commsweep.setup.training import TrainingSetup
from commsweep.simulate import engine
from commsweep.simulate.pipeline_schedule import Pass, iteration_time, rank_order, schedule_table
from commsweep.workload import format as wf


@pytest.mark.parametrize("p, v, g", [(2, 2, 4), (4, 2, 8), (4, 3, 4), (4, 1, 6)])
def test_the_order_of_passes_is_megatron_cores(p, v, g):
    schedules = pytest.importorskip("megatron.core.pipeline_parallel.schedules")
    import inspect

    if "microbatch_group_size_per_vp_stage" not in inspect.signature(schedules.get_schedule_table).parameters:
        pytest.skip("this megatron-core has no schedule table")
    assert schedule_table(g, v, p) == schedules.get_schedule_table(g, v, p)
    for rank in range(p):
        order = rank_order(p, v, g, rank)
        assert len(order) == 2 * g * v and len(set(order)) == 2 * g * v
        # Each chunk's forward of a micro-batch comes before its backward.
        assert all(order.index(Pass(False, op.micro_batch, op.chunk)) < i for i, op in enumerate(order) if op.backward)
    # get_pp_rank_microbatches: rank 0's warm-up forwards, then one forward before its first backward.
    warmup = min(g * v, (p - 1) * 2 + (v - 1) * p if v > 1 else p - 1)
    first = rank_order(p, v, g, 0)
    assert next(i for i, op in enumerate(first) if op.backward) == (warmup if warmup == g * v else warmup + 1)


def _workload(p: int, v: int, g: int, fwd: list[int], bwd: list[int], rank: int) -> wf.Workload:
    """One rank's passes as SimAI rows (no collectives): g micro-batches of its v chunks."""
    rows = tuple(wf.Row(name=f"mb{mb}_chunk{c}", dependency=-1, fwd_compute=fwd[c * p + rank], fwd_comm="NONE",
                        fwd_size=0, ig_compute=bwd[c * p + rank], ig_comm="NONE", ig_size=0, wg_compute=0,
                        wg_comm="NONE", wg_size=0)
                 for mb in range(g) for c in range(v))
    header = wf.Header(tp=1, ep=1, pp=p, vpp=v, ga=g, all_gpus=p)
    return wf.Workload(header=header, rows=rows)


NET = Network(gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="25", gpus=8)


@pytest.mark.parametrize("p, v, g", [(2, 1, 4), (4, 1, 8), (4, 2, 8), (4, 4, 8), (8, 2, 16), (4, 2, 16)])
def test_the_engines_bubble_is_the_interleaved_schedules_with_even_stages(p, v, g):
    fwd, bwd = [1000] * (p * v), [2000] * (p * v)  # ns: backward twice the forward
    schedule = iteration_time(p, v, g, fwd, bwd)
    for rank in (0, p - 1):
        total = engine.simulate(_workload(p, v, g, fwd, bwd, rank), NET).total_us
        assert total * 1000 == pytest.approx(schedule, rel=1e-9)
    # Interleaving shortens the bubble v-fold: (p - 1) chunk passes, not stage passes.
    assert schedule == (g * v + p - 1) * 3000


def test_uneven_stages_make_one_stages_bubble_wrong_both_ways():
    """SimAI's bubble scales the simulated stage's own passes: short on a light stage, long
    on the heaviest (the schedule's fill and drain run through every stage)."""
    p, v, g, layers = 4, 1, 8, (7, 9, 9, 7)
    fwd, bwd = [1000 * n for n in layers], [2000 * n for n in layers]
    schedule = iteration_time(p, v, g, fwd, bwd)
    light = engine.simulate(_workload(p, v, g, fwd, bwd, 0), NET).total_us * 1000
    heavy = engine.simulate(_workload(p, v, g, fwd, bwd, 1), NET).total_us * 1000
    assert light < schedule < heavy
    assert round(schedule) == 279_000 and round(light) == 231_000 and round(heavy) == 297_000


def test_megatron_core_refuses_the_micro_batches_the_setup_refuses():
    """megatron-core's interleaved schedule, called with p = 4 and 2 chunks, stops at its
    micro-batch check for 6 micro-batches and gets past it for 8, as the setup's rule says."""
    schedules = pytest.importorskip("megatron.core.pipeline_parallel.schedules")
    import types

    import torch
    from megatron.core.enums import ModelType
    from megatron.core.model_parallel_config import ModelParallelConfig

    from commsweep.trace.model import CudaFactoriesOnCpu

    config = ModelParallelConfig(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2,
                                 pipeline_dtype=torch.float32)

    class Chunk(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config, self.model_type = config, ModelType.encoder_or_decoder

    group = types.SimpleNamespace(size=lambda: 4, rank=lambda: 0)
    p2p = types.SimpleNamespace(pp_group=group, config=config, virtual_pipeline_model_parallel_size=2)
    groups = types.SimpleNamespace(tp=None, cp=None, embd=None, pos_embd=None, pp=group, dp_cp=None)
    refused = {}
    for g in (6, 8):
        try:
            with CudaFactoriesOnCpu():
                schedules.forward_backward_pipelining_with_interleaving(
                    forward_step_func=None, data_iterator=[None, None], model=[Chunk(), Chunk()], num_microbatches=g,
                    seq_length=8, micro_batch_size=1, p2p_communicator=p2p, pg_collection=groups)
        except Exception as err:  # past the check, the stand-ins fail on what they lack
            refused[g] = "The remainder of M" in str(err)
        setup = TrainingSetup(model=preset("gpt-7b"), world_size=4, pp=4, virtual_pipeline=2, global_batch=g)
        assert bool(setup.problems()) == refused[g]
    assert refused == {6: True, 8: False}
