"""The built-in engine against SimAI_analytical's own outputs, and its handling of SimAI's bugs."""

from __future__ import annotations

import csv
import dataclasses
import math

import pytest

import simai_runs
from commsweep.base.errors import InputError
from commsweep.setup.network import Network
from commsweep.simulate import endtoend
from commsweep.simulate.engine import Ratios, SimaiBugError, comm_time_ns, load_ratios, parse_comm_type, simulate
from commsweep.workload import format as wf

CLEAN = simai_runs.params("clean")
NOTED = simai_runs.params("noted")
ALL = simai_runs.params("all")


@pytest.fixture(scope="module")
def ratios():
    if not simai_runs.RATIO_DIR.exists():
        pytest.skip(f"SimAI's ratio tables not found at {simai_runs.RATIO_DIR}")
    return load_ratios(simai_runs.RATIO_DIR)


def run_engine(run, ratios, mode):
    return simulate(wf.read(run.workload), run.network(), ratios, prefix=run.prefix, simai_bugs=mode)


def reference_collectives(run) -> list[dict]:
    with open(run.collectives, newline="") as fh:
        return list(csv.DictReader(fh))


# -- parity -------------------------------------------------------------------------------


@pytest.mark.parametrize("run", CLEAN)
@pytest.mark.parametrize("mode", ["fix", "reproduce"])
def test_clean_runs_are_byte_identical(run, mode, ratios):
    sim = run_engine(run, ratios, mode)
    assert sim.endtoend == run.endtoend.read_text()
    assert sim.bugs == [] and sim.warnings() == []


@pytest.mark.parametrize("run", NOTED)
def test_reproduce_gives_simai_output_on_its_bug_cases(run, ratios):
    sim = run_engine(run, ratios, "reproduce")
    assert sim.endtoend == run.endtoend.read_text()
    assert sim.bugs and all("reproduced as SimAI prints it" in w for w in sim.warnings())


@pytest.mark.parametrize("run", NOTED)
def test_fix_changes_exactly_the_rows_simai_gets_wrong(run, ratios):
    """The rows fixed are those where SimAI's own stdout shows a failed bandwidth step."""
    sim = run_engine(run, ratios, "fix")
    bad = {(int(c["layer_index"]), c["phase"]) for c in reference_collectives(run)
           if c["busbw_retcode"] == "1" or float(c["theoretical_busbw_GBps"]) < 0}
    assert {(hit.row, hit.phase) for hit in sim.bugs} == bad
    warning = "\n".join(sim.warnings())
    for row, phase in bad:
        assert f"row {row} (" in warning and f" {phase})" in warning
    mine = endtoend.parse(sim.endtoend)
    theirs = endtoend.read(run.endtoend)
    bad_rows = {row for row, _ in bad}
    for index, (a, b) in enumerate(zip(mine.rows, theirs.rows)):
        if index not in bad_rows:
            assert a.text == b.text, f"row {index} changed though SimAI got it right"
    assert mine.complete and mine.total < 1e9  # SimAI: up to 1.2e18 us
    assert all(v < 1e9 for r in mine.rows for v in (r.fwd_comm, r.wg_comm, r.ig_comm))


def test_fix_on_one_gpu_groups_costs_nothing(ratios):
    run = next(r for r in simai_runs.load_runs() if "tp1" in r.name and "sp0_default" in r.name and r.notes)
    sim = run_engine(run, ratios, "fix")
    rows = endtoend.parse(sim.endtoend).rows
    assert sim.bugs
    for hit in sim.bugs:
        assert hit.kind == "one-gpu-group"
        fields = rows[hit.row].text
        i = endtoend.ROW_FIELDS.index(f"{hit.phase}_comm")
        assert fields[i:i + 3] == ("0", "inf", "0.00")


