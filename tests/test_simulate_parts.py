"""The engine's parts: C number semantics, bandwidth rules, ratio tables, EndToEnd.csv files."""

from __future__ import annotations

import math

import pytest

import simai_runs
from commsweep.base.errors import InputError
from commsweep.simulate import bandwidth as bw
from commsweep.simulate import endtoend
from commsweep.base.cfloat import f32, f32_from_str, f32_of_int, fixed, u64
from commsweep.simulate.ratio import RatioOutOfRange, load_ratios, read_table

# -- C numbers -------------------------------------------------------------------------------


def test_u64_conversion_as_gcc_on_x86():
    assert u64(12.9) == 12
    assert u64(math.nan) == 1 << 63  # SimAI's 9223372036854776 us
    assert u64(-1.5) == (1 << 64) - 1  # negative times wrap
    assert u64(float(1 << 64)) == 0 and u64(math.inf) == 0
    assert u64(float(1 << 63)) == 1 << 63


def test_float32_rounding():
    assert f32_of_int(17179869185) == 17179869184  # SEMANTICS: sizes through the float scale
    assert u64(f32(f32_of_int(99367751) * 1.0)) == 99367752  # totals above 2^24 ns
    assert f32_of_int((1 << 64) - 1) == float(1 << 64)
    assert f32(1e39) == math.inf
    assert f32_from_str("48.5") == 48.5
    # Double rounding would land on the midpoint and round to even (16777216); stof does not.
    assert f32_from_str("16777217.000000000000001") == 16777218.0
    assert f32_from_str("16777217") == 16777216.0


def test_fixed_prints_like_iostream():
    assert fixed(math.nan, 2) == "-nan"
    assert fixed(math.inf, 2) == "inf"
    assert fixed(32742.5, 0) == "32742" and fixed(32743.5, 0) == "32744"  # ties to even
    assert endtoend.us(math.inf) == "NaN or Inf"


# -- bandwidth ------------------------------------------------------------------------------

NET_A = bw.NetParams(8, 8, 360.0, 48.5)
NET_B = bw.NetParams(8, 4, 200.0, 25.0)


def busbw(coll, group, nranks, tp, ep, net, **kw):
    nodes, gpn, nics, frac = bw.group_arguments(group, nranks, tp, ep, net, **kw)
    return bw.bus_bandwidth(coll, nodes, gpn, nics, net, integer_nics=not frac)


def test_bus_bandwidth_rules():
    # TP inside a server: NVLink.
    assert busbw("allreduce", "TP", 8, 8, 1, NET_A).busbw == 360.0
    # DP is always multi-node: with t = 1, min(360 * 8/7, 48.5 * 8) = 388 GB/s.
    assert busbw("allgather", "DP", 16, 1, 1, NET_A).busbw == 388.0
    # ... and with t = 2, 4 NICs per DP ring: 194.
    assert busbw("allgather", "DP", 384, 2, 16, NET_A).busbw == 194.0
    # EP all-to-all across 4 servers (t=2, e=16): 194 / 4 * 15 / 12.
    assert busbw("alltoall", "EP", 16, 2, 16, NET_A).busbw == 60.625
    # DP_EP with t*ep > g_p_s: one GPU per node, n_p_s / g_p_s NICs.
    assert busbw("allgather", "DP_EP", 24, 2, 16, NET_A).busbw == 48.5
    # TP across servers where the NICs outrun NVLink: NVLink is the bottleneck.
    fast = bw.NetParams(8, 8, 100.0, 400.0)
    result = busbw("allgather", "TP", 16, 16, 1, fast)
    assert result.is_nvlink and result.busbw == f32(f32(100.0 * 8) / 7)
    assert bw.ratio_case("allgather", "TP", 16, 16, 8, result.is_nvlink) == ("nvlink", 2)


def test_bus_bandwidth_bug_cases():
    one = busbw("allreduce", "TP", 1, 1, 1, NET_A)
    assert (one.busbw, one.problem) == (0.0, bw.ONE_GPU)
    zero = busbw("allgather", "DP", 2, 8, 1, NET_B)
    assert (zero.busbw, zero.problem) == (-1.0, bw.NO_NIC)
    half = busbw("allgather", "DP", 2, 8, 1, NET_B, fix_nics=True)
    assert (half.busbw, half.problem, half.nics) == (12.5, None, 0.5)
    assert bw.group_arguments("DP", 1, 8, 1, NET_A) is None  # a DP group of one: no time


