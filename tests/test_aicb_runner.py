"""A user's AICB run leaves nothing behind in the temporary directory, even when killed.

The stand-in for a user's AICB checkout writes the workload with commsweep's emulation of
AICB, except for the setup of global batch KILLER, where it kills the process that runs it
with SIGKILL (as the out-of-memory killer would), so that process cannot clean up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import KILLER, REPO, STAND_IN_AICB
from commsweep.workload import aicb_runner



def stand_in(tmp_path: Path) -> Path:
    root = tmp_path / "aicb"
    (root / "workload_generator").mkdir(parents=True)
    (root / "workload_generator" / "SimAI_training_workload_generator.py").write_text(STAND_IN_AICB)
    return root


def generate(root: Path, temp: Path, global_batch: int, output: Path) -> subprocess.CompletedProcess:
    """``commsweep generate --aicb-root`` in a process of its own, with ``temp`` as its TMPDIR."""
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO / "src")}
    code = "import sys; from commsweep.orchestration.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "generate", "--model", "gpt-7b", "--world_size=16",
                           "--tensor_model_parallel_size=2", f"--global_batch={global_batch}",
                           "--aicb-root", str(root), "-o", str(output)],
                          env=env, capture_output=True, text=True)


def leftovers(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.glob(aicb_runner.PREFIX + "*"))


def test_a_killed_run_s_working_directory_is_removed_by_the_next_run(tmp_path):
    root, temp = stand_in(tmp_path), tmp_path / "tmp"
    temp.mkdir()
    # A live process's directory (this one's) is not the next run's to remove.
    live = temp / f"{aicb_runner.PREFIX}{os.getpid()}-busy"
    live.mkdir()
    assert leftovers(temp) == [live.name]

    killed = generate(root, temp, KILLER, tmp_path / "killed.txt")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    orphan = sorted(set(leftovers(temp)) - {live.name})
    assert len(orphan) == 1, leftovers(temp)  # the killed process could not remove its own

    ok = generate(root, temp, 16, tmp_path / "ok.txt")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert (tmp_path / "ok.txt").read_text().startswith("HYBRID_TRANSFORMER_FWD_IN_BCKWD")
    assert leftovers(temp) == [live.name]  # the orphan and its own directory removed; the live one kept


def test_a_run_that_fails_removes_its_working_directory(tmp_path, monkeypatch):
    root, temp = stand_in(tmp_path), tmp_path / "tmp"
    temp.mkdir()
    (root / "workload_generator" / "SimAI_training_workload_generator.py").write_text("raise SystemExit('no')\n")
    result = generate(root, temp, 16, tmp_path / "out.txt")
    assert result.returncode != 0 and "AICB failed (exit 1): no" in result.stderr
    assert leftovers(temp) == []
