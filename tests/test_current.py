"""commsweep.orchestration.current: `make run` skips Snakemake only when nothing it reads or
writes changed since it last exited 0; every kind of change starts it again.

The command here is a stand-in for Snakemake that says when it ran (it appends to a file
outside results/); tests/test_make_run.py runs the real one and has Snakemake itself agree
that there was nothing to do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commsweep.base.files import write_text
from commsweep.base.paths import Layout
from commsweep.orchestration import current, provenance

COMMSWEEP = str(Path(sys.executable).with_name("commsweep"))
COMMAND = ["sh", "-c", "echo ran >> ran.txt"]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A project folder after a run: a workflow file, results with a verdict, an AIOB file."""
    monkeypatch.chdir(tmp_path)
    for name in ("SNAKEMAKE_PROFILE", "COMMSWEEP_CONTAINER"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "workflow" / "rules").mkdir(parents=True)
    (tmp_path / "Snakefile").write_text("include: 'workflow/rules/a.smk'\n")
    (tmp_path / "workflow" / "rules" / "a.smk").write_text("rule a:\n    output: 'results/a.txt'\n")
    (tmp_path / "results" / "logs").mkdir(parents=True)
    (tmp_path / "results" / "a.txt").write_text("a\n")
    (tmp_path / "results" / "logs" / "a.log").write_text("")
    (tmp_path / "results" / "status.txt").write_text("all 2 point(s) ok (run abc)\n")
    (tmp_path / "profile.txt").write_text("section\n")
    return tmp_path


def a_run(config: dict | None = None) -> provenance.Run:
    aiob = provenance.External("aiob.file", "profile.txt", provenance.file_digest("profile.txt"))
    return provenance.Run(config=config or {"sweep": {"tp": [2]}}, inputs={"aiob.file": {"p": aiob}},
                          config_files=("sweep.yaml",))


def metadata_of(output: str) -> None:
    """Snakemake's record of ``output`` (a file named by the path in URL-safe base64)."""
    from base64 import urlsafe_b64encode

    folder = Path(".snakemake/metadata")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / urlsafe_b64encode(output.encode()).decode()).write_text("{}")


def sweep_folder(root: str) -> None:
    """The results folder of another sweep: a run.json and a result."""
    Path(root).mkdir(parents=True, exist_ok=True)
    (Path(root) / "run.json").write_text("{}\n")
    (Path(root) / "a.txt").write_text("b\n")


def runs(run=None, command=COMMAND) -> int:
    """How many times the command has run after one more `make run`."""
    assert current.run(command, run or a_run(), "sweep.yaml") == 0
    return len(Path("ran.txt").read_text().splitlines())


def test_nothing_changed_skips_the_command_and_says_so(folder, capsys):
    assert runs() == 1
    assert runs() == 1
    said = capsys.readouterr().err
    assert said == ("commsweep: nothing to do: results/ are as the last run of sweep.yaml left them "
                    "(all 2 point(s) ok (run abc)); the answer: results/answer.md\n")