def test_formula_and_latency():
    assert bw.small_message_ns(8192, 16) == 66000 and bw.small_message_ns(8192, 3) == 0
    assert bw.small_message_ns(1048576, 8) is None and bw.small_message_ns(1, 8) is None
    # 64 MiB all-reduce on TP 8 at 360 GB/s: 0.0625 / 360 * 1e9 * 2 * 7/8 ns, truncated.
    assert bw.formula_ns("allreduce", 1 << 26, 8, 1.0, 360.0) == 303819
    assert bw.formula_ns("allreduce", 1 << 26, 1, 1.0, 0.0) == 1 << 63
    # SimAI's microAllReduce example prints 16 MiB on TP 8 as "76,205.72,360.00".
    ns = bw.formula_ns("allreduce", 16777216, 8, 1.0, 360.0)
    algbw, busbw_ = bw.reported_bandwidths("allreduce", 8, 16777216, ns)
    assert (round(ns / 1000), fixed(algbw, 2), fixed(busbw_, 2)) == (76, "205.72", "360.00")
    assert [fixed(v, 2) for v in bw.reported_bandwidths(None, 8, 4096, 0)] == ["inf", "0.00"]
    assert [fixed(v, 2) for v in bw.reported_bandwidths("allgather", 1, 4096, 0)] == ["inf", "-nan"]
    assert [fixed(v, 2) for v in bw.reported_bandwidths("allgather", 16, 0, 0)] == ["-nan", "-nan"]


# -- ratio tables ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ratios():
    if not simai_runs.RATIO_DIR.exists():
        pytest.skip(f"SimAI's ratio tables not found at {simai_runs.RATIO_DIR}")
    return load_ratios(simai_runs.RATIO_DIR)


def test_ratio_lookup(ratios):
    nic = ratios.nic
    assert nic.value(0, 1) == 1.0
    assert nic.value(1 << 20, 1) == f32(0.45 / 0.81)  # below the first row: the first row
    assert nic.value(1 << 24, 2) == f32(0.32 / 0.96)
    middle = (16777216 + 33554432) // 2
    assert nic.value(middle, 1) == f32((0.45 + (0.55 - 0.45) * (middle - 16777216) / 16777216) / 0.81)
    assert nic.value(1 << 34, 4) == 1.0
    with pytest.raises(RatioOutOfRange):
        nic.value((1 << 34) + 1, 1)
    assert nic.clamped_value((1 << 35), 1) == 1.0
    # Node counts without a column read column 5; "Multi 16" is the 9th.
    assert nic.value(1 << 24, 3) == nic.value(1 << 24, 16)
    assert ratios.ata.value(1 << 24, 9) == f32(0.86 / 0.96)


def test_ratio_table_reading(tmp_path):
    table = tmp_path / "nic_ratio.csv"
    table.write_text("Size,A,B,C\n100, 0.5 ,,0.2,\n200,1,0.5,0.7\n")
    t = read_table(table, "nic")
    assert t.sizes == (100.0, 200.0) and t.rows[0] == (0.5, 1.0, 0.2)  # empty cell reads 1
    with pytest.raises(InputError, match=r"nic_ratio.csv:3: .*cell 4"):
        table.write_text("Size,A,B,C\n100,1,1,1\n200,1,1,x\n")
        read_table(table, "nic")
    with pytest.raises(InputError, match="ratio table not found"):
        load_ratios(tmp_path)
    assert load_ratios(None).is_default


# -- EndToEnd.csv ---------------------------------------------------------------------------


@pytest.mark.parametrize("run", simai_runs.params("all"))
def test_parse_every_reference_endtoend(run):
    parsed = endtoend.read(run.endtoend)
    assert parsed.complete and parsed.file_name == run.prefix
    assert len(parsed.rows) == int(run.workload.read_text().split("\n")[1])
    # The summary's components and total are consistent as printed (each rounded once).
    parts = sum(parsed.components[k] for k in ("compute", "exposed", "bubble", "exposed_pp"))
    # (Except in the runs with a noted SimAI bug, whose ~9.2e15 us overflow totals are beyond
    # a float's whole-microsecond precision.)
    assert abs(parts - parsed.total) <= 2 or (run.notes and parsed.total > 1e15)
    assert parsed.rows[0].text[endtoend.ROW_FIELDS.index("fwd_algbw")] in ("-nan", "inf") or parsed.rows[0].fwd_comm > 0


def test_parse_cut_and_empty_files():
    assert endtoend.parse("").empty
    cut = endtoend.parse(endtoend.ROW_HEADER + "\nl,Analytical_test," + ",".join(["0"] * 15) + "\n")
    assert not cut.complete and len(cut.rows) == 1 and cut.total is None
    with pytest.raises(InputError, match=r"<EndToEnd.csv>:2: expected 17 fields"):
        endtoend.parse(endtoend.ROW_HEADER + "\nl,Analytical_test,1,2\n")
    with pytest.raises(InputError, match="cut short"):
        endtoend.parse(endtoend.ROW_HEADER)
    with pytest.raises(InputError, match=r":1: expected the summary header or the row header"):
        endtoend.parse("hello\n")
