"""ASTRA-sim in a sweep (simulator.astra, the astra_compare step, the answer page's section).

Without ASTRA-sim: the schema's block and its defaults, the step's planning and arguments, the
binary as an external input, and a whole sweep whose "ASTRA-sim" exits 0 without a `finished`
line (the failure mode ASTRA-sim really has: a stand-in script in tmp_path is that failure, not a
mock of a success). With ASTRA_SIM_ROOT: the same sweep through the real binary, every point's
time against its kept command run by hand.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

import sweeps
from commsweep.analysis import astra_answer, astra_compare
from commsweep.base.errors import ConfigError, InputError
from commsweep.base.external import file_digest
from commsweep.base.status import is_marker, read
from commsweep.orchestration import steps
from commsweep.orchestration.sweep import load_config
from commsweep.setup.points import read_points
from commsweep.simulate.astra import inputs
from commsweep.simulate.astra import sweep as astra_sweep

from conftest import REPO

ROOT = os.environ.get("ASTRA_SIM_ROOT")
needs_astra = pytest.mark.skipif(not ROOT, reason="no ASTRA-sim: set ASTRA_SIM_ROOT to a checkout with its analytical "
                                                  "backend built (build/astra_analytical/build.sh), or its binary")
# A binary that exits 0 and prints no `finished` line: ASTRA-sim's own way of failing.
SILENT = "#!/bin/sh\necho 'ASTRA-sim: loading workload'\nexit 0\n"
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles\.")


def stand_in(folder: Path, text: str = SILENT) -> Path:
    path = folder / "AstraSim_Analytical_Congestion_Unaware"
    path.write_text(text)
    path.chmod(0o755)
    return path


# -- the config block -----------------------------------------------------------------------


def test_the_shipped_sweep_validates_and_reads_its_root_from_the_environment(monkeypatch, tmp_path):
    config = load_config(REPO / "config" / "astra-sim.yaml")
    astra = config["simulator"]["astra"]
    assert astra["root"] == "$ASTRA_SIM_ROOT" and astra["backend"] == "unaware"
    assert astra["latency_ns"] == list(inputs.DEFAULT_LATENCY_NS) and astra["topology"] == list(inputs.DEFAULT_TOPOLOGY)
    binary = stand_in(tmp_path)
    monkeypatch.setenv("ASTRA_SIM_ROOT", str(binary))
    assert astra_sweep.enabled(config) and astra_sweep.root(config) == str(binary)
    external = astra_sweep.check_external(config)["simulator.astra.root"]
    assert external.digest == file_digest(binary) and external.path == str(binary)
    monkeypatch.delenv("ASTRA_SIM_ROOT")
    with pytest.raises(ConfigError, match=r"simulator\.astra\.root: '\$ASTRA_SIM_ROOT' names no ASTRA-sim"):
        astra_sweep.check_external(config)


def test_the_default_sweep_has_no_astra_step():
    config = load_config(REPO / "config" / "config.yaml")
    assert config["simulator"]["astra"]["root"] is None
    assert not astra_sweep.enabled(config) and astra_sweep.check_external(config) == {}
    assert "astra_compare" not in steps.of_sweep({})
    assert "astra_compare" in steps.of_sweep({"astra": True})
    assert steps.groups().get("astra_compare") is None  # its own cluster job


def test_the_schema_refuses_a_bad_block(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("simulator:\n  astra:\n    root: /x\n    backend: fast\n")
    with pytest.raises(Exception, match="fast"):
        load_config(path)
    path.write_text("simulator:\n  astra:\n    root: /x\n    latency_ns: [1]\n")
    with pytest.raises(Exception, match="latency_ns"):
        load_config(path)


def test_the_steps_arguments_carry_every_setting(tmp_path):
    binary = stand_in(tmp_path)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"simulator": {"astra": {
        "root": str(binary), "backend": "aware", "latency_ns": [500, 1500], "topology": ["Ring", "Switch"],
        "system": {"scheduling-policy": "FIFO"}, "overlap": ["DP"], "timeout_s": 30, "stall_s": 5}}}))
    config = load_config(path)
    words = astra_sweep.arguments(config, "res", "t.csv", "p.csv", "res/astra")
    assert words == ["--results", "res", "--table", "t.csv", "--pairs", "p.csv", "--runs", "res/astra",
                     "--astra-root", str(binary), "--backend", "astra-aware", "--astra-latency", "500.0,1500.0",
                     "--astra-topology", "Ring,Switch", "--strict", "--astra-system", 'scheduling-policy="FIFO"',
                     "--astra-overlap", "DP", "--timeout", "30.0", "--stall-s", "5.0"]
    config["simulator"]["astra"]["system"] = {"endpoint-delay": 0}
    with pytest.raises(ConfigError, match="endpoint-delay"):
        astra_sweep.check_external(config)


# -- the answer page's section from a table ---------------------------------------------------


def test_the_section_measures_the_disagreement_from_the_table(tmp_path):
    pairs = tmp_path / "astra_difference.csv"
    pairs.write_text("point,twin,simai_difference_us,astra_difference_us\n"
                     "a,m,11559.000,-4976.412\nb,m2,7393.000,22589.412\nc,m3,100.000,\n")
    table = tmp_path / "astra_vs_simai.csv"
    table.write_text(",".join(astra_compare.COLUMNS) + "\nc,aicb_default,1.000,1.000,,,failed,3 of 16 ranks printed no "
                     "'finished' line,\n")
    read = astra_compare.read_pairs(pairs)
    assert read[0].flips and read[0].gap_us == pytest.approx(-16535.412)
    assert not read[1].flips and read[1].gap_us == pytest.approx(15196.412)
    assert read[2].gap_us is None
    text = json.dumps(astra_answer.lines(pairs, table, {}))
    assert "agree on the sign in 1 of 2 pair(s)" in text and "largest gap between them is 16.54 ms" in text
    assert "1 point(s) have no ASTRA-sim time" in text and "3 of 16 ranks printed no" in text
    pairs.write_text("point,twin,simai_difference_us,astra_difference_us\na,m,1.0,fast\n")
    with pytest.raises(InputError, match=r"astra_difference.csv:2: field 'astra_difference_us'"):
        astra_compare.read_pairs(pairs)


# -- a whole sweep ------------------------------------------------------------------------------

SWEEP = """\
sweep:
  tp: [2]
  sp: [false]
  aiob: [false, true]
  schedule: [aicb, megatron]
  global_batch: [16]
