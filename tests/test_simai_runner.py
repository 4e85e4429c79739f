"""Running a user's SimAI: parsing its real outputs, spotting its silent failures.

SimAI is not built in CI: its build needs SimCCL's NCCL mock, which the public SimCCL lacks
(docs/simulate.md, "Speed", says how it was built by hand for the comparison).
The parsers and checks run on SimAI's recorded outputs in ../shared/reference; the
runner's plumbing (working directory, flags, exit statuses) runs against a stand-in
binary that replays those recorded outputs; the real end-to-end comparison runs when
SIMAI_ROOT points to a built SimAI.
"""

from __future__ import annotations

import csv
import io
import os
import stat
import sys
from pathlib import Path

import pytest

import simai_runs
from commsweep.simulate import endtoend, simai
from commsweep.simulate.engine import load_ratios, simulate
from commsweep.workload import format as wf

ALL = simai_runs.params("all")
CLEAN = simai_runs.params("clean")
NOTED = simai_runs.params("noted")


@pytest.mark.parametrize("run", ALL)
def test_log_parser_reads_every_collective_line(run):
    """parse_log + assign_phases reproduce the reference's collectives table (made by hand
    from the same logs): row, layer, phase, type, group, size, bytes, ratio, busbw."""
    log = simai.parse_log(run.log.read_text())
    phases = simai.assign_phases(wf.read(run.workload), log)
    mine = [(c.seq, c.row, c.layer, phases.get(c.seq), c.collective, c.group, c.group_size, c.bytes, c.ratio,
             int(c.nvlink_bottleneck), c.busbw_retcode, c.busbw_gbps) for c in log.collectives]
    with open(run.collectives, newline="") as fh:
        theirs = [(int(r["seq"]), int(r["layer_index"]), r["layer"], r["phase"], r["comm_type"], r["group_name"],
                   int(r["group_size"]), int(r["data_size_bytes"]), float(r["ratio"]), int(r["nvlink_bottleneck"]),
                   int(r["busbw_retcode"]), float(r["theoretical_busbw_GBps"])) for r in csv.DictReader(fh)]
    assert mine == theirs
    assert len(log.layers) == len(wf.read(run.workload).rows)


def check_reference(run, mode):
    return simai.check(0, run.log.read_text(), run.stderr.read_text(), run.endtoend, wf.read(run.workload),
                       run.network(), simai_bugs=mode)


@pytest.mark.parametrize("run", CLEAN)
def test_clean_runs_pass_and_agree_with_the_engine(run):
    result = check_reference(run, "fix")
    assert result.warnings == []
    ratios = load_ratios(simai_runs.RATIO_DIR)
    engine = simulate(wf.read(run.workload), run.network(), ratios, prefix=run.prefix)
    assert len(result.collectives) == len(engine.collectives)
    for theirs, mine in zip(result.collectives, engine.collectives):
        assert (theirs.row, theirs.phase, theirs.group, theirs.group_size, theirs.bytes) == \
               (mine.row, mine.phase, mine.group, mine.group_size, mine.bytes)
        assert theirs.time_us == f"{float(mine.time_us):.0f}"


def test_stdout_that_contradicts_the_workload_is_reported():
    run = next((r for r in simai_runs.load_runs() if r.name == "example_microAllReduce__netA"), None)
    if run is None:
        pytest.skip("reference runs not found")
    log = run.log.read_text().replace("Group Size: 8Data Size: 67108864", "Group Size: 4Data Size: 67108864")
    result = simai.check(0, log, "", run.endtoend, wf.read(run.workload), run.network())
    assert result.warnings == ["1 collective line(s) of SimAI's stdout do not match the workload as commsweep "
                               "reads it: row 1 (embedding_layer): allreduce on TP 4, 67108864 bytes"]


@pytest.mark.parametrize("run", NOTED)
def test_bug_runs_fail_unless_reproducing(run):
    with pytest.raises(simai.SimaiRunError, match=r"cal_busbw.*row \d+ \("):
        check_reference(run, "fix")
    kept = check_reference(run, "reproduce")
    assert kept.warnings and kept.endtoend_text == run.endtoend.read_text()


def test_failure_statuses_are_named(tmp_path):
    run = simai_runs.load_runs()[-1] if simai_runs.load_runs() else pytest.skip("no reference runs")
    w, net = wf.read(run.workload), run.network()
    missing = tmp_path / "none-EndToEnd.csv"
    cases = {
        -8: r"divided by zero \(SIGFPE\)",
        -6: "aborted",
        255: "rejected its command line",
        1: "exited with status 1",
    }
    for code, message in cases.items():
        with pytest.raises(simai.SimaiRunError, match=message):
            simai.check(code, "", "Unable to open file\n", missing, w, net)
    with pytest.raises(simai.SimaiRunError, match="wrote no none-EndToEnd.csv"):
        simai.check(0, "", "", missing, w, net)
    empty = tmp_path / "x-EndToEnd.csv"
    empty.write_text("")
    with pytest.raises(simai.SimaiRunError, match=r"EMPTY EndToEnd.csv: row 0 \(.*\) threw"):
        simai.check(0, "", "warning! a callable is removed before call\n", empty, w, net)
    kept = simai.check(0, "", "warning! a callable is removed before call\n", empty, w, net, simai_bugs="reproduce")
    assert kept.endtoend.empty and "EMPTY" in kept.warnings[0]


# -- run() against a stand-in that replays SimAI's recorded outputs -------------------------

