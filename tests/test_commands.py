"""commsweep.orchestration.commands: a job's commands side by side (rule figures) do what
they do in order: the same figures, byte for byte, the same statuses, the same log, and the
same exit status when one of them fails."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from commsweep.analysis import summary
from commsweep.base import paths
from commsweep.orchestration import commands
from test_causes import default_config, run_sweep

FIGURES = ("volume-by-tp", "tp-bytes-by-phase", "exposed-by-group", "exposed-tp-by-overlap")


@pytest.fixture(scope="module")
def summary_csv(tmp_path_factory):
    """The summary of the default sweep's TP 2 points on netA (8 points)."""
    results = tmp_path_factory.mktemp("commands") / "results"
    run_sweep(results, default_config(tp=[2], network=["netA"]))
    out = results / "summary.csv"
    out.write_text(summary.summarize(results / "sweep.csv", paths.PointFiles.under(results)))
    return out


def figure_commands(summary_csv: Path, out: Path) -> list[list[str]]:
    """The figures job's guarded commands, one of them on a table that is not there."""
    argvs = []
    for kind in (*FIGURES, "missing"):
        name = kind.replace("-", "_")
        source = str(summary_csv) if kind != "missing" else str(out / "no-such.csv")
        plot = ["plot", "volume-by-tp" if kind == "missing" else kind, source]
        argvs.append(["guard", "--status", str(out / f"{name}.status"), "--outputs", str(out / f"{name}.png"), "--",
                      *plot, "-o", str(out / f"{name}.png")])
    return argvs


def run(summary_csv: Path, out: Path, processes: int) -> tuple[int, str, dict[str, bytes]]:
    out.mkdir()
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        status = commands.run_all(figure_commands(summary_csv, out), processes=processes)
    files = {p.name: p.read_bytes().replace(str(out).encode(), b"OUT") for p in sorted(out.iterdir())}
    return status, said.getvalue().replace(str(out), "OUT"), files


def test_side_by_side_the_commands_do_what_they_do_in_order(summary_csv, tmp_path):
    in_order = run(summary_csv, tmp_path / "in-order", processes=1)
    side_by_side = run(summary_csv, tmp_path / "side-by-side", processes=2)
    status, log, files = side_by_side
    assert side_by_side == in_order
    # Every figure drawn; the one whose table is missing failed as a step of its own (its
    # guard records it and succeeds: the check fails the run).
    assert status == 0
    assert {f"{kind.replace('-', '_')}.png" for kind in FIGURES} <= set(files)
    assert files["volume_by_tp.png"].startswith(b"\x89PNG")
    assert json.loads(files["missing.status"])["status"] != "ok"
    assert all(json.loads(files[f"{kind.replace('-', '_')}.status"])["status"] == "ok" for kind in FIGURES)
    # The log: each command's line, then what it said, in the commands' order.
    assert [line.split(" -- ")[1].split()[1] for line in log.splitlines() if line.startswith("$ commsweep guard")] \
        == [*FIGURES, "volume-by-tp"]


def test_a_command_that_fails_fails_the_job_after_the_others_ran(tmp_path):
    from conftest import REPO

    argvs = [["sweep", str(tmp_path / "no-such.yaml")], ["sweep", str(REPO / "config" / "config.yaml")]]
    for processes in (1, 2):
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            assert commands.run_all(argvs, processes=processes) == 2
        assert "no-such.yaml: cannot read the file" in said.getvalue()
        assert "64 valid point(s)" in said.getvalue()