def test_fix_on_zero_nics_uses_the_fractional_share(ratios):
    """Net B (4 NICs, 8 GPUs per server) with TP 8: half a NIC per DP ring, 12.5 GB/s."""
    run = next(r for r in simai_runs.load_runs() if "tp8" in r.name and "sp0_aiob" in r.name and r.flags["-n_p_s"] == "4")
    sim = run_engine(run, ratios, "fix")
    rows = endtoend.parse(sim.endtoend).rows
    assert {hit.kind for hit in sim.bugs} == {"zero-nics"}
    sized = [hit for hit in sim.bugs if rows[hit.row].wg_comm > 0]
    assert len(sized) == 2
    for hit in sized:
        assert rows[hit.row].text[endtoend.ROW_FIELDS.index("wg_busbw")] == "12.50"


@pytest.mark.parametrize("run", NOTED)
def test_error_mode_names_the_rows(run, ratios):
    with pytest.raises(SimaiBugError, match=r"row \d+ \("):
        run_engine(run, ratios, "error")


@pytest.mark.parametrize("run", ALL)
def test_tidy_table_matches_simai_collective_lines(run, ratios):
    """Every collective SimAI times with its formula is in the tidy table with SimAI's group,
    group size and bytes; its time, rounded, is the EndToEnd.csv's."""
    sim = run_engine(run, ratios, "reproduce")
    tidy = {(c.row, c.phase): c for c in sim.collectives}
    for ref in reference_collectives(run):
        c = tidy[(int(ref["layer_index"]), ref["phase"])]
        assert (c.collective, c.group, c.group_size, c.bytes) == (
            ref["comm_type"], ref["group_name"], int(ref["group_size"]), int(ref["data_size_bytes"]))
    rows = endtoend.parse(sim.endtoend).rows
    for c in sim.collectives:
        printed = rows[c.row].text[endtoend.ROW_FIELDS.index(f"{c.phase}_comm")]
        assert f"{float(int(c.time_us.replace('.', ''))) / 1000:.0f}" == printed


# -- one collective (the audit's API) --------------------------------------------------------


@pytest.mark.parametrize("run", CLEAN)
def test_comm_time_of_every_reference_collective(run, ratios):
    workload = wf.read(run.workload)
    rows = endtoend.read(run.endtoend).rows
    network = run.network()
    for row, times in zip(workload.rows, rows):
        for phase in ("fwd", "ig", "wg"):
            comm_type, size = row.comm(phase)
            ns = comm_time_ns(comm_type, phase, size, workload.header, network, ratios)
            assert f"{float(ns) / 1000:.0f}" == times.text[endtoend.ROW_FIELDS.index(f"{phase}_comm")]


def header(**kw) -> wf.Header:
    values = dict(tp=8, ep=1, pp=1, vpp=1, ga=1, all_gpus=16)
    values.update(kw)
    return wf.Header(**values)


NET_A = Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="48.5")


def test_comm_time_small_messages_and_no_collective(ratios):
    h = header()
    assert comm_time_ns("NONE", "fwd", 1 << 30, h, NET_A, ratios) == 0
    assert comm_time_ns("BROADCAST", "fwd", 1 << 30, h, NET_A, ratios) == 0
    # Forward sizes of 1..4095 become 4096: a small message, 15 us on a group of 8.
    assert comm_time_ns("ALLREDUCE", "fwd", 1, h, NET_A, ratios) == 15000
    # Not in backward: 1 byte goes through the formula and rounds to 0 ns.
    assert comm_time_ns("ALLREDUCE", "ig", 1, h, NET_A, ratios) == 0
    # An unknown suffix has no group, but a small message still gets the fixed latency.
    assert comm_time_ns("ALLREDUCEALLTOALL", "ig", 8192, h, NET_A, ratios) == 15000
    assert comm_time_ns("ALLREDUCEALLTOALL", "ig", 1 << 30, h, NET_A, ratios) == 0
    assert parse_comm_type("ALLREDUCEALLTOALL", "fwd") == ("allreduce", "NONE")
    assert parse_comm_type("ALLGATHER_DP_EP", "wg") == ("allgather", "DP_EP")
    assert parse_comm_type("REDUCESCATTER", "wg") == ("reducescatter", "DP")


