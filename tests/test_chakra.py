"""Chakra execution traces: every workload's traces, read back with mlc-chakra's own decoder,
hold per rank the collectives, bytes and groups `commsweep volumes` counts for the workload."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from commsweep.analysis import chakra_volumes, volumes
from commsweep.base.errors import InputError
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import chakra, chakra_graph, megatron
from commsweep.workload import format as wf

from conftest import reference_files, reference_path

et_def_pb2 = pytest.importorskip("chakra.schema.protobuf.et_def_pb2",
                                 reason="mlc-chakra is not installed (pip install --no-deps mlc-chakra==1.0.0 protobuf)")
protolib = pytest.importorskip("chakra.src.third_party.utils.protolib")

AICB = reference_files("aicb/workloads", "*.txt")


def aicb(name: str = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob.txt") -> str:
    return str(reference_path("aicb", "workloads", name))

COLLECTIVES = {et_def_pb2.ALL_REDUCE: "allreduce", et_def_pb2.ALL_GATHER: "allgather",
               et_def_pb2.REDUCE_SCATTER: "reducescatter", et_def_pb2.ALL_TO_ALL: "alltoall"}


def decode(path: Path) -> list:
    """A rank's file with mlc-chakra's decoder alone: its metadata, then its node messages."""
    out = []
    with open(path, "rb") as fh:
        meta = et_def_pb2.GlobalMetadata()
        assert protolib.decodeMessage(fh, meta)
        while True:
            node = et_def_pb2.Node()
            if not protolib.decodeMessage(fh, node):
                return out
            out.append(node)


def attrs(node) -> dict:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def whole_size(a: dict, members: int) -> int:
    """A collective's bytes as SimAI counts them: an all-gather's comm_size is each rank's input
    (ASTRA-sim sends members x comm_size), unless commsweep kept a size that does not divide."""
    if COLLECTIVES[a["comm_type"]] == "allgather":
        return a.get("commsweep_size", a["comm_size"] * members)
    return a["comm_size"]


def megatron_groups(rank: int, tp: int, dp: int, ep: int) -> dict[str, set[int]]:
    """Megatron's groups of a rank, restated: TP consecutive, DP at stride tp, EP the ep
    neighbours in DP, DP_EP stride tp*ep."""
    t, d, s = rank % tp, (rank // tp) % dp, rank // (tp * dp)
    at = lambda tt, dd: tt + tp * (dd + dp * s)  # noqa: E731
    return {"TP": {at(i, d) for i in range(tp)}, "DP": {at(t, i) for i in range(dp)},
            "EP": {at(t, d - d % ep + i) for i in range(ep)}, "DP_EP": {at(t, d % ep + ep * i) for i in range(dp // ep)}}


def check_export(workload: wf.Workload, tmp: Path) -> None:
    """Export, decode every rank with mlc-chakra, and compare with the workload's volumes."""
    nodes, groups = chakra_graph.traces(workload)
    chakra.write(tmp, nodes, groups)
    group_file = {int(k): set(v) for k, v in json.loads((tmp / chakra.GROUPS_FILE).read_text()).items()}
    h = workload.header
    dp = h.all_gpus // (h.tp * h.pp)
    expected = {(v.phase, v.collective, v.group, v.group_size): (v.count, v.payload_bytes)
                for v in volumes.tally(workload) if v.phase != "pp"}
    for rank in range(h.all_gpus):
        got: dict = defaultdict(lambda: [0, 0])
        mine = megatron_groups(rank, h.tp, dp, h.ep)
        for node in decode(tmp / f"trace.{rank}.et"):
            if node.type != et_def_pb2.COMM_COLL_NODE:
                continue
            a = attrs(node)
            members = group_file[int(a["pg_name"])]
            assert members == mine[a["commsweep_group"]], (rank, node.name)
            key = (a["commsweep_phase"], COLLECTIVES[a["comm_type"]], a["commsweep_group"], len(members))
            got[key][0] += 1
            got[key][1] += whole_size(a, len(members))
        assert {k: tuple(v) for k, v in got.items()} == expected, rank


@pytest.mark.parametrize("path", AICB, ids=lambda p: Path(p).name)
def test_aicb_reference_workloads_export_with_their_volumes(path, tmp_path):
    check_export(wf.read(path), tmp_path)


MOE_PP = TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=32, tp=2, pp=2, ep=4, sp=True, global_batch=16,
                       micro_batch=1, seq_length=512)
DENSE_PP = TrainingSetup(model=PRESETS["gpt-7b"], world_size=16, tp=2, pp=2, sp=False, global_batch=8,
                         seq_length=512, distributed_optimizer=True)


