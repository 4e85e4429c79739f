"""The ASTRA-sim backends: input files, the judging of a run's output, and, with a built
ASTRA-sim (ASTRA_SIM_ROOT: a checkout with build/astra_analytical built, or the binary's folder),
real runs checked by hand and the failures of the reference's table as named failures."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commsweep.setup.network import Network
from commsweep.simulate.astra import command, inputs, runner

from conftest import reference_path

NET = Network(gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="25")


def test_network_file_in_astra_units():
    data = yaml.safe_load(inputs.network_yaml(NET, 32))
    assert data == {"topology": ["Switch", "Switch"], "npus_count": [8, 4], "bandwidth": [360.0, 25.0],
                    "latency": [936.25, 2000.0]}
    half = Network(gpus_per_server=8, nics_per_server=4, nvlink_gbps="300", nic_gbps="50")
    assert yaml.safe_load(inputs.network_yaml(half, 16))["bandwidth"] == [300.0, 50.0 * 4 / 8]
    one = yaml.safe_load(inputs.network_yaml(NET, 4, inputs.Settings(latency_ns=(10, 20))))
    assert one == {"topology": ["Switch"], "npus_count": [4], "bandwidth": [360.0], "latency": [10.0]}


def test_network_must_fill_servers():
    with pytest.raises(Exception, match="do not fill whole servers"):
        inputs.dimensions(NET, 12)


def test_system_file_defaults_and_settings():
    base = json.loads(inputs.system_json(dims=1))
    assert base["all-reduce-implementation"] == ["ring"] and base["local-mem-bw"] == 3350
    set_ = json.loads(inputs.system_json(inputs.Settings(system={"local-mem-bw": 100, "endpoint-delay": 5}), 2))
    assert set_["local-mem-bw"] == 100 and set_["endpoint-delay"] == 5
    with pytest.raises(Exception, match="endpoint-delay: must be at least 1 ns"):
        inputs.Settings(system={"endpoint-delay": 0})
    assert set_["all-gather-implementation"] == ["ring", "ring"]
    with pytest.raises(Exception, match="unknown topology"):
        inputs.Settings(topology=("Torus", "Switch"))


def test_parse_reads_the_reference_log():
    log = reference_path("astra-sim", "example_all_reduce_8npus_1MB.log").read_text()
    ranks = runner.parse(log, 8)
    assert [r.rank for r in ranks] == list(range(8))
    assert {(r.finished_ns, r.exposed_ns) for r in ranks} == {(57426, 57426)}
    with pytest.raises(runner.AstraFailure, match=r"2 of 10 ranks printed no 'finished' line \(ranks 8, 9\)"):
        runner.parse(log, 10)
    cut = "\n".join(line for line in log.splitlines() if "sys[3] finished" not in line)
    with pytest.raises(runner.AstraFailure, match=r"ranks 3\)"):
        runner.parse(cut, 8)


def test_times_rows_of_a_run(tmp_path):
    run = runner.AstraRun(ranks=(runner.RankTime(0, 1500, 700), runner.RankTime(1, 2001, 999)), build="b",
                          folder=tmp_path, wall_s=0.1)
    assert command.times_csv(run).splitlines() == [
        "quantity,phase,collective,group,us", "total_us,,,,2.001", "exposed_us,,,,0.999", "compute_us,,,,1.002"]


# -- with a real ASTRA-sim ------------------------------------------------------------------------

ROOT = os.environ.get("ASTRA_SIM_ROOT")
needs_astra = pytest.mark.skipif(not ROOT, reason="no ASTRA-sim: set ASTRA_SIM_ROOT to a checkout with its analytical "
                                                   "backend built (build/astra_analytical/build.sh)")


def _write(folder: Path, nodes_by_rank, groups, net: Network, settings: inputs.Settings):
    from commsweep.workload import chakra

    chakra.write(folder / "traces", nodes_by_rank, groups)
    ranks = len(nodes_by_rank)
    (folder / "network.yml").write_text(inputs.network_yaml(net, ranks, settings))
    (folder / "system.json").write_text(inputs.system_json(settings, len(inputs.dimensions(net, ranks))))
    (folder / "memory.json").write_text(inputs.memory_json())


def _allreduce(ranks: int, size: int, pg: int | None = 1):
    from commsweep.workload.chakra_graph import Node

    node = Node(id=0, name="ar", kind="coll", deps=(), collective="allreduce", size=size, pg=pg)
    return [[node] for _ in range(ranks)], ({1: tuple(range(ranks))} if pg else {})


@needs_astra
@pytest.mark.parametrize("backend", ["astra-unaware", "astra-aware"])
def test_four_rank_all_reduce_by_hand(backend, tmp_path):
    """2(n-1)/n x S / B plus per-message latencies and the local reductions, on FullyConnected."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    size, bw, lat = 64 * 2**20, 100.0, 500.0
    net = Network(gpus_per_server=4, nics_per_server=1, nvlink_gbps=str(bw), nic_gbps="1")
    settings = inputs.Settings(latency_ns=(lat, lat), topology=("FullyConnected", "FullyConnected"),
                               system={"local-mem-bw": 10**9, "preferred-dataset-splits": 1})
    _write(tmp_path, *_allreduce(4, size), net, settings)
    result = runner.run(runner.binary(ROOT, backend), tmp_path, 4, trace_prefix="traces/trace",
                        groups="traces/comm_groups.json")
    # A ring all-reduce: 2(n-1) steps of S/n bytes, each one message latency; GB/s is 2^30 B/s.
    # Beyond that only the endpoint delays (10 ns per message) and the (fast) local reductions.
    by_hand = 2 * 3 / 4 * size / (bw * 2**30) * 1e9 + 2 * 3 * lat
    for r in result.ranks:
        assert by_hand <= r.finished_ns <= by_hand + 100, (r, by_hand)
        assert r.exposed_ns == r.finished_ns