def test_comm_time_one_gpu_group_by_mode(ratios):
    h = header(tp=1)
    assert comm_time_ns("ALLREDUCE", "fwd", 1 << 30, h, NET_A, ratios) == 0
    assert comm_time_ns("ALLREDUCE", "fwd", 1 << 30, h, NET_A, ratios, simai_bugs="reproduce") == 1 << 63
    with pytest.raises(SimaiBugError, match="one GPU"):
        comm_time_ns("ALLREDUCE", "fwd", 1 << 30, h, NET_A, ratios, simai_bugs="error")


# -- the ratio-table bug, PP, checkpoints, overlap ---------------------------------------------


def workload(rows: list[str], **hdr) -> wf.Workload:
    h = header(**hdr)
    return wf.parse("\n".join([h.render(), str(len(rows)), *rows]) + "\n")


BIG = "34359738368"  # 32 GiB: beyond the ratio tables' last row (16 GiB)


def test_message_beyond_the_ratio_table(ratios):
    rows = ["a -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 100",
            "b -1 1000 ALLREDUCE 67108864 1000 NONE 0 1000 NONE 0 100",
            f"c -1 1000 ALLGATHER {BIG} 1000 NONE 0 1000 NONE 0 100",
            "d -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 100"]
    w = workload(rows)
    cut = simulate(w, NET_A, ratios, prefix="x-", simai_bugs="reproduce")
    assert cut.endtoend.startswith(endtoend.ROW_HEADER + "\n")
    assert cut.endtoend.count("\n") == 3 and cut.truncated_at == 2 and cut.components is None
    assert simulate(workload(rows[2:]), NET_A, ratios, simai_bugs="reproduce").endtoend == ""
    fixed = simulate(w, NET_A, ratios, prefix="x-")
    assert [(h.kind, h.row, h.phase) for h in fixed.bugs] == [("ratio-range", 2, "fwd")]
    # Clamped at the last row, the efficiency is 1: the time SimAI's formula gives without a table.
    expected = comm_time_ns("ALLGATHER", "fwd", int(BIG), w.header, NET_A, Ratios())
    assert [c.time_us for c in fixed.collectives if c.row == 2] == [f"{expected // 1000}.{expected % 1000:03d}"]
    with pytest.raises(SimaiBugError, match=r"ratio-range.*row 2 \(c fwd\)"):
        simulate(w, NET_A, ratios, simai_bugs="error")
    # 16 GiB + 1 reads as 16 GiB (SimAI's float32 scale factor): in range, no bug.
    assert simulate(workload(["c -1 1 ALLGATHER 17179869185 1 NONE 0 1 NONE 0 100"]), NET_A, ratios).bugs == []


def test_pipeline_bubble_and_pp_comm(ratios):
    rows = ["embedding_layer -1 5000000 NONE 0 0 NONE 0 7000000 NONE 0 100",
            "layer -1 1000000 NONE 0 2000000 NONE 0 3000000 NONE 0 100"]
    w = workload(rows, pp=3, vpp=1, ga=2, pp_comm=1 << 30)
    net = Network(gpus=48, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="48.5", pp_overlap="0.5")
    parsed = endtoend.parse(simulate(w, net, ratios, prefix="dir/pp-").endtoend)
    assert parsed.file_name == "pp-"
    # Bubble: rows other than embedding_layer, (1 + 3 + 2) ms * (pp - 1) / (ga * vpp) = 6 ms.
    assert parsed.components["bubble"] == 6000
    # PP (already in us): trunc(2 * vpp * ga * (1 GiB / 2^30) / 0.5 * 1e9 / 1000) * (1 - 0.5).
    assert parsed.components["exposed_pp"] == 4_000_000
    assert parsed.total == 5000 + 7000 + 1000 + 2000 + 3000 + 6000 + 4_000_000


def test_pp_overlap_zero(ratios):
    net = Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="48.5", pp_overlap="0")
    w = workload(["l -1 1000 NONE 0 1000 NONE 0 1000 NONE 0 100"], pp=2, pp_comm=0)
    reproduced = endtoend.parse(simulate(w, net, ratios, simai_bugs="reproduce").endtoend)
    assert reproduced.components["exposed_pp"] == 2**63  # 0/0 = NaN -> 2^63 (us)
    fixed = simulate(w, net, ratios)
    assert endtoend.parse(fixed.endtoend).components["exposed_pp"] == 0
    assert "pp-overlap-zero" in fixed.warnings()[0]