@pytest.mark.parametrize("setup", [MOE_PP, DENSE_PP], ids=["moe-pp", "dense-pp-distopt"])
def test_megatron_schedule_workloads_export_with_their_volumes(setup, tmp_path):
    assert setup.problems() == []
    check_export(megatron.schedule(setup).workload(), tmp_path)


def test_nodes_follow_simai_order_and_times(tmp_path):
    """Forward rows in order, then each row's input and weight gradient in reverse; one chain;
    compute in whole microseconds that sum to the workload's nanoseconds, rounded."""
    w = wf.read(aicb())
    nodes, _ = chakra_graph.traces(w)
    rank0 = nodes[0]
    for prev, node in zip(rank0, rank0[1:]):
        assert node.deps == (prev.id,)
    rows = [(n.row, n.phase) for n in rank0]
    forward = [r for r, p in rows if p == "fwd"]
    assert forward == sorted(forward)
    backward = [r for r, p in rows if p != "fwd"]
    assert backward == sorted(backward, reverse=True)
    assert rows.index(next(x for x in rows if x[1] != "fwd")) == len(forward)
    total_ns = sum(r.compute(p) for r in w.rows for p in wf.PHASES)
    assert sum(n.duration_us for n in rank0) == (total_ns + 500) // 1000
    assert all(n.duration_us > 0 for n in rank0 if n.kind == "comp")


def test_overlap_takes_data_parallel_collectives_off_the_chain():
    w = wf.read(aicb())
    nodes = chakra_graph.traces(w, overlap=("DP",))[0][0]
    dp = {n.id for n in nodes if n.group == "DP"}
    assert dp
    assert not any(set(n.deps) & dp for n in nodes if n.group != "DP")
    dp_nodes = [n for n in nodes if n.id in dp]
    for prev, node in zip(dp_nodes, dp_nodes[1:]):
        assert prev.id in node.deps


def test_none_is_nothing_and_groups_file_lists_only_used_groups():
    w = wf.read(aicb())
    nodes, groups = chakra_graph.traces(w)
    names = Counter(n.name.split(".")[-1] for n in nodes[0] if n.kind == "coll")
    assert "NONE" not in names
    used = {n.pg for rank in nodes for n in rank if n.kind == "coll"}
    assert set(groups) == used


def test_trace_set_volumes_equal_the_workloads(tmp_path):
    w = wf.read(aicb("gpt7b_ws16_tp8_pp1_seq2048_mbs1_ga1_sp0_default.txt"))
    chakra.write(tmp_path, *chakra_graph.traces(w))
    nodes, groups = chakra.read(tmp_path)
    got = chakra_volumes.trace_set_volumes(nodes, groups, rank=3)
    assert got.unknown == ()
    assert got.volumes == [v for v in volumes.tally(w) if v.phase != "pp"]


def test_foreign_trace_says_what_it_cannot_tell(tmp_path):
    """A trace without commsweep's attributes: groups by number, phase unknown, said so."""
    w = wf.read(aicb())
    nodes, groups = chakra_graph.traces(w)
    bare = [[n.__class__(**{**n.__dict__, "phase": None, "group": None, "row": None}) for n in rank] for rank in nodes]
    chakra.write(tmp_path, bare, groups)
    got = chakra_volumes.trace_set_volumes(*chakra.read(tmp_path))
    assert {v.phase for v in got.volumes} == {chakra_volumes.UNKNOWN_PHASE}
    assert all(v.group.startswith("pg") for v in got.volumes)
    assert len(got.unknown) == 3
    ours = volumes.tally(w)
    assert sum(v.payload_bytes for v in got.volumes) == sum(v.payload_bytes for v in ours if v.phase != "pp")


def test_bad_trace_sets_are_named(tmp_path):
    w = wf.read(aicb())
    chakra.write(tmp_path, *chakra_graph.traces(w))
    (tmp_path / "trace.5.et").unlink()
    with pytest.raises(InputError, match=r"rank 5's file trace.5.et is missing"):
        chakra.read(tmp_path)
    node = et_def_pb2.Node(id=0, name="x", type=et_def_pb2.COMM_COLL_NODE)
    node.attr.append(et_def_pb2.AttributeProto(name="comm_type", int64_val=et_def_pb2.ALL_REDUCE))
    node.attr.append(et_def_pb2.AttributeProto(name="pg_name", int64_val=1))
    bad = tmp_path / "bad"
    bad.mkdir()
    with open(bad / "t.0.et", "wb") as fh:
        protolib.encodeMessage(fh, et_def_pb2.GlobalMetadata(version="0.0.4"))
        protolib.encodeMessage(fh, node)
    with pytest.raises(InputError, match="pg_name must be a decimal string"):
        chakra.read(bad)
    node.attr[0].int64_val = et_def_pb2.BARRIER
    with open(bad / "t.0.et", "wb") as fh:
        protolib.encodeMessage(fh, et_def_pb2.GlobalMetadata(version="0.0.4"))
        protolib.encodeMessage(fh, node)
    with pytest.raises(InputError, match="BARRIER is not one"):
        chakra.read(bad)


