"""Where the distributed optimizer's buckets go: each reduce row in the layer where its bucket
fills (workload/megatron_data_parallel.py), what SimAI makes of it, and the Chakra traces'
dependencies (workload/chakra_graph.py), on small setups."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.aiob import megatron_kernels as mk
from commsweep.aiob.gpus import GPUS
from commsweep.analysis import audit
from commsweep.setup.models import PRESETS
from commsweep.setup.network import Network
from commsweep.setup.training import TrainingSetup
from commsweep.simulate.engine import simulate
from commsweep.workload import chakra_graph, megatron
from commsweep.workload.format import Workload
from commsweep.workload.megatron_buckets import overlap_rows, stage_buckets
from commsweep.workload.row_names import bucket_of

# GPT-7B at TP 2 x DP 4, two micro-batches, buckets of about three layers.
SMALL = TrainingSetup(model=PRESETS["gpt-7b"], world_size=8, tp=2, sp=True, global_batch=8,
                      overlap_grad_reduce=True, ddp_bucket_size=600_000_000)
PIPELINED = TrainingSetup(model=PRESETS["gpt-7b"], world_size=8, tp=2, pp=2, sp=True, global_batch=8,
                          overlap_grad_reduce=True, overlap_param_gather=True, ddp_bucket_size=600_000_000)


def _timed(setup: TrainingSetup, stage: int = 0) -> megatron.Schedule:
    times = mk.row_times(setup, GPUS["H100-SXM"], mk.software("core"),
                         parameters=megatron.local_parameters(setup, stage))
    return megatron.schedule(setup, stage=stage, times=times)


def _reduce_rows(blocks) -> list[tuple[int, int]]:
    """(row, bucket) of every dense bucket reduce row."""
    return [(i, b[1]) for i, blk in enumerate(blocks)
            if (b := bucket_of(blk.name)) is not None and b[0] == "dp_grad_reducescatter"]


@pytest.mark.parametrize("setup", [SMALL, PIPELINED], ids=["dp", "pp2"])
def test_each_reduce_row_stands_before_the_first_row_of_the_layer_where_its_bucket_fills(setup):
    """The bucket's last gradient is that of its member first in forward order: the lowest
    layer it holds, or the embedding. SimAI runs rows backwards in backward, so the row right
    after the bucket rows is the one whose backward it follows: micro-batch 0's first row of
    that layer (micro-batch 0's backward pass is the one SimAI runs last)."""
    for stage in range(setup.pp):
        blocks = megatron.schedule(setup, stage=stage).blocks
        buckets = stage_buckets(setup, stage)
        placed = _reduce_rows(blocks)
        assert sorted(i for _, i in placed) == list(range(len(buckets)))
        for row, index in placed:
            after = next(b for b in blocks[row:] if bucket_of(b.name) is None)
            bucket = buckets[index]
            assert after.micro_batch == 0
            if any(t.name.startswith("embedding.") for t in bucket.members):
                assert after.name == "embedding_layer"
            elif bucket.layers:
                assert after.layer == min(bucket.layers)
                assert after.name == f"layer{after.layer}_attention_qkv"  # the layer's first row
            else:  # the output layer and the final norm
                assert after.name == "output_layer"
        # at one place, bucket 0 (the later layers) runs first: it stands last in the file
        for (r1, i1), (r2, i2) in zip(placed, placed[1:]):
            assert r1 < r2 and (i1 > i2 or r2 > r1 + 1)


def test_the_placed_rows_change_neither_simai_totals_nor_the_layers_the_audit_counts():
    """SimAI prices a DP collective alone, under one ratio, and leaves the weight-gradient
    column out of the bubble: the same rows after the backward pass give the same times."""
    sched = _timed(SMALL)
    placed = sched.workload()
    rows = list(placed.rows)
    moved = [r for r in rows if bucket_of(r.name) and r.name.startswith("dp_grad_reducescatter")]
    rest = [r for r in rows if r not in moved]
    first = next(i for i, r in enumerate(rest) if r.name == "embedding_layer")
    after = Workload(header=placed.header, rows=tuple(rest[:first] + moved + rest[first:]))
    assert [r.name for r in after.rows] != [r.name for r in rows]
    net = Network(gpus=8, gpus_per_server=8, nics_per_server=8, nvlink_gbps=360, nic_gbps=50, dp_overlap="0.3")
    a, b = simulate(placed, net).components, simulate(after, net).components
    assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-12) for k in a)
    audit.check_rows(placed, SMALL, "placed")  # still two micro-batches of 32 layers each


def _deps_of(nodes, node_id):
    return nodes[node_id].deps


def test_chakra_reduces_run_beside_the_backward_and_the_optimizer_waits_for_the_last():
    """Rank 0's graph: each bucket's reduce depends on the compute before it and on the
    previous bucket's reduce (one stream), no compute depends on it, and the first node of
    the rows after the backward pass (the SP gradients' all-reduce) waits for the last."""
    nodes = chakra_graph.megatron_traces([_timed(SMALL)])[0][0]
    reduces = [n for n in nodes if n.kind == "coll" and n.name.startswith("dp_grad_reducescatter_bucket")]
    assert len(reduces) == len(stage_buckets(SMALL, 0)) > 2
    previous = None
    for n in reduces:
        before = max(d for d in n.deps if d not in {r.id for r in reduces})
        assert nodes[before].kind == "comp" and nodes[before].phase in ("ig", "wg")
        assert (previous is None) == (len(n.deps) == 1) and (previous is None or previous in n.deps)
        previous = n.id
    assert [n.name for n in nodes if previous in n.deps] == ["sp_grads_allreduce.ig.ALLREDUCE"]
    # the compute goes on without waiting: nothing but the next reduce depends on the others
    for n, after in zip(reduces, reduces[1:]):
        assert [m.id for m in nodes if n.id in m.deps] == [after.id]


def test_chakra_gathers_run_in_the_forward_pass_each_waited_for_where_its_bucket_is_first_needed():
    """overlap_param_gather on stage 0: no gather is left in the backward pass; each gather
    depends on the one before (one stream); the first forward node of the row that first needs a
    bucket depends on its gather, and the next gather is dispatched right after that wait."""
    sched = _timed(PIPELINED, 0)
    names = [b.name for b in sched.blocks]
    which = overlap_rows(names, True, True)
    (chain,) = which.gathers
    assert len(chain) == len(stage_buckets(PIPELINED, 0))
    nodes = chakra_graph.megatron_traces([sched, _timed(PIPELINED, 1)])[0][0]
    gathers = [n for n in nodes if n.kind == "coll" and n.name.startswith("dp_param_allgather")]
    assert [g.row for g in gathers] == [row for row, _ in chain]
    backward_start = next(n.id for n in nodes if n.phase == "ig")
    assert all(g.id < backward_start for g in gathers)
    for k, g in enumerate(gathers):
        assert k == 0 or gathers[k - 1].id in g.deps
        waiting = [n for n in nodes if g.id in n.deps and n.kind != "coll"]
        target = chain[k][1]
        assert waiting and waiting[0].row == target and waiting[0].phase == "fwd"


def test_without_overlap_nothing_moves():
    plain = dataclasses.replace(SMALL, overlap_grad_reduce=False, ddp_bucket_size=None)
    blocks = megatron.schedule(plain).blocks
    assert not any(bucket_of(b.name) for b in blocks)
    assert overlap_rows([b.name for b in blocks], False, False) == overlap_rows([], False, False)