@pytest.mark.parametrize("change, reason", [
    (lambda: Path("results/a.txt").unlink(), "results changed"),
    (lambda: write_text("results/a.txt", "a\n"), "results changed"),  # same bytes, rewritten
    (lambda: os.utime("results/a.txt", ns=(1, 1)), "results changed"),  # Snakemake's mtime trigger
    (lambda: Path("results/new.txt").write_text(""), "results changed"),
    (lambda: Path("results/logs/a.log").unlink(), "results changed"),
    (lambda: Path(".snakemake/metadata").mkdir(parents=True), None),  # an empty folder: no file
    (lambda: metadata_of("results/a.txt"), "Snakemake's metadata changed"),
    # Of another sweep's results (another folder, or one of its own within results/): not this one's.
    (lambda: metadata_of("elsewhere/a.txt"), None),
    (lambda: (sweep_folder("results/b"), metadata_of("results/b/a.txt")), None),
    (lambda: Path("workflow/rules/a.smk").write_text("rule a:\n    output: 'results/b.txt'\n"), "workflow changed"),
    (lambda: Path("Makefile").write_text("run:\n"), "workflow changed"),
    (lambda: Path("profiles/default").mkdir(parents=True) or Path("profiles/default/config.yaml").write_text(""),
     "workflow changed"),
    (lambda: os.utime("profile.txt", ns=(1, 1)), "external inputs changed"),
    (lambda: os.environ.__setitem__("SNAKEMAKE_PROFILE", "profiles/slurm"), "environment changed"),
    (lambda: (Path(".snakemake/locks").mkdir(parents=True), Path(".snakemake/locks/0.input.lock").write_text("")),
     "Snakemake holds a lock"),
    (lambda: (Path(".snakemake/incomplete").mkdir(parents=True), Path(".snakemake/incomplete/x").write_text("")),
     "an output is marked incomplete"),
])
def test_each_change_starts_the_command(folder, monkeypatch, change, reason):
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "")
    assert runs() == 1
    change()
    assert current.why_not(current.before(COMMAND, a_run()), Layout()) == reason
    # A lock no Snakemake holds is stale: `make run` clears it first (locks.refuse_if_live), and
    # then nothing else changed.
    cleared = reason == "Snakemake holds a lock"
    assert runs() == (1 if reason is None or cleared else 2)
    # Again: the state after the command exited 0 is the one recorded, unless Snakemake marks
    # an output incomplete (then no record is written: it runs every time).
    busy = reason == "an output is marked incomplete"
    assert runs() == (1 if reason is None or cleared else 3 if busy else 2)


def test_another_config_command_or_external_input_starts_the_command(folder):
    assert runs() == 1
    assert current.why_not(current.before(COMMAND, a_run({"sweep": {"tp": [4]}})), Layout()) == "run record changed"
    assert current.why_not(current.before([*COMMAND, "--cores", "4"], a_run()), Layout()) == "command changed"
    Path("profile.txt").write_text("other\n")
    assert current.why_not(current.before(COMMAND, a_run()), Layout()) == "run record, external inputs changed"
    assert runs() == 2


def test_the_package_and_the_installed_packages_are_part_of_it(folder, monkeypatch):
    """commsweep's code (its files' entries) and the installed packages: a change to either
    reruns Snakemake (its code and version triggers, and ours: a rule's command, a digest)."""
    package = folder / "package"
    package.mkdir()
    (package / "mod.py").write_text("x = 1\n")
    monkeypatch.setattr(current, "PACKAGE", package)
    assert runs() == 1
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"")  # compiled: not a change
    assert runs() == 1
    write_text(package / "mod.py", "x = 1\n")
    assert current.why_not(current.before(COMMAND, a_run()), Layout()) == "package changed"
    assert runs() == 2
    monkeypatch.setattr(current, "_installed", lambda: [0, ["snakemake-9.28.0.dist-info"]])
    assert current.why_not(current.before(COMMAND, a_run()), Layout()) == "installed changed"


def test_a_run_that_fails_leaves_no_record(folder):
    assert current.run(["sh", "-c", "echo ran >> ran.txt; exit 3"], a_run(), "sweep.yaml") == 3
    assert not current.RECORD.exists()
    assert runs() == 2
    # A record of an earlier success goes as the command starts: a run cut short leaves none.
    assert current.run(["sh", "-c", f"test ! -e {current.RECORD} && exit 4"], a_run(), "sweep.yaml") == 4
    assert not current.RECORD.exists()


def test_no_record_while_snakemake_holds_a_lock(folder):
    lock = ["sh", "-c", "mkdir -p .snakemake/locks && touch .snakemake/locks/0.input.lock"]
    assert current.run(lock, a_run(), "sweep.yaml") == 0
    assert not current.RECORD.exists()