@needs_astra
def test_workload_by_hand_equals_commsweep(tmp_path):
    """commsweep simulate --backend astra-unaware gives the times of running the kept command by hand."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    wl = reference_path("aicb", "workloads", "gpt7b_ws16_tp4_pp1_seq2048_mbs1_ga1_sp1_aiob.txt")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "commsweep", "simulate", "-w", str(wl), "-g", "16", "-r", "p-", "-g_p_s", "8",
           "-n_p_s", "8", "-nv", "360", "-nic", "25", "--backend", "astra-unaware", "--astra-root", ROOT,
           "--out-dir", str(out), "--times", str(out / "times.csv")]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    folder = out / "p-astra"
    by_hand = subprocess.run((folder / "command.txt").read_text().strip(), shell=True, cwd=folder,
                             capture_output=True, text=True)
    assert by_hand.returncode == 0
    hand = runner.parse(by_hand.stdout, 16)
    record = (out / "p-astra.csv").read_text().splitlines()[1:]
    assert [(int(line.split(",")[1]), int(line.split(",")[2])) for line in record] == \
        [(r.finished_ns, r.exposed_ns) for r in hand]
    assert f"total_us,,,,{max(r.finished_ns for r in hand) / 1000:.3f}" in (out / "times.csv").read_text()


def _run_bad(tmp_path, nodes_by_rank, groups, *, groups_file=True):
    net = Network(gpus_per_server=len(nodes_by_rank), nics_per_server=1, nvlink_gbps="100", nic_gbps="1")
    _write(tmp_path, nodes_by_rank, groups, net, inputs.Settings())
    return runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path, len(nodes_by_rank), trace_prefix="traces/trace",
                      groups="traces/comm_groups.json" if groups_file else None, timeout=120)


@needs_astra
def test_failures_of_the_reference_table_are_named(tmp_path):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from commsweep.workload.chakra_graph import Node

    nodes, _ = _allreduce(4, 2**20, pg=3)
    with pytest.raises(runner.AstraFailure, match="exited with status 1.*communicator group 3 not found"):
        _run_bad(tmp_path / "a", nodes, {1: (0, 1, 2, 3)})
    nodes, groups = _allreduce(4, 2**20)
    partial = [nodes[0], nodes[1], nodes[2], [Node(id=0, name="c", kind="comp", deps=(), duration_us=5)]]
    with pytest.raises(runner.AstraFailure, match=r"3 of 4 ranks printed no 'finished' line|ranks 0, 1, 2"):
        _run_bad(tmp_path / "b", partial, groups)
    recv = [[Node(id=0, name="r", kind="recv", deps=(), size=1024, peer=1, tag=7)],
            [Node(id=0, name="c", kind="comp", deps=(), duration_us=1)]]
    with pytest.raises(runner.AstraFailure, match=r"ranks 0\)"):
        _run_bad(tmp_path / "c", recv, {})
    _write(tmp_path / "d", nodes, groups, Network(gpus_per_server=4, nics_per_server=1, nvlink_gbps="1", nic_gbps="1"),
           inputs.Settings())
    (tmp_path / "d" / "traces" / "trace.2.et").unlink()
    with pytest.raises(runner.AstraFailure, match="exited with status 1.*does not exist"):
        runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path / "d", 4, trace_prefix="traces/trace",
                   groups="traces/comm_groups.json")


def test_a_crash_and_a_silent_exit_are_failed_runs(tmp_path):
    """commsweep's judging of what a binary did (a script standing in for ASTRA-sim's two ways to fail)."""
    exe = tmp_path / "fake"
    exe.write_text("#!/bin/sh\necho '[critical] workload file: x.0.et does not exist' >&2\nexit 1\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(runner.AstraFailure, match=r"status 1: \[critical\] workload file"):
        runner.run(exe, tmp_path, 2, trace_prefix="t", groups=None)
    assert (tmp_path / "command.txt").read_text().startswith(str(exe))
    exe.write_text("#!/bin/sh\necho 'sys[0] finished, 10 cycles, exposed communication 5 cycles.'\nexit 0\n")
    with pytest.raises(runner.AstraFailure, match=r"1 of 2 ranks.*\(ranks 1\)"):
        runner.run(exe, tmp_path, 2, trace_prefix="t", groups=None)


def test_simulate_names_what_the_astra_backend_lacks(tmp_path):
    wl = str(reference_path("aicb", "workloads", "gpt7b_ws16_tp4_pp1_seq2048_mbs1_ga1_sp1_aiob.txt"))
    base = [sys.executable, "-m", "commsweep", "simulate", "-w", wl, "-g", "16", "-r", "p-", "--backend",
            "astra-unaware", "--out-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "ASTRA_SIM_ROOT"}
    no_net = subprocess.run(base + ["--astra-root", str(tmp_path)], capture_output=True, text=True, env=env)
    assert no_net.returncode == 2 and "need the network flags; missing -g_p_s" in no_net.stderr
    net = ["-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "25"]
    no_root = subprocess.run(base + net, capture_output=True, text=True, env=env)
    assert no_root.returncode == 2 and "--astra-root or $ASTRA_SIM_ROOT" in no_root.stderr
    empty = subprocess.run(base + net + ["--astra-root", str(tmp_path)], capture_output=True, text=True, env=env)
    assert empty.returncode == 2 and "no AstraSim_Analytical_Congestion_Unaware" in empty.stderr


def _raw_set(folder: Path, messages_by_rank, groups: dict | None, *, metadata: bool = True) -> None:
    """A trace set written message by message with mlc-chakra (what commsweep's writer never makes)."""
    from chakra.src.third_party.utils import protolib

    from commsweep.workload.chakra_graph import Node

    pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    ranks = len(messages_by_rank)
    net = Network(gpus_per_server=ranks, nics_per_server=1, nvlink_gbps="100", nic_gbps="1")
    _write(folder, [[Node(id=0, name="c", kind="comp", deps=(), duration_us=1)]] * ranks, {}, net, inputs.Settings())
    for rank, messages in enumerate(messages_by_rank):
        with open(folder / "traces" / f"trace.{rank}.et", "wb") as fh:
            if metadata:
                protolib.encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
            for m in messages:
                protolib.encodeMessage(fh, m)
    if groups is not None:
        (folder / "traces" / "comm_groups.json").write_text(json.dumps(groups))


def _coll(comm_type: int, size: int, **pg):
    pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    m = pb.Node(id=1, name="x", type=pb.COMM_COLL_NODE)
    m.attr.append(pb.AttributeProto(name="comm_type", int64_val=comm_type))
    m.attr.append(pb.AttributeProto(name="comm_size", int64_val=size))
    for kind, value in pg.items():
        m.attr.append(pb.AttributeProto(name="pg_name", **{kind: value}))
    return m


@needs_astra
@pytest.mark.parametrize("case,want", [
    ("non-numeric pg_name", r"status 134.*stoi"),
    ("pg_name as an integer", r"bad_cast|4 of 4 ranks printed no 'finished' line"),
    ("no group file", r"exited with status 1.*communicator group 1 not found"),
    ("zero-byte all-gather", r"4 of 4 ranks printed no 'finished' line"),
    ("barrier", r"status 134.*Unsupported collective comm type"),
    ("no nodes", r"status 134"),
    ("no metadata", r"status 134"),
])
def test_more_failures_of_the_reference_table_are_named(case, want, tmp_path):
    pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    groups = {"1": [0, 1, 2, 3]}
    one = {
        "non-numeric pg_name": (_coll(pb.ALL_REDUCE, 2**20, string_val="tp"), groups),
        "pg_name as an integer": (_coll(pb.ALL_REDUCE, 2**20, int64_val=1), groups),
        "no group file": (_coll(pb.ALL_REDUCE, 2**20, string_val="1"), None),
        "zero-byte all-gather": (_coll(pb.ALL_GATHER, 0, string_val="1"), groups),
        "barrier": (_coll(pb.BARRIER, 2**20, string_val="1"), groups),
    }
    if case in one:
        message, g = one[case]
        _raw_set(tmp_path, [[message]] * 4, g)
    elif case == "no nodes":
        _raw_set(tmp_path, [[]] * 4, groups)
    else:
        _raw_set(tmp_path, [[_coll(pb.ALL_REDUCE, 2**20, string_val="1")]] * 4, groups, metadata=False)
    with pytest.raises(runner.AstraFailure, match=want):
        runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path, 4, trace_prefix="traces/trace",
                   groups="traces/comm_groups.json" if (tmp_path / "traces" / "comm_groups.json").exists() else None,
                   timeout=120)