def test_checkpointed_layers_rerun_forward_compute(ratios):
    rows = [f"l{i} -1 {1000 * (i + 1)} ALLREDUCE 67108864 10 NONE 0 10 NONE 0 100" for i in range(5)]
    h = header(checkpoints=(1,), checkpoint_initiates=(3,))
    w = wf.parse("\n".join([h.render(), "5", *rows]) + "\n")
    plain = endtoend.parse(simulate(workload(rows), NET_A, ratios).endtoend)
    rerun = endtoend.parse(simulate(w, NET_A, ratios).endtoend)
    assert [r.fwd_compute for r in rerun.rows] == [1, 4, 6, 4, 5]
    assert [r.fwd_comm for r in rerun.rows] == [r.fwd_comm for r in plain.rows]
    bad = wf.parse("\n".join([header(checkpoints=(3,), checkpoint_initiates=(3,)).render(), "5", *rows]) + "\n")
    with pytest.raises(InputError, match="checkpoint"):
        simulate(bad, NET_A, ratios)


def test_overlap_ratio_exposes_part_of_each_collective(ratios):
    w = workload(["l -1 1000 ALLREDUCE 67108864 1000 ALLREDUCE 67108864 1000 ALLREDUCE 67108864 100"])
    ns = comm_time_ns("ALLREDUCE", "fwd", 67108864, w.header, NET_A, ratios)
    net = Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="48.5",
                  tp_overlap="0.25", dp_overlap="1")
    tidy = {c.phase: c for c in simulate(w, net, ratios).collectives}
    exposed = int(ns * 0.75)  # below 2^24 ns, float32 is exact here
    assert tidy["fwd"].exposed_us == f"{exposed // 1000}.{exposed % 1000:03d}"
    assert tidy["wg"].exposed_us == "0.000"


def test_default_ratios_are_said(ratios):
    w = workload(["l -1 1000 ALLGATHER 67108864 1000 NONE 0 1000 NONE 0 100"])
    default = simulate(w, NET_A)
    assert default.ratios_source.startswith("built-in default")
    with_tables = simulate(w, NET_A, ratios)
    assert with_tables.ratios_source == str(simai_runs.RATIO_DIR)
    # The nic table's efficiency at 64 MiB on one node is below 1: SimAI's time is longer.
    assert float(with_tables.collectives[0].time_us) > float(default.collectives[0].time_us)


def test_network_validation():
    from commsweep.base.errors import ConfigError

    with pytest.raises(ConfigError, match="nics_per_server"):
        Network(gpus=16, gpus_per_server=8, nics_per_server=0, nvlink_gbps="360", nic_gbps="48.5")
    with pytest.raises(ConfigError, match="nvlink_gbps"):
        Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="fast", nic_gbps="48.5")
    with pytest.raises(ConfigError, match="tp_overlap"):
        Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="48.5", tp_overlap=1.5)
    with pytest.raises(InputError, match="no rows"):
        simulate(wf.Workload(header(), ()), NET_A)
    numbers = Network(gpus=16, gpus_per_server=8, nics_per_server=8, nvlink_gbps=360, nic_gbps=48.5)
    assert math.isclose(numbers.bandwidths[1], 48.5)
    # SimAI's flags, each value as given; the overlap ratios only where not SimAI's default.
    assert numbers.flags() == ["-g", "16", "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
    assert dataclasses.replace(NET_A, tp_overlap="0.25", pp_overlap=1.0).flags()[-2:] == ["-tp_o", "0.25"]
    # A sweep's named network (no GPU count) is no simulation's network.
    named = dataclasses.replace(NET_A, name="netA", gpus=None)
    assert named.server_flags() == NET_A.flags()[2:]
    with pytest.raises(ConfigError, match="gpus: the simulation's network needs its GPU count"):
        comm_time_ns("ALLREDUCE", "wg", 2**20, header(), named)