def test_make_runs_check_first_then_ends_as_snakemake_did(tmp_path):
    """Through the command line, as `make run` calls it: a config mistake exits 2 before the
    command; the command's status is the run's, and Ctrl-C (SIGINT) ends it as it ended the command."""
    (tmp_path / "sweep.yaml").write_text("sweep:\n  tp: [2]\n  global_batch: [16]\n")
    (tmp_path / "bad.yaml").write_text("sweep:\n  tp: [two]\n")

    def make_run(config, *command):
        return subprocess.run([COMMSWEEP, "sweep", "--check", config, "--run-unless-current", *command],
                              cwd=tmp_path, capture_output=True, text=True)

    bad = make_run("bad.yaml", "touch", "ran")
    assert bad.returncode == 2 and "sweep.tp[0]" in bad.stderr and not (tmp_path / "ran").exists()
    assert make_run("sweep.yaml", "sh", "-c", "exit 5").returncode == 5
    interrupted = make_run("sweep.yaml", "sh", "-c", "kill -INT $$")
    assert interrupted.returncode == -signal.SIGINT, interrupted.stderr
    assert make_run("sweep.yaml", "touch", "ran").returncode == 0 and (tmp_path / "ran").exists()
    (tmp_path / "ran").unlink()
    skipped = make_run("sweep.yaml", "touch", "ran")
    assert skipped.returncode == 0 and not (tmp_path / "ran").exists()
    assert "commsweep: nothing to do: results/ are as the last run of sweep.yaml left them" in skipped.stderr


def test_each_results_folder_has_its_own_record_and_another_sweep_leaves_this_one_current(folder):
    """Two sweeps in two folders (the second within the first): a run of either leaves the
    other with nothing to do."""
    other = Layout("results/b")
    sweep_folder("results/b")
    assert runs() == 1
    assert current.run(COMMAND, a_run(), "b.yaml", other) == 0 and len(Path("ran.txt").read_text().split()) == 2
    assert current.record_path(other) != current.record_path(Layout()) and current.record_path(other).exists()
    # The second sweep's run rewrote its folder and its metadata: the first still has nothing to do.
    (Path("results/b") / "a.txt").write_text("changed\n")
    metadata_of("results/b/a.txt")
    assert current.why_not(current.before(COMMAND, a_run()), Layout()) is None
    assert current.why_not(current.before(COMMAND, a_run()), other) == "results, Snakemake's metadata changed"


def test_another_snakemake_running_here_stops_make_run_before_it_starts_one(folder, capsys):
    """A second `make run` while a Snakemake runs in the folder: one line naming it, exit
    status 1, and its command (Snakemake) not started, whatever its lock says."""
    fake = folder / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("import sys\nprint('up', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, str(fake), "--cores", "2"], cwd=folder, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"
        assert current.run(COMMAND, a_run(), "sweep.yaml") == 1
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    said = capsys.readouterr().err
    assert said.startswith(f"commsweep: another Snakemake is running in {folder.resolve()} (PID {proc.pid}: ")
    assert said.endswith("its lock is never broken\n") and said.count("\n") == 1
    assert not Path("ran.txt").exists()
    # Once it ended, the same command runs.
    assert runs() == 1


def test_the_report_is_made_with_the_run_or_alone_only_when_missing_or_stale(folder):
    """`make run`'s report: asked of the same Snakemake when it runs; with nothing to do, made
    alone only when missing or older than the verdict or the report's sources."""
    record = ["sh", "-c", 'echo "$@" >> ran.txt', "sh"]
    assert current.run(record, a_run(), "sweep.yaml", report=True) == 0
    assert Path("ran.txt").read_text().split() == ["--report", "results/report.html", "--report-after-run"]
    Path("results/report.html").write_text("<html>")
    assert current.run(record, a_run(), "sweep.yaml", report=True) == 0  # nothing to do, the report current
    assert len(Path("ran.txt").read_text().splitlines()) == 1
    os.utime("results/report.html", ns=(1, 1))  # older than the verdict
    assert current.run(record, a_run(), "sweep.yaml", report=True) == 0
    assert Path("ran.txt").read_text().splitlines()[1].split() == ["--report", "results/report.html"]