@needs_astra
def test_megatron_pipeline_traces_run_to_the_end(tmp_path):
    """Every stage's schedule with its sends and receives, interleaved: every rank finishes."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from commsweep.setup.models import PRESETS
    from commsweep.setup.training import TrainingSetup
    from commsweep.workload import chakra_graph, megatron

    setup = TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=16, tp=2, pp=2, ep=2, sp=True, global_batch=8,
                          seq_length=256, virtual_pipeline=2)
    assert setup.problems() == []
    schedules = [megatron.schedule(setup, stage=s) for s in range(setup.pp)]
    nodes, groups = chakra_graph.megatron_traces(schedules, skip_empty=True)
    assert any(n.kind == "send" for n in nodes[0])
    net = Network(gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="25")
    _write(tmp_path, nodes, groups, net, inputs.Settings())
    result = runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path, 16, trace_prefix="traces/trace",
                        groups="traces/comm_groups.json", timeout=300)
    assert len(result.ranks) == 16 and result.total_ns > 0


@needs_astra
def test_a_crash_after_every_rank_finished_is_still_a_failure(tmp_path):
    """On one server (a one-dimension network) with several groups, this ASTRA-sim frees a
    collective plan twice at exit, after every rank printed its time: no time comes out of it."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from commsweep.workload.chakra_graph import Node

    groups = {1: (0, 1), 2: (2, 3), 3: (0, 2), 4: (1, 3)}
    tp = lambda r: 1 if r < 2 else 2  # noqa: E731
    dp = lambda r: 3 if r % 2 == 0 else 4  # noqa: E731
    nodes = [[Node(id=i, name=f"n{i}", kind="coll", deps=(i - 1,) if i else (), collective="allgather", size=2**20,
                   pg=(tp if i % 2 == 0 else dp)(r), group_size=2) for i in range(40)] for r in range(4)]
    net = Network(gpus_per_server=4, nics_per_server=4, nvlink_gbps="100", nic_gbps="10")
    _write(tmp_path, nodes, groups, net, inputs.Settings())
    try:
        result = runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path, 4, trace_prefix="traces/trace",
                            groups="traces/comm_groups.json", timeout=120)
    except runner.AstraFailure as failure:
        assert "after all 4 ranks printed their 'finished' line" in str(failure)
        assert "signal" in str(failure)
    else:  # a build without the double free: every rank's time
        assert len(result.ranks) == 4


