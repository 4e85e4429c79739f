"""Volumes: `commsweep volumes` against a tally this test computes on its own."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from collections import defaultdict
from fractions import Fraction

import pytest

from commsweep.analysis import volumes
from commsweep.workload import format as wf

from conftest import reference_files

WORKLOADS = reference_files("aicb/workloads", "*.txt") + reference_files("simai/examples", "*.txt")


def independent_tally(text: str) -> dict[tuple, list]:
    """Tally a workload straight from its text, with SimAI's rules restated here."""
    lines = text.split("\n")
    head = lines[0].split()
    values = {}
    for i, token in enumerate(head):
        if token.rstrip(":") in ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm"):
            values[token.rstrip(":")] = int(float(head[i + 1]))
    tp, ep, pp, world = values["model_parallel_NPU_group"], values["ep"], values["pp"], values["all_gpus"]
    dp = world // (tp * pp)
    size_of = {"TP": tp, "DP": dp, "EP": ep, "DP_EP": dp // ep}
    out: dict[tuple, list] = defaultdict(lambda: [0, 0, Fraction(0)])
    for line in lines[2 : 2 + int(lines[1])]:
        f = line.split()
        for phase, (ti, si) in (("fwd", (3, 4)), ("ig", (6, 7)), ("wg", (9, 10))):
            kind, size = f[ti], int(f[si])
            if kind == "NONE":
                continue
            if kind.endswith("_DP_EP"):
                group = "DP_EP"
            elif kind.endswith("_EP"):
                group = "EP"
            else:
                group = "TP" if phase != "wg" else "DP"
            op = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
                  "ALLTOALL": "alltoall"}[kind.split("_")[0]]
            if phase == "fwd" and 1 <= size <= 4095:
                size = 4096
            n = size_of[group]
            share = Fraction(0) if n == 1 else (Fraction(2 * (n - 1), n) if op == "allreduce" else Fraction(n - 1, n))
            entry = out[(phase, op, group, n)]
            entry[0] += 1
            entry[1] += size
            entry[2] += share * size
    if pp > 1:
        count = 2 * values["vpp"] * values["ga"]
        out[("pp", "sendrecv", "PP", pp)] = [count, count * values.get("pp_comm", 0), Fraction(count * values.get("pp_comm", 0))]
    return {k: [v[0], v[1], round(v[2])] for k, v in out.items()}


def _cli_volumes(path) -> dict[tuple, list]:
    result = subprocess.run(
        [sys.executable, "-m", "commsweep", "volumes", str(path), "--format", "csv"],
        capture_output=True, text=True, check=True,
    )
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == list(volumes.COLUMNS)
    return {
        (r["phase"], r["collective"], r["group"], int(r["group_size"])): [
            int(r["count"]), int(r["payload_bytes"]), int(r["wire_bytes_per_rank"])
        ]
        for r in rows
    }


@pytest.mark.parametrize("path", WORKLOADS)
def test_cli_volumes_match_an_independent_tally(path):
    assert _cli_volumes(path) == independent_tally(path.read_text())


def test_pipeline_sends_follow_simai_formula():
    text = (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 4 vpp: 3 ga: 5 all_gpus: 16 "
        "checkpoints: 0 checkpoint_initiates: 0 pp_comm: 1000.0\n1\n"
        "a\t-1\t1\tNONE\t0\t1\tALLGATHER\t64\t1\tNONE\t0\t100\n"
    )
    table = {(v.phase, v.group): v for v in volumes.tally(wf.parse(text))}
    pp = table[("pp", "PP")]
    assert (pp.count, pp.payload_bytes, pp.wire_bytes_per_rank, pp.group_size) == (30, 30000, 30000, 4)
    ig = table[("ig", "TP")]
    assert (ig.count, ig.payload_bytes, ig.wire_bytes_per_rank) == (1, 64, 32)  # no bump outside fwd


def test_size_one_groups_send_nothing():
    text = (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 8\n1\n"
        "a\t-1\t1\tALLREDUCE\t8192\t1\tNONE\t0\t1\tALLREDUCE\t800\t100\n"
    )
    table = {(v.phase, v.group): v for v in volumes.tally(wf.parse(text))}
    assert table[("fwd", "TP")].wire_bytes_per_rank == 0
    assert table[("fwd", "TP")].payload_bytes == 8192
    assert table[("wg", "DP")].wire_bytes_per_rank == 2 * 7 * 800 // 8


@pytest.mark.parametrize("fmt", ["csv", "json", "table"])
def test_formats_render(fmt, tmp_path):
    text = (
        "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 8\n1\n"
        "a\t-1\t1\tALLREDUCE\t8192\t1\tNONE\t0\t1\tNONE\t0\t100\n"
    )
    path = tmp_path / "w.txt"
    path.write_text(text)
    out = tmp_path / f"v.{fmt}"
    subprocess.run([sys.executable, "-m", "commsweep", "volumes", str(path), "--format", fmt, "-o", str(out)], check=True)
    body = out.read_text()
    # One all-reduce of 8192 bytes on 4 ranks: each sends 2 * 3/4 * 8192 = 12288 bytes.
    if fmt == "csv":
        assert body.splitlines() == ["phase,collective,group,group_size,count,payload_bytes,wire_bytes_per_rank",
                                     "fwd,allreduce,TP,4,1,8192,12288"]
    elif fmt == "json":
        assert json.loads(body) == [{"phase": "fwd", "collective": "allreduce", "group": "TP", "group_size": 4,
                                     "count": 1, "payload_bytes": 8192, "wire_bytes_per_rank": 12288}]
    else:  # MiB with two decimals: 8192 and 12288 bytes both print as 0.01
        assert body.splitlines()[-1].split() == ["fwd", "allreduce", "TP", "4", "1", "0.01", "0.01"]


def test_the_table_reads_back_and_names_a_bad_cell(tmp_path):
    """volumes.read, the summary's and the causes' reader, gives back what to_csv wrote; a cell it
    would not write is an InputError naming the file, line and field."""
    from commsweep.base.errors import InputError

    table = [volumes.Volume("fwd", "allreduce", "TP", 4, 1, 8192, 12288),
             volumes.Volume("wg", "allgather", "DP", 2, 3, 6, 3)]
    path = tmp_path / "volumes.csv"
    path.write_text(volumes.to_csv(table))
    assert volumes.read(path) == table
    lines = path.read_text().splitlines(keepends=True)
    cells = lines[1].rstrip("\n").split(",")
    cells[volumes.COLUMNS.index("payload_bytes")] = "8k"
    path.write_text(lines[0] + ",".join(cells) + "\n" + "".join(lines[2:]))
    with pytest.raises(InputError, match=rf"^{path}:2: field 'payload_bytes': expected an integer, got '8k'$"):
        volumes.read(path)
    path.write_text("phase,collective\nfwd,allreduce\n")
    with pytest.raises(InputError, match=rf"^{path}:1: expected the columns phase,collective,group,"):
        volumes.read(path)


def test_malformed_workload_is_a_clean_cli_error(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ep: 1 pp: 1 vpp: 1 ga: 1\n0\n")
    result = subprocess.run([sys.executable, "-m", "commsweep", "volumes", str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{path}:1: field 'all_gpus': missing header key" in result.stderr
    assert "Traceback" not in result.stderr
