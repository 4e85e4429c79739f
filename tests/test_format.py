"""The SimAI workload format: byte-exact round trips and clear errors."""

from __future__ import annotations

import pytest

from commsweep.base.errors import InputError
from commsweep.workload import format as wf

from conftest import reference_files

WORKLOADS = reference_files("aicb/workloads", "*.txt") + reference_files("simai/examples", "*.txt")

GOOD = (
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 2 ga: 1 all_gpus: 8 "
    "checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n"
    "2\n"
    "embedding_layer\t-1\t5\tALLREDUCE\t100\t1\tNONE\t0\t1\tNONE\t0\t100\n"
    "grads\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER_DP_EP\t4096\t100\n"
)


@pytest.mark.parametrize("path", WORKLOADS)
def test_round_trip_is_byte_identical(path, tmp_path):
    workload = wf.read(path)
    out = tmp_path / "out.txt"
    wf.write(workload, out)
    assert out.read_bytes() == path.read_bytes()


def test_reads_header_and_rows():
    w = wf.parse(GOOD)
    assert (w.header.tp, w.header.ep, w.header.pp, w.header.vpp, w.header.ga, w.header.all_gpus) == (2, 1, 1, 2, 1, 8)
    assert [r.name for r in w.rows] == ["embedding_layer", "grads"]
    assert w.rows[1].wg_comm == "REDUCESCATTER_DP_EP" and w.rows[1].wg_size == 4096


def test_the_header_reads_alone(tmp_path):
    """read_header reads the first line only: a file whose rows are cut still gives its header."""
    path = tmp_path / "w.txt"
    path.write_text(GOOD.split("embedding_layer")[0] + "embedding_layer\t-1")
    assert wf.read_header(path) == wf.parse(GOOD).header
    path.write_text(GOOD.replace("ga: 1", "ga: x"))
    with pytest.raises(InputError, match=rf"^{path}:1: field 'ga': expected an integer"):
        wf.read_header(path)


def test_pp_comm_float_reads_like_stoi():
    w = wf.parse(GOOD.replace("pp_comm: 0", "pp_comm: 8388608.0"))
    assert w.header.pp_comm == 8388608
    assert w.render() == GOOD.replace("pp_comm: 0", "pp_comm: 8388608.0")


def test_changed_header_is_rendered_not_copied():
    import dataclasses

    w = wf.parse(GOOD)
    changed = dataclasses.replace(w, header=dataclasses.replace(w.header, tp=4))
    assert changed.render().splitlines()[0].startswith("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ")


def test_generated_rows_are_tab_separated():
    row = wf.Row("x", -1, 1, "NONE", 0, 2, "ALLGATHER", 8, 3, "NONE", 0, 100)
    assert row.render() == "x\t-1\t1\tNONE\t0\t2\tALLGATHER\t8\t3\tNONE\t0\t100"


def _error(text: str) -> InputError:
    with pytest.raises(InputError) as info:
        wf.parse(text, source="w.txt")
    return info.value


@pytest.mark.parametrize(
    "broken, line, field, words",
    [
        (GOOD.replace("\t100\n", "\n", 1), 3, None, "expected 12 fields"),
        (GOOD.replace("ALLREDUCE", "ALLREDUCEX"), 3, "fwd_comm", "unknown comm type"),
        (GOOD.replace("\t100\t1\tNONE", "\t1e2\t1\tNONE"), 3, "fwd_size", "non-negative integer"),
        (GOOD.replace("\t5\t", "\t-5\t"), 3, "fwd_compute", "negative"),
        (GOOD.replace("ga: 1 ", ""), 1, "ga", "missing header key"),
        (GOOD.replace("\n2\n", "\n3\n"), 2, "row_count", "declares 3 rows but has 2"),
        (GOOD.replace("\n2\n", "\ntwo\n"), 2, "row_count", "number of rows"),
        (GOOD.replace("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "MICRO"), 1, "mode", "expected the mode"),
        (GOOD.replace("pp: 1 ", "pp: 0 "), 1, "pp", "integer >= 1"),
        (GOOD.replace("all_gpus: 8", "all_gpus: 8 colour: 3"), 1, "header", "unknown header key"),
        (GOOD.replace("\t4096\t", "\t99999999999999999999\t"), 4, "wg_size", "64 bits"),
        ("", 1, None, "empty file"),
    ],
)
def test_malformed_input_names_line_and_field(broken, line, field, words):
    err = _error(broken)
    assert err.file == "w.txt"
    assert err.line == line
    assert err.field == field
    assert words in str(err)
    assert str(err).startswith(f"w.txt:{line}:")


def test_read_reports_the_path(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(GOOD.replace("NONE\t0\t1\tREDUCE", "NONE\t0\t1\tREDUCE_X"))
    with pytest.raises(InputError, match=r"bad\.txt:4: field 'wg_comm'"):
        wf.read(path)


def test_binary_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not a UTF-8 text file"):
        wf.read(path)


def test_groups_and_forward_size_bump():
    w = wf.parse(GOOD)
    got = list(wf.collectives(w))
    assert [(c.phase, c.collective, c.group, c.group_size, c.size, c.declared_size) for c in got] == [
        ("fwd", "allreduce", "TP", 2, 4096, 100),  # 1..4095 raised to 4096 in the forward column
        ("wg", "reducescatter", "DP_EP", 4, 4096, 4096),  # DP = 8 / (2*1) = 4, DP_EP = 4 / 1
    ]


def test_group_sizes_follow_the_gpu_flag():
    w = wf.parse(GOOD)
    assert wf.group_sizes(w.header, gpus=32) == {"TP": 2, "DP": 16, "EP": 1, "DP_EP": 16, "PP": 1}


def test_comm_group_by_column():
    assert wf.comm_group("ALLGATHER", "fwd") == "TP"
    assert wf.comm_group("ALLGATHER", "wg") == "DP"
    assert wf.comm_group("ALLTOALL_EP", "ig") == "EP"
    assert wf.comm_group("ALLGATHER_DP_EP", "wg") == "DP_EP"
    assert wf.comm_group("NONE", "fwd") is None


def test_write_is_atomic(tmp_path):
    """A failure while writing leaves the earlier file untouched and no temporary behind."""
    from commsweep.base.files import atomic_open

    out = tmp_path / "w.txt"
    out.write_text("previous result\n")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with atomic_open(out) as fh:
            fh.write(wf.parse(GOOD).render()[:50])
            raise Boom
    assert out.read_text() == "previous result\n"
    assert [p.name for p in tmp_path.iterdir()] == ["w.txt"]