@needs_astra
def test_an_all_gather_of_simai_size_moves_what_a_reduce_scatter_does(tmp_path):
    """SimAI's all-gather size is the gathered tensor; ASTRA-sim's comm_size is each rank's part.
    Written as commsweep writes it, an all-gather of S bytes takes a reduce-scatter of S's time."""
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    from commsweep.workload.chakra_graph import Node

    net = Network(gpus_per_server=4, nics_per_server=1, nvlink_gbps="100", nic_gbps="1")
    settings = inputs.Settings(topology=("FullyConnected", "FullyConnected"), latency_ns=(10, 10),
                               system={"local-mem-bw": 10**9})  # reductions at no cost
    times = {}
    for coll in ("allgather", "reducescatter"):
        node = Node(id=0, name=coll, kind="coll", deps=(), collective=coll, size=64 * 2**20, pg=1, group_size=4)
        _write(tmp_path / coll, [[node]] * 4, {1: (0, 1, 2, 3)}, net, settings)
        result = runner.run(runner.binary(ROOT, "astra-unaware"), tmp_path / coll, 4, trace_prefix="traces/trace",
                            groups="traces/comm_groups.json")
        times[coll] = result.total_ns
    by_hand = 3 / 4 * 64 * 2**20 / (100 * 2**30) * 1e9
    assert by_hand <= times["allgather"] <= by_hand * 1.02 + 1000, times
    assert by_hand <= times["reducescatter"] <= by_hand * 1.02 + 1000, times