simulator:
  astra:
    root: {root}
"""


@pytest.fixture(scope="module")
def silent_sweep(tmp_path_factory):
    """A sweep of four points whose ASTRA-sim prints no `finished` line."""
    workdir = tmp_path_factory.mktemp("astra-sweep")
    binary = stand_in(workdir)
    config = workdir / "sweep.yaml"
    config.write_text(SWEEP.format(root=binary))
    result = sweeps.run(workdir, "--configfile", str(config), check=False)
    return workdir, config, result


def table(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_run_without_times_is_a_named_failed_point_and_the_step_says_so(silent_sweep):
    workdir, _, result = silent_sweep
    results = workdir / "results"
    assert result.returncode != 0  # the check fails the run: a step failed
    rows = table(results / "astra_vs_simai.csv")
    assert len(rows) == 4 and not is_marker(results / "astra_vs_simai.csv")
    for row in rows:
        assert row["astra_status"] == "failed" and row["astra_total_us"] == "" and row["astra_exposed_us"] == ""
        assert "ranks printed no 'finished' line" in row["astra_reason"]
        assert float(row["simai_total_us"]) > 0  # SimAI's time stands beside it
    pairs = table(results / "astra_difference.csv")
    assert len(pairs) == 2 and all(p["astra_difference_us"] == "" and p["simai_difference_us"] for p in pairs)
    status = read(results / "steps" / "astra_compare.status")
    assert not status.ok and status.error.startswith("4 of 4 point(s) have no ASTRA-sim time")
    assert "simulator.astra.root" in status.provenance["inputs"]
    assert "astra_compare" in (results / "status.txt").read_text()
    answer = (results / "answer.md").read_text()
    assert "## In two simulators: SimAI and ASTRA-sim" in answer and "4 point(s) have no ASTRA-sim time" in answer


@needs_astra
def test_the_sweep_through_a_real_astra_sim_equals_its_kept_commands(silent_sweep):
    workdir, config, _ = silent_sweep
    config.write_text(SWEEP.format(root=ROOT))
    sweeps.run(workdir, "--configfile", str(config))  # a new binary: the step reruns, and now succeeds
    results = workdir / "results"
    assert read(results / "steps" / "astra_compare.status").ok
    rows = {r["point"]: r for r in table(results / "astra_vs_simai.csv")}
    assert set(rows) == {p.point for p in read_points(results / "sweep.csv")}
    for point, row in rows.items():
        assert row["astra_status"] == "ok" and row["astra_build"].startswith("AstraSim_Analytical_Congestion_Unaware")
        folder = results / "astra" / point
        argv = shlex.split((folder / "command.txt").read_text())
        out = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600).stdout
        ranks = [(int(r), int(c), int(e)) for r, c, e in FINISHED.findall(out)]
        assert len(ranks) == 16
        last = max(ranks, key=lambda t: (t[1], -t[0]))
        assert row["astra_total_us"] == f"{last[1] // 1000}.{last[1] % 1000:03d}"
        assert row["astra_exposed_us"] == f"{last[2] // 1000}.{last[2] % 1000:03d}"
    for pair in table(results / "astra_difference.csv"):
        a, m = rows[pair["point"]], rows[pair["twin"]]
        astra = float(a["astra_total_us"]) - float(m["astra_total_us"])
        assert float(pair["astra_difference_us"]) == pytest.approx(astra)
    answer = (results / "answer.md").read_text()
    assert "agree on the sign in" in answer and "have no ASTRA-sim time" not in answer


def test_guard_keeps_a_partial_results_outputs_and_fails_its_status(tmp_path):
    from commsweep.base import status
    from commsweep.base.errors import PartialResult

    written, unwritten, st = tmp_path / "table.csv", tmp_path / "pairs.csv", tmp_path / "step.status"

    def run():
        written.write_text("point,astra_status\np,failed\n")
        raise PartialResult("1 of 1 point(s) have no ASTRA-sim time: p: why")

    recorded = status.guard("astra-compare", run, status_path=st, outputs=[written, unwritten, st])
    assert not recorded.ok and recorded.error == "1 of 1 point(s) have no ASTRA-sim time: p: why"
    assert written.read_text() == "point,astra_status\np,failed\n"  # kept: its failed row says why
    assert status.is_marker(unwritten)  # what it did not write is a marker still
    assert status.read(st) == recorded


def test_the_section_says_when_the_step_left_markers(tmp_path):
    from commsweep.base import status

    failed = status.Status(ok=False, stage="astra-compare", error="simulator.astra.root: no binary")
    pairs, table = tmp_path / "astra_difference.csv", tmp_path / "astra_vs_simai.csv"
    for path in (pairs, table):
        path.write_text(status.marker_text(failed, tmp_path / "astra_compare.status"))
    (kind, title), (_, text) = astra_answer.lines(pairs, table, {})
    assert kind == "h2" and "ASTRA-sim's step failed" in text and "SimAI's answer above stands alone" in text