def test_chakra_command(tmp_path):
    out = tmp_path / "et"
    run = subprocess.run([sys.executable, "-m", "commsweep", "chakra", "-w", aicb(), "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert len(list(out.glob("trace.*.et"))) == wf.read(aicb()).header.all_gpus
    bad = subprocess.run([sys.executable, "-m", "commsweep", "chakra", "-w", aicb(), "-o", str(out), "-g", "7"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "field 'all_gpus'" in bad.stderr and "7 ranks" in bad.stderr


@pytest.mark.parametrize("setup", [MOE_PP, DENSE_PP], ids=["moe-pp", "dense-pp-distopt"])
def test_audit_of_traces_equals_audit_of_their_workload(setup, tmp_path):
    from commsweep.analysis import audit

    w = megatron.schedule(setup).workload()
    chakra.write(tmp_path, *chakra_graph.traces(w), workload=w)
    told = chakra.as_workload(tmp_path)
    assert told.header == w.header
    assert [(r.name, r.fwd_comm, r.fwd_size, r.ig_comm, r.ig_size, r.wg_comm, r.wg_size) for r in told.rows] == \
        [(r.name, r.fwd_comm, r.fwd_size, r.ig_comm, r.ig_size, r.wg_comm, r.wg_size) for r in w.rows]
    assert audit.audit(told, setup) == audit.audit(w, setup)


def test_volumes_and_audit_commands_read_a_trace_folder(tmp_path):
    out = tmp_path / "et"
    subprocess.run([sys.executable, "-m", "commsweep", "chakra", "-w", aicb(), "-o", str(out)], check=True)
    from_traces = subprocess.run([sys.executable, "-m", "commsweep", "volumes", str(out), "--format", "csv"],
                                 capture_output=True, text=True)
    assert from_traces.returncode == 0, from_traces.stderr
    from_file = subprocess.run([sys.executable, "-m", "commsweep", "volumes", aicb(), "--format", "csv"],
                               capture_output=True, text=True, check=True)
    assert from_traces.stdout == from_file.stdout
    assert from_traces.stderr == ""


def test_audit_of_a_foreign_trace_set_says_what_it_lacks(tmp_path):
    w = wf.read(aicb())
    chakra.write(tmp_path, *chakra_graph.traces(w))
    with pytest.raises(InputError, match="do not say the workload's header and rows"):
        chakra.as_workload(tmp_path)


INTERLEAVED = TrainingSetup(model=PRESETS["gpt-7b"], world_size=8, tp=2, pp=2, sp=True, global_batch=4,
                            seq_length=256, virtual_pipeline=2)


def pipeline_schedules(setup):
    return [megatron.schedule(setup, stage=s) for s in range(setup.pp)]


@pytest.mark.parametrize("setup", [MOE_PP, DENSE_PP, INTERLEAVED], ids=["moe-pp", "dense-pp", "interleaved"])
def test_megatron_pipeline_traces(setup, tmp_path):
    """Each stage's ranks hold their stage's collectives, and every send has one receive with
    its source, tag and size at the other end: per micro-batch and model chunk, both ways."""
    assert setup.problems() == []
    schedules = pipeline_schedules(setup)
    chakra.write(tmp_path, *chakra_graph.megatron_traces(schedules))
    group_file = {int(k): v for k, v in json.loads((tmp_path / chakra.GROUPS_FILE).read_text()).items()}
    sends, recvs = Counter(), Counter()
    for rank in range(setup.world_size):
        stage = rank // (setup.tp * setup.dp)
        got: dict = defaultdict(lambda: [0, 0])
        for node in decode(tmp_path / f"trace.{rank}.et"):
            a = attrs(node)
            if node.type == et_def_pb2.COMM_SEND_NODE:
                assert a["comm_src"] == rank
                sends[(rank, a["comm_dst"], a["comm_tag"], a["comm_size"])] += 1
            elif node.type == et_def_pb2.COMM_RECV_NODE:
                assert a["comm_dst"] == rank
                recvs[(a["comm_src"], rank, a["comm_tag"], a["comm_size"])] += 1
            elif node.type == et_def_pb2.COMM_COLL_NODE:
                key = (a["commsweep_phase"], COLLECTIVES[a["comm_type"]], a["commsweep_group"])
                got[key][0] += 1
                got[key][1] += whole_size(a, len(group_file[int(a["pg_name"])]))
        expected = {(v.phase, v.collective, v.group): (v.count, v.payload_bytes)
                    for v in volumes.tally(schedules[stage].workload()) if v.phase != "pp"}
        assert {k: tuple(v) for k, v in got.items()} == expected, rank
    assert sends == recvs and set(sends.values()) == {1}
    # Each stage's ranks: one send per micro-batch and chunk boundary and direction.
    boundaries = setup.pp * setup.virtual_pipeline - 1
    assert len(sends) == 2 * boundaries * setup.num_microbatches * setup.tp * setup.dp
    assert {k[3] for k in sends} == {megatron.pipeline_bytes(setup)}


def test_chakra_command_megatron_pipeline(tmp_path):
    out = tmp_path / "mg"
    args = ["--megatron", "--model", "gpt-7b", "--world_size", "8", "--tensor_model_parallel_size", "2",
            "--pipeline_model_parallel", "2", "--virtual-pipeline", "2", "--global_batch", "4", "--seq_length", "256",
            "--enable_sequence_parallel"]
    run = subprocess.run([sys.executable, "-m", "commsweep", "chakra", *args, "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    nodes, _ = chakra.read(out)
    mine, _ = chakra_graph.megatron_traces(pipeline_schedules(INTERLEAVED))
    assert nodes == mine
    both = subprocess.run([sys.executable, "-m", "commsweep", "chakra", *args, "-w", aicb(), "-o", str(out)],
                          capture_output=True, text=True)
    assert both.returncode == 2 and "not both" in both.stderr


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@functools.cache
def _real_trace_bytes() -> bytes:
    """Rank 0's first 20 nodes of a reference workload, as a trace file's bytes."""
    nodes = chakra_graph.rank_nodes(wf.read(aicb()), 0, chakra_graph.layout_for(wf.read(aicb())))
    with tempfile.TemporaryDirectory() as tmp:
        chakra.write(tmp, [nodes[:20]], {})
        return (Path(tmp) / "trace.0.et").read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), cut=st.integers(min_value=0, max_value=400))
def test_reader_names_any_broken_file(data, cut, tmp_path):
    """Random bytes, or a real trace cut short or with bytes appended: a trace or an InputError
    naming the file, never another exception."""
    good = tmp_path / "good.0.et"
    real = _real_trace_bytes()
    for blob in (data, real[:cut], real + data):
        good.write_bytes(blob)
        try:
            chakra.read_trace(good)
        except InputError as err:
            assert str(good) in str(err)


SHIPPED = sorted((Path(__file__).resolve().parents[1] / "config").glob("*.yaml"))


def shipped_workloads(path: Path) -> list:
    """One workload per schedule of a shipped sweep, without AIOB (the AIOB path's rows are
    the default path's with other times): its point with the widest TP, then EP."""
    from commsweep.orchestration import sweep as sweep_mod
    from commsweep.workload.generate import build

    config = sweep_mod.load_config(str(path))
    points, _ = sweep_mod.points_from_config(config)
    chosen = {}
    for p in points:
        if p.aiob:
            continue
        best = chosen.get(p.schedule)
        if best is None or (p.setup.tp, p.setup.ep) > (best.setup.tp, best.setup.ep):
            chosen[p.schedule] = p
    return [build(p.setup, p.schedule) for p in chosen.values()]


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_sweeps_workloads_export_with_their_volumes(path, tmp_path, monkeypatch):
    """Every shipped sweep's workloads, as the sweep generates them, export to traces whose
    per-rank collectives, bytes and groups are the workload's volumes (the widest point of each
    schedule here; every workload of the three answer sweeps was checked the same way by hand)."""
    # The simulators a sweep names are checked when it is read, never run here: stand-ins.
    for variable, binary in (("ASTRA_SIM_ROOT", "astra"), ("SIMAI_ROOT", "simai/bin/SimAI_simulator")):
        stand_in = tmp_path / binary
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\nexit 1\n")
        stand_in.chmod(0o755)
        monkeypatch.setenv(variable, str(stand_in if variable == "ASTRA_SIM_ROOT" else tmp_path / "simai"))
    for i, workload in enumerate(shipped_workloads(path)):
        check_export(workload, tmp_path / str(i))
