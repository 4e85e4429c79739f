"""The CP exchange timed in a sweep's simulation: one model with ``commsweep validate``'s, the
workload's core attention rows carrying its exposed part, and the collectives table its
collectives, which the difference by cause finds by the schedule's own keys."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from commsweep.orchestration import cli, sweep
from commsweep.setup.arguments import to_commsweep_argv
from commsweep.simulate import engine
from commsweep.simulate.stage import SIMULATE, cp_exchange_of
from commsweep.workload import format as wf
from commsweep.workload import megatron
from commsweep.workload import megatron_context_parallel as cp
from test_causes import default_config
from test_cp_time import setup

GBPS = 400.0  # 10^9 bytes/s


@pytest.mark.parametrize("kind,size", [("p2p", 4), ("all_gather", 2), ("a2a", 4), ("a2a+p2p", 4)])
def test_the_priced_collectives_add_up_to_the_validation_models_exposed_time(kind, size):
    s = setup(size, kind, tp=1)
    x = cp.exchange(s)
    step = (30.0, 75.0)
    fwd, bwd = cp.priced(x, step, GBPS)
    assert (sum(p.exposed_us for p in fwd), sum(p.exposed_us for p in bwd)) == pytest.approx(
        cp.exposed_us(s, step, GBPS))
    # The priced collectives are the schedule's, in its order.
    assert ([p.comm for p in fwd], [p.comm for p in bwd]) == cp.collectives(x)
    assert all(0 <= p.exposed_us <= p.time_us for p in fwd + bwd)


def test_the_ring_by_hand():
    # tiny-llama at CP 4, TP 1: a rank's chunk is 2048 tokens of 4 KV groups x 64 dims:
    # K and V, 2 x 2048 x 4 x 64 x 2 bytes = 2 MiB, 5.24 us at 400 GB/s; each step's kernel half that.
    s = setup(4, "p2p")
    x = cp.exchange(s)
    assert x.kv == 2 * 2048 * 4 * 64 * 2
    t = x.kv / (GBPS * 1e3)  # us
    fwd, bwd = cp.priced(x, (t / 2, t / 2), GBPS)
    assert [p.exposed_us for p in fwd] == pytest.approx([t / 2] * 3)
    # Backward: KV, then KV and dKV (2 KV) twice, each behind a step; the last dKV whole.
    assert [p.exposed_us for p in bwd] == pytest.approx([t / 2, 1.5 * t, 1.5 * t, t])


def test_an_exchange_reads_back_as_written_and_bad_text_says_why():
    x = cp.exchange(setup(4, "a2a+p2p", tp=2, recompute=True))
    assert cp.Exchange.parse(x.text()) == x
    assert x.text() == f"a2a+p2p:cp=4,inner=2,outer=2,kv={x.kv},q={x.q},tp=2" + (",selective" if x.selective else "")
    for bad, why in (("ring:cp=2", "expected p2p"), ("p2p:cp=2", "expected cp=N"),
                     ("p2p:cp=2,inner=1,outer=3,kv=1,q=1,tp=1", "inner x outer"),
                     ("p2p:cp=x,inner=1,outer=2,kv=1,q=1,tp=1", "whole numbers")):
        with pytest.raises(ValueError, match=why):
            cp.Exchange.parse(bad)
    assert cp.exchange(setup(1)) is None


def llama_cp(**axes) -> dict:
    config = default_config(model=["llama-7b"], tp=[2], sp=[True], aiob=[False], network=["netA"],
                            seq_length=[4096], global_batch=[16], cp=[2])
    config["sweep"].update(axes)
    return config


def test_the_stage_plans_the_exchange_for_megatron_points_only():
    points, _ = sweep.points_from_config(llama_cp())
    megatron_point = next(p for p in points if p.schedule == "megatron")
    aicb_point = next(p for p in points if p.schedule == "aicb")
    assert cp_exchange_of(megatron_point) == cp.exchange(megatron_point.setup).text()
    assert cp_exchange_of(aicb_point) is None
    job = SIMULATE.job(megatron_point, llama_cp(), ("w.txt",), ("e.csv", "c.csv", "t.csv"))
    argv = SIMULATE.argv(job)
    assert argv[argv.index("--cp-exchange") + 1] == cp_exchange_of(megatron_point)
    assert "--cp-exchange" not in SIMULATE.argv(SIMULATE.job(aicb_point, llama_cp(), ("w.txt",),
                                                              ("e.csv", "c.csv", "t.csv")))


def _simulate(tmp_path, workload, name, *extra) -> tuple[list[dict], str]:
    out = tmp_path / name
    assert cli.main(["simulate", "-w", str(workload), "-g", "16", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360",
                     "-nic", "48.5", "-r", f"{name}-", "--out-dir", str(out), *extra]) == 0
    with open(out / f"{name}-collectives.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    return table, (out / f"{name}-EndToEnd.csv").read_text()


@pytest.mark.parametrize("kind", ["p2p", "a2a"])
def test_a_megatron_cp_point_carries_the_exchange_in_its_simulation(tmp_path, kind):
    points, _ = sweep.points_from_config(llama_cp(cp_comm_type=[kind]))
    point = next(p for p in points if p.schedule == "megatron")
    workload = tmp_path / "w.txt"
    assert cli.main(["generate", *to_commsweep_argv(point.setup), "--schedule", "megatron", "-o", str(workload)]) == 0
    spec = cp_exchange_of(point)
    plain, plain_e2e = _simulate(tmp_path, workload, "plain")
    priced, priced_e2e = _simulate(tmp_path, workload, "priced", "--cp-exchange", spec)
    assert priced[:len(plain)] == plain  # the simulation's own collectives are untouched
    extra = priced[len(plain):]
    assert {r["group"] for r in extra} == {"CP"} and {r["group_size"] for r in extra} == {"2"}
    # Every CP collective of the schedule is there, by the keys the difference by cause looks up.
    sched = megatron.schedule(point.setup)
    want = sorted((u.phase, u.comm.collective, engine.effective_size(u.phase, u.comm.bytes))
                  for u in sched.unexpressed if u.comm.group == "CP")
    assert sorted((r["phase"], r["collective"], int(r["bytes"])) for r in extra) == want
    # Without AIOB there is no compute to hide behind: every collective shows whole, on NVLink
    # (TP 2 x CP 2 fit a server), 360 GiB/s.
    x = cp.Exchange.parse(spec)
    gbps = 360 * 2**30 / 1e9
    fwd, bwd = cp.priced(x, (0.0, 0.0), gbps)
    per_layer = sum(p.time_us for p in fwd + bwd)
    layers, micro_batches = point.setup.model.num_layers, point.setup.num_microbatches
    exposed_ns = sum(round(float(r["exposed_us"]) * 1000) for r in extra)
    assert exposed_ns == pytest.approx(per_layer * 1000 * layers * micro_batches, abs=len(extra))
    # SimAI's total grows by exactly the compute added to the core attention rows.
    before = wf.read(workload)
    after, _ = cp.in_rows(before, x, gbps)
    added = sum(a.fwd_compute + a.ig_compute - b.fwd_compute - b.ig_compute for a, b in zip(after.rows, before.rows))
    assert added == exposed_ns
    changed = {b.name for a, b in zip(after.rows, before.rows) if a != b}
    assert changed == {f"layer{n}_attention_proj" for n in range(layers)}
    total = [int(line.split(", ")[-1]) for line in (plain_e2e.split("\n")[1], priced_e2e.split("\n")[1])]
    assert total[1] - total[0] == pytest.approx(added / 1000, abs=2)


def test_the_ring_hides_behind_a_profiles_attention(tmp_path):
    # With compute in the rows, each ring step hides behind one step of the row's attention.
    s = dataclasses.replace(setup(2, "p2p"), tp=1)
    x = cp.exchange(s)
    text = megatron.schedule(s).workload()
    rows = tuple(dataclasses.replace(r, fwd_compute=10**9, wg_compute=10**6) if r.name.endswith("attention_proj") else r
                 for r in text.rows)
    slow, _ = cp.in_rows(dataclasses.replace(text, rows=rows), x, GBPS)
    added = {r.name: (r.fwd_compute - o.fwd_compute, r.ig_compute - o.ig_compute)
             for r, o in zip(slow.rows, rows) if r != o}
    last_dkv = round(x.kv / (GBPS * 1e3) * 1000)
    assert set(added.values()) == {(0, last_dkv)}  # steps hidden; only the last dKV waited for
