"""FSDP's per-layer parameter all-gathers timed in a sweep's simulation: the gathers of the
schedule, what megatron-fsdp's prefetch leaves exposed (by hand), the table's lines and the
stage's plan."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from commsweep.orchestration import cli, sweep
from commsweep.setup.arguments import to_commsweep_argv
from commsweep.simulate.stage import SIMULATE, fsdp_gathers_of
from commsweep.workload import format as wf
from commsweep.workload import megatron, megatron_fsdp
from test_causes import default_config
from test_megatron_fsdp import tiny


@pytest.mark.parametrize("fsdp", ["optim_grads_params", "torch_fsdp2"])
def test_a_layers_gather_is_the_schedules(fsdp):
    s = tiny(fsdp, world_size=4)
    g = megatron_fsdp.gathers(s, 0)
    layer_gathers = {u.comm.bytes for u in megatron.schedule(s).unexpressed
                     if u.module == "fsdp.unit.param_allgather" and u.layer is not None and u.layer >= 0
                     and u.layer < megatron_fsdp.OUTPUT}
    assert layer_gathers == set(g.layer_bytes) and len(g.layer_bytes) == 1
    assert g.kind == ("torch" if fsdp == "torch_fsdp2" else "megatron")
    assert megatron_fsdp.Gathers.parse(g.text()) == g
    for unsharded in ("none", "optim", "optim_grads"):
        assert megatron_fsdp.gathers(tiny(unsharded, world_size=4), 0) is None
    with pytest.raises(ValueError, match="layer_bytes"):
        megatron_fsdp.Gathers.parse("megatron:bytes=3")


def test_fp8_parameters_gather_a_layer_in_two_buckets():
    s = tiny("optim_grads_params", world_size=4, fp8_param_gather=True)
    g = megatron_fsdp.gathers(s, 0)
    layer_gathers = sorted(u.comm.bytes for u in megatron.schedule(s).unexpressed
                           if u.module == "fsdp.unit.param_allgather" and u.layer == 0 and u.micro_batch == 0
                           and u.phase == "fwd")
    assert sorted(g.layer_bytes) == layer_gathers and len(layer_gathers) == 2
    assert megatron_fsdp.Gathers.parse(g.text()) == g
    # A layer waits for both: what shows is taken from the last bucket's gather back.
    w = timed(s, 1500, 0)
    _, gathered = megatron_fsdp.in_rows(w, g, (1000, 1000))
    assert sum(x.exposed_ns for x in gathered if x.phase == "fwd") == s.num_microbatches * (
        2000 + (s.model.num_layers - 1) * 500)


def timed(s, fwd_ns: int, bwd_ns: int) -> wf.Workload:
    """The schedule's workload with each layer's rows given ``fwd_ns`` forward and ``bwd_ns``
    input-gradient compute in all (on its first row)."""
    w = megatron.schedule(s).workload()
    runs = megatron_fsdp.layer_runs(w)
    rows = [dataclasses.replace(r, fwd_compute=0, ig_compute=0, wg_compute=0) for r in w.rows]
    for _, members in runs:
        rows[members[0]] = dataclasses.replace(rows[members[0]], fwd_compute=fwd_ns, ig_compute=bwd_ns)
    return dataclasses.replace(w, rows=tuple(rows))


def test_the_layers_are_found_per_micro_batch():
    s = tiny("optim_grads_params", world_size=4, global_batch=8)  # 2 micro-batches of 4 layers
    runs = megatron_fsdp.layer_runs(megatron.schedule(s).workload())
    assert (s.num_microbatches, s.model.num_layers) == (2, 4)
    assert [layer for layer, _ in runs] == [0, 1, 2, 3] * 2


@pytest.mark.parametrize("fwd,bwd", [(0, 0), (300, 700), (2000, 2000)])
def test_the_prefetch_hides_each_gather_behind_the_layer_before_it(fwd, bwd):
    # By hand, g = 1000 ns: each pass of each micro-batch waits for its first layer's gather
    # whole and for the other's beyond the neighbour layer's compute.
    s = tiny("optim_grads_params", world_size=4, global_batch=8)
    g, w = megatron_fsdp.gathers(s, 0), timed(s, fwd, bwd)
    layers, mbs = s.model.num_layers, s.num_microbatches
    priced, gathered = megatron_fsdp.in_rows(w, g, (1000,))
    want_fwd = mbs * (1000 + (layers - 1) * max(0, 1000 - fwd))
    want_bwd = mbs * (1000 + (layers - 1) * max(0, 1000 - bwd))
    added = [sum(getattr(a, f"{p}_compute") - getattr(b, f"{p}_compute") for a, b in zip(priced.rows, w.rows))
             for p in ("fwd", "ig")]
    assert added == [want_fwd, want_bwd]
    # The table: one line per gather, every gather of a phase at its mean, adding up to the rows.
    assert len(gathered) == 2 * layers * mbs
    assert [sum(x.exposed_ns for x in gathered if x.phase == p) for p in ("fwd", "ig")] == added
    assert {x.time_ns for x in gathered} == {1000} and {x.bytes for x in gathered} == set(g.layer_bytes)
    # Forward's on each layer's first row, backward's on its last, as the schedule anchors them.
    anchors = {(u.phase, u.anchor) for u in megatron.schedule(s).unexpressed
               if u.module == "fsdp.unit.param_allgather" and u.layer is not None and 0 <= u.layer < 1 << 30}
    assert {(x.phase, x.name) for x in gathered} == anchors


def llama_fsdp(**axes) -> dict:
    config = default_config(model=["llama-7b"], tp=[2], sp=[True], aiob=[False], network=["netA"],
                            seq_length=[2048], global_batch=[16], fsdp=["optim_grads_params"])
    config["sweep"].update(axes)
    return config


def test_a_megatron_fsdp_point_carries_its_gathers_in_its_simulation(tmp_path):
    config = llama_fsdp()
    points, _ = sweep.points_from_config(config)
    point = next(p for p in points if p.schedule == "megatron")
    spec = fsdp_gathers_of(point, config)
    assert spec == megatron_fsdp.gathers(point.setup, 0).text()
    argv = SIMULATE.argv(SIMULATE.job(point, config, ("w.txt",), ("e.csv", "c.csv", "t.csv")))
    assert argv[argv.index("--fsdp-gathers") + 1] == spec
    workload = tmp_path / "w.txt"
    assert cli.main(["generate", *to_commsweep_argv(point.setup), "--schedule", "megatron", "-o", str(workload)]) == 0
    tables = {}
    for name, extra in (("plain", []), ("priced", ["--fsdp-gathers", spec])):
        assert cli.main(["simulate", "-w", str(workload), "-g", "16", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360",
                         "-nic", "48.5", "-r", f"{name}-", "--out-dir", str(tmp_path), *extra]) == 0
        with open(tmp_path / f"{name}-collectives.csv", newline="") as fh:
            tables[name] = list(csv.DictReader(fh))
    extra = tables["priced"][len(tables["plain"]):]
    layers, mbs = point.setup.model.num_layers, point.setup.num_microbatches
    assert len(extra) == 2 * layers * mbs
    assert {(r["collective"], r["group"], r["group_size"]) for r in extra} == {("allgather", "DP", "8")}
    # Without compute nothing hides a gather: each shows whole.
    assert {r["exposed_us"] for r in extra} == {extra[0]["time_us"]}


def test_the_difference_by_cause_counts_the_gathers_exposed_time(tmp_path):
    from commsweep.analysis import causes
    from commsweep.base import paths
    from test_causes import point_totals, run_sweep

    config = llama_fsdp()
    results = tmp_path / "results"
    run_sweep(results, config)
    [pc] = causes.sweep_causes(results / "sweep.csv", paths.PointFiles.under(results))
    megatron_point = next(p for p in sweep.points_from_config(config)[0] if p.schedule == "megatron")
    _, want_ns = point_totals(results, pc.point.cells, {"workload": megatron_point.workload_key,
                                                       "point": megatron_point.point_key})
    assert sum(r.exposed_ns for r in pc.rows) == want_ns
    assert "unattributed" not in {r.cause for r in pc.rows}
    gathers = [r for r in pc.rows if r.cause == "fsdp_param_gathers_missing"]
    # Every layer's gather, 32 layers x 2 micro-batches per phase, counts what Megatron's
    # simulation exposed of it (the embedding's and output layer's, unpriced, add 0).
    with open(paths.point_dir(results, megatron_point.point_key) / "collectives.csv", newline="") as fh:
        priced = [r for r in csv.DictReader(fh) if r["phase"] in ("fwd", "ig") and r["group"] == "DP"]
    assert len(priced) == 2 * 32 * 2
    assert sum(r.exposed_ns for r in gathers) == -sum(round(float(r["exposed_us"]) * 1000) for r in priced) < 0