# -- a sweep in two simulators ----------------------------------------------------------------------


def _small_sweep(tmp_path: Path, *, schedules=("aicb", "megatron")) -> Path:
    """A finished sweep's results as astra-compare reads them: sweep.csv, each point's workload
    (commsweep generate) and its times (commsweep simulate, the built-in engine)."""
    from commsweep.base.paths import times_file, workload_file
    from commsweep.orchestration import sweep
    from commsweep.setup.arguments import to_commsweep_argv

    config = sweep.load_config(Path(__file__).resolve().parents[1] / "config" / "config.yaml")
    config["sweep"].update(model=["gpt-7b"], world_size=[16], tp=[2], pp=[1], sp=[True], aiob=[False],
                           schedule=list(schedules), network=[config["sweep"]["network"][0]])
    points, invalid = sweep.points_from_config(config)
    results = tmp_path / "results"
    results.mkdir()
    (results / "sweep.csv").write_text(sweep.table_csv(points, invalid))
    for p in points:
        wl = workload_file(results, p.workload_key)
        wl.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "commsweep", "generate", *to_commsweep_argv(p.setup), "--schedule",
                        p.schedule, "-o", str(wl)], check=True, capture_output=True)
        out = times_file(results, p.point_key)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "commsweep", "simulate", "-w", str(wl), "-g", str(p.world_size), "-r",
                        "x-", *p.net.server_flags(), "--out-dir", str(tmp_path / "simai"), "--times", str(out)],
                       check=True, capture_output=True)
    return results


def test_pairs_set_each_aicb_point_beside_its_megatron_twin(tmp_path):
    from commsweep.analysis import astra_compare
    from commsweep.setup.points import read_points

    results = _small_sweep(tmp_path)
    rows = read_points(results / "sweep.csv")
    assert sorted(r.schedule for r in rows) == ["aicb", "megatron"]
    run = lambda ns: runner.AstraRun(ranks=(runner.RankTime(0, ns, 1),), build="b", folder=tmp_path, wall_s=0)  # noqa
    compared = [astra_compare.Compared(r, *astra_compare._simai(results, r.point),
                                       run(5_000_000 if r.schedule == "aicb" else 3_000_250)) for r in rows]
    (point, twin, simai, astra), = astra_compare.pairs(compared)
    aicb, megatron = sorted(compared, key=lambda c: c.row.schedule)
    assert (point, twin) == (aicb.row.point, megatron.row.point)
    assert simai == aicb.simai_total_ns - megatron.simai_total_ns and astra == 1_999_750
    assert astra_compare.pairs_csv(compared).splitlines()[1].endswith(",1999.750")
    failed = [compared[0], astra_compare.Compared(compared[1].row, None, None, None, "why")]
    assert astra_compare.pairs(failed)[0][2:] == (None, None)
    assert ",failed,why," in astra_compare.to_csv(failed)


@needs_astra
def test_astra_compare_of_a_sweep_equals_its_runs_by_hand(tmp_path):
    pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    results = _small_sweep(tmp_path)
    out = tmp_path / "cmp"
    run = subprocess.run([sys.executable, "-m", "commsweep", "astra-compare", "--results", str(results), "-o", str(out),
                          "--astra-root", ROOT], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = (out / "astra_vs_simai.csv").read_text().splitlines()
    assert len(lines) == 3 and all(",ok,," in line for line in lines[1:])
    for line in lines[1:]:
        point, total = line.split(",")[0], line.split(",")[4]
        folder = out / "runs" / point
        by_hand = subprocess.run((folder / "command.txt").read_text().strip(), shell=True, cwd=folder,
                                 capture_output=True, text=True)
        hand = runner.parse(by_hand.stdout, 16)
        assert total == f"{max(r.finished_ns for r in hand) / 1000:.3f}"
    assert len((out / "astra_difference.csv").read_text().splitlines()) == 2