STAND_IN = """\
#!{python}
# Replays a recorded SimAI_analytical run; checks the working directory as SimAI needs it.
import os, shutil, signal, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
mode = os.environ["STAND_IN_MODE"]
if mode == "badflag":
    print("-h,     --help              Help message", file=sys.stderr); sys.exit(255)
if mode == "fpe":
    os.kill(os.getpid(), signal.SIGFPE)
if mode == "hang":
    time.sleep(30)
if not os.path.isfile("astra-sim-alibabacloud/inputs/ratio/nic_ratio.csv") or not os.path.isdir("results"):
    print("Failed to open file", file=sys.stderr); sys.exit(134)
out = os.path.join("results", args["-r"] + "EndToEnd.csv")
if mode == "empty":
    open(out, "w").close(); print("warning! a callable is removed before call", file=sys.stderr); sys.exit(0)
sys.stdout.write(open(os.environ["STAND_IN_LOG"]).read())
with open(os.environ["STAND_IN_ARGS"], "w") as fh:
    fh.write(" ".join(sys.argv[1:]))
shutil.copy(os.environ["STAND_IN_CSV"], out)
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    root = tmp_path / "simai"
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "SimAI_analytical"
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    runs = [r for r in simai_runs.load_runs() if r.name == "example_microAllReduce__netA"]
    if not runs:
        pytest.skip("reference runs not found")
    run = runs[0]
    monkeypatch.setenv("STAND_IN_LOG", str(run.log))
    monkeypatch.setenv("STAND_IN_CSV", str(run.endtoend))
    monkeypatch.setenv("STAND_IN_ARGS", str(tmp_path / "args.txt"))
    return root, run, tmp_path


def test_run_in_a_fresh_directory(stand_in, monkeypatch):
    root, run, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", "replay")
    log = io.StringIO()
    result = simai.run(root, run.workload, run.network(), prefix=run.prefix, ratio_dir=simai_runs.RATIO_DIR,
                       log=log, parent=tmp)
    assert result.endtoend_text == run.endtoend.read_text()
    assert log.getvalue() == run.log.read_text()
    assert [c.time_us for c in result.collectives] == ["76", "304"]
    args = (tmp / "args.txt").read_text()
    assert args == f"-w {run.workload.resolve()} -g 8 -g_p_s 8 -n_p_s 8 -nv 360 -nic 48.5 -r {run.prefix}"
    assert not list(tmp.glob("simai-*"))  # the working directory is gone after success


def test_cli_writes_the_times_of_a_simai_run(stand_in, monkeypatch):
    """`commsweep simulate --backend simai --times`: SimAI's summary line and its collectives, summed."""
    from commsweep.orchestration.cli import main
    from commsweep.simulate import endtoend, times

    root, run, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", "replay")
    argv = run.simulate_argv("--backend", "simai", "--simai-root", str(root), "--ratio-dir", str(simai_runs.RATIO_DIR),
                             "--out-dir", str(tmp), "--times", str(tmp / "t.csv"))
    assert main(argv) == 0
    parsed = times.read(tmp / "t.csv")
    simai_summary = endtoend.read(run.endtoend)
    assert parsed.iteration[("total_us", "")] == f"{simai_summary.total:.0f}"
    assert parsed.iteration[("exposed_us", "")] == f"{simai_summary.components['exposed']:.0f}"
    # The run's two forward all-reduces (76 and 304 us, exposed in full, as SimAI prints them), summed.
    assert parsed.collective == {("fwd", "allreduce", "TP"): ("380.000", "380.000")}


@pytest.mark.parametrize("mode, message", [
    ("badflag", "rejected its command line.*Help message"),
    ("fpe", "divided by zero"),
    ("empty", "EMPTY EndToEnd.csv"),
])
def test_run_failures(stand_in, monkeypatch, mode, message):
    root, run, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", mode)
    with pytest.raises(simai.SimaiRunError, match=message) as err:
        simai.run(root, run.workload, run.network(), prefix=run.prefix, ratio_dir=simai_runs.RATIO_DIR, parent=tmp)
    assert "command: cd " in str(err.value)
    assert list(tmp.glob("simai-*"))  # kept for a look


def test_run_timeout(stand_in, monkeypatch):
    root, run, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", "hang")
    with pytest.raises(simai.SimaiRunError, match="did not finish within 0.5 s"):
        simai.run(root, run.workload, run.network(), prefix="x-", ratio_dir=simai_runs.RATIO_DIR, timeout=0.5,
                  parent=tmp)


def test_run_without_binary_or_tables(tmp_path):
    from commsweep.base.errors import ConfigError

    with pytest.raises(ConfigError, match="SimAI_analytical not found"):
        simai.find_binary(tmp_path)
    with pytest.raises(ConfigError, match="nvlink_ratio.csv not found"):
        simai.prepare_workdir(tmp_path)


# -- the real SimAI -------------------------------------------------------------------------


@pytest.mark.skipif(not os.environ.get("SIMAI_ROOT"), reason="set SIMAI_ROOT to a built SimAI to compare with it")
@pytest.mark.parametrize("run", ALL)
def test_real_simai_agrees_with_the_engine(run, tmp_path):
    root = Path(os.environ["SIMAI_ROOT"])
    mode = "reproduce" if run.notes else "fix"
    result = simai.run(root, run.workload, run.network(), prefix=run.prefix, ratio_dir=simai_runs.RATIO_DIR,
                       simai_bugs=mode, parent=tmp_path)
    engine = simulate(wf.read(run.workload), run.network(), load_ratios(simai_runs.RATIO_DIR), prefix=run.prefix,
                      simai_bugs="reproduce")
    assert result.endtoend_text == engine.endtoend
    assert endtoend.parse(result.endtoend_text).complete
