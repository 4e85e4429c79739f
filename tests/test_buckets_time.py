"""The exposed time of megatron's overlapped buckets (simulate/overlap.py's bucket_times), the
DP ratio it gives SimAI, and ``simulate --bucket-overlap``."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.aiob import megatron_kernels as mk
from commsweep.aiob.gpus import GPUS
from commsweep.setup.models import PRESETS
from commsweep.setup.network import Network
from commsweep.setup.training import TrainingSetup
from commsweep.simulate import run as simulation
from commsweep.base.jobfields import to_argv
from commsweep.simulate.endtoend import read
from commsweep.simulate.engine import comm_time_ns, simulate
from commsweep.simulate.overlap import bucket_times, megatron_overlap
from commsweep.simulate.stage import SimulateJob
from commsweep.workload import format as wf
from commsweep.workload import megatron

NET = Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps=360, nic_gbps=50)
HEADER = wf.Header(tp=2, ep=1, pp=1, vpp=1, ga=1, all_gpus=16, pp_comm=0)


def _row(name, fwd=0, ig=0, wg=0, wg_comm="NONE", wg_size=0) -> wf.Row:
    return wf.Row(name=name, dependency=-1, fwd_compute=fwd, fwd_comm="NONE", fwd_size=0, ig_compute=ig,
                  ig_comm="NONE", ig_size=0, wg_compute=wg, wg_comm=wg_comm, wg_size=wg_size, update_time=100)


# Two buckets over two layers: gathers and the SP row after the backward pass, bucket 1's
# reduce before layer 0 (it fills there), bucket 0's before layer 1.
RS0, RS1, AG0, AG1 = 800 << 20, 400 << 20, 400 << 20, 200 << 20
F, B = 1_000_000, 1_500_000  # ns: each layer's forward, and its backward (ig and wg each)
ROWS = (
    _row("dp_param_allgather_bucket1", wg_comm="ALLGATHER", wg_size=AG1),
    _row("dp_param_allgather_bucket0", wg_comm="ALLGATHER", wg_size=AG0),
    _row("sp_grads_allreduce"),
    _row("dp_grad_reducescatter_bucket1", wg_comm="REDUCESCATTER", wg_size=RS1),
    _row("layer0_attention_qkv", fwd=F, ig=B, wg=B),
    _row("dp_grad_reducescatter_bucket0", wg_comm="REDUCESCATTER", wg_size=RS0),
    _row("layer1_attention_qkv", fwd=F, ig=B, wg=B),
)
WORKLOAD = wf.Workload(header=HEADER, rows=ROWS)


def _ns(comm: str, size: int) -> int:
    return comm_time_ns(comm, "wg", size, HEADER, NET)


def test_each_reduce_hides_behind_the_backward_left_after_it_and_the_last_is_exposed():
    """Backward, as SimAI runs it: layer 1 (3 ms), then bucket 0's reduce is issued at 3 ms;
    layer 0 (3 ms more), then bucket 1's at 6 ms, after bucket 0's if that one still runs.
    The backward ends at 6 ms: what runs past it is exposed."""
    r0, r1 = _ns("REDUCESCATTER", RS0), _ns("REDUCESCATTER", RS1)
    assert r0 > 2 * B  # bucket 0 does not fit behind layer 0's backward
    end = max(2 * B + r0, 4 * B) + r1
    t = bucket_times(WORKLOAD, NET, overlap_grad_reduce=True)
    assert (t.reduce_ns, t.reduce_exposed_ns) == (r0 + r1, end - 4 * B)
    assert (t.gather_ns, t.gather_exposed_ns, t.other_ns) == (0, 0, _ns("ALLGATHER", AG0) + _ns("ALLGATHER", AG1))
    assert t.exposed_ns == t.total_ns - (r0 + r1 - (end - 4 * B))


def test_each_gather_hides_behind_the_forward_of_the_bucket_before_it():
    """Forward: layer 0's pre-hook dispatches bucket 1's gather, waits for it (exposed), then
    dispatches bucket 0's, which runs beside layer 0's forward (1 ms); layer 1 waits for the rest."""
    g0, g1 = _ns("ALLGATHER", AG0), _ns("ALLGATHER", AG1)
    assert g0 > F
    t = bucket_times(WORKLOAD, NET, overlap_grad_reduce=True, overlap_param_gather=True)
    assert (t.gather_ns, t.gather_exposed_ns, t.other_ns) == (g0 + g1, g1 + g0 - F, 0)


def test_without_overlap_everything_is_exposed():
    t = bucket_times(WORKLOAD, NET, overlap_grad_reduce=False)
    assert t.exposed_ns == t.total_ns > 0 and t.ratio == 0.0


def _timed(setup: TrainingSetup) -> megatron.Schedule:
    times = mk.row_times(setup, GPUS["H100-SXM"], mk.software("core"), parameters=megatron.local_parameters(setup, 0))
    return megatron.schedule(setup, times=times)


BASE = TrainingSetup(model=PRESETS["gpt-7b"], world_size=16, tp=2, sp=True, global_batch=16, overlap_grad_reduce=True,
                     overlap_param_gather=True)


def test_simai_with_the_ratio_exposes_what_the_buckets_leave_exposed():
    """One DP ratio for every DP row: SimAI's exposed DP total is the buckets' (to SimAI's
    truncation, under 1 us per row), and the overlap model of a bucketed schedule says so."""
    sched = _timed(BASE)
    workload = sched.workload()
    t = bucket_times(workload, NET, overlap_grad_reduce=True, overlap_param_gather=True)
    assert 0 < t.exposed_ns < t.total_ns
    sim = simulate(workload, dataclasses.replace(NET, dp_overlap=repr(t.ratio)))
    dp_rows = sum(1 for r in workload.rows if r.wg_comm != "NONE")
    assert abs(sim.components["exposed_dp"] - t.exposed_ns / 1000) < dp_rows
    o = megatron_overlap(sched, NET, None, wgrad_gemm_us={k: 0.0 for k in ("attention_qkv", "mlp_fc1", "output_layer")},
                         dgrad_gemm_us={}, async_tp=False, overlap_grad_reduce=False, pp_link_gbps=50,
                         workload=workload)
    assert (o.dp_total_ns, o.dp_hidden_ns) == (t.total_ns, t.total_ns - t.exposed_ns)


def test_more_overlap_less_exposed_time_same_bytes():
    plain = dataclasses.replace(BASE, overlap_grad_reduce=False, overlap_param_gather=False)
    grads = dataclasses.replace(BASE, overlap_param_gather=False)
    exposed, payload = [], []
    for s in (plain, grads, BASE):
        w = _timed(s).workload()
        t = bucket_times(w, NET, overlap_grad_reduce=s.overlap_grad_reduce, overlap_param_gather=s.overlap_param_gather)
        exposed.append(t.exposed_ns)
        payload.append(sum(r.wg_size for r in w.rows if r.wg_comm != "NONE"))
    assert exposed[0] > exposed[1] > exposed[2] > 0
    assert payload[0] <= payload[1] == payload[2] < payload[0] * 1.001  # the buckets' padding only


@pytest.mark.parametrize("overlap", ["grads", "grads+params"])
def test_simulate_bucket_overlap_sets_the_dp_ratio(tmp_path, overlap):
    """``simulate --bucket-overlap``: the EndToEnd's exposed DP is the buckets' exposed time;
    without the flag the job's command line is as before."""
    path = tmp_path / "w.txt"
    wf.write(_timed(BASE).workload(), path)
    common = dict(workload=str(path), gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="50",
                  prefix="p-", out_dir=str(tmp_path))
    assert "--bucket-overlap" not in to_argv(SimulateJob(**common))
    argv = to_argv(SimulateJob(**common, bucket_overlap=overlap))
    assert argv[argv.index("--bucket-overlap") + 1] == overlap
    simulation.run(SimulateJob(**common, bucket_overlap=overlap))
    e2e = read(tmp_path / "p-EndToEnd.csv")
    t = bucket_times(wf.read(path), dataclasses.replace(NET, gpus=16), overlap_grad_reduce=True,
                     overlap_param_gather=overlap == "grads+params")
    assert abs(e2e.components["exposed_dp"] - t.exposed_ns / 1000) < 100
