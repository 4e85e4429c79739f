"""What a new user did in the first hour, and what each step told them: every message names
the command or config key that fixes what it reports, and that command works.

The workflow runs here are those of a user in a clone (``sweeps.project``): Snakemake as the
README gives it, ``make report``, the commands the messages suggest, run as printed.
"""

from __future__ import annotations

import json
import re
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sweeps
from commsweep import __version__
from conftest import REPO

COMMSWEEP = str(Path(sys.executable).with_name("commsweep"))

SUGGESTED = "commsweep: the HTML report of these results: "


def in_clone(project, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """A command run in the clone's folder, as a user types it."""
    done = subprocess.run(list(argv), cwd=project, capture_output=True, text=True, env=sweeps.env(), timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def suggested(done: subprocess.CompletedProcess) -> str:
    (line,) = [line for line in done.stderr.splitlines() if line.startswith(SUGGESTED)]
    return line.removeprefix(SUGGESTED)


@pytest.mark.slow
def test_a_run_leaves_no_report_of_results_it_replaced_and_names_the_command_that_makes_its_own(tmp_path):
    project = sweeps.project(tmp_path / "clone")
    (project / "my-sweep.yaml").write_text(sweeps.text("two-points"))
    snakemake = (".venv/bin/snakemake", "--cores", "2", "--configfile", "my-sweep.yaml")
    report = project / "results" / "report.html"

    # The README's form: Snakemake makes no report; its end says how to make one, which works.
    first = in_clone(project, *snakemake)
    assert suggested(first) == "make report CONFIG=my-sweep.yaml"
    in_clone(project, *shlex.split(suggested(first)), "-o", ".venv/.base-installed")
    first_run = json.loads((project / "results" / "run.json").read_text())["run"]
    # Its end says how it went, and where the answer is.
    assert f"commsweep: all 2 point(s) ok (run {first_run}); the answer: results/answer.md\n" in first.stderr
    assert first_run in report.read_text(errors="replace")

    # The same sweep with an override: the tables change, so the report of the first run goes,
    # and the command named carries the override.
    override = "sweep={tp: [2]}"
    second = in_clone(project, *snakemake, "--config", override)
    assert not report.exists()
    command = suggested(second)
    assert command == (".venv/bin/snakemake --cores 2 --configfile my-sweep.yaml --config 'sweep={tp: [2]}' "
                       "--report results/report.html")
    # make report of the config file alone is refused, naming that command, which works.
    refused = in_clone(project, "make", "-o", ".venv/.base-installed", "report", "CONFIG=my-sweep.yaml", check=False)
    assert refused.returncode != 0
    assert "made from another config (my-sweep.yaml with --config sweep={tp: [2]})" in refused.stderr
    assert f"make the report of those results: {command}\n" in refused.stderr
    in_clone(project, *shlex.split(command))
    second_run = json.loads((project / "results" / "run.json").read_text())["run"]
    assert second_run != first_run and second_run in report.read_text(errors="replace")

    # Nothing to do: the report stays, and nothing is suggested.
    third = in_clone(project, *snakemake, "--config", override)
    assert report.exists() and SUGGESTED not in third.stderr


def test_commsweep_version():
    done = subprocess.run([COMMSWEEP, "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"commsweep {__version__}\n", "")


def test_a_reader_that_stops_reading_is_no_error():
    """`commsweep sweep FILE | head -1`: the pipe closes before the output is written (here
    before the command starts, so every run meets it): exit 0, nothing said."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([COMMSWEEP, "sweep", str(REPO / "config" / "moe.yaml")], stdout=write,
                              stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr and "Exception" not in done.stderr


def test_the_note_on_points_that_do_not_fit_names_the_key_that_drops_them():
    from commsweep.setup.config_schema import schema

    done = subprocess.run([COMMSWEEP, "sweep", str(REPO / "config" / "moe.yaml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (note,) = [line for line in done.stderr.splitlines() if "do not fit" in line]
    assert note.endswith("(fits=False in sweep.csv; skip_unfit: true drops them)")
    assert "skip_unfit" in schema()["properties"]


def test_the_count_of_batches_agrees_with_their_names(tmp_path):
    """A dry run of a two-point sweep: its batches are named N-of-8 (a point's batch is a hash
    of its model shard into 8), and the line that counts them says how many jobs run them
    (those that hold a point), not the hash's inner workings."""
    import re

    config = sweeps.write_config(tmp_path, "two-points")
    said = sweeps.run(tmp_path, "-n", "--configfile", str(config))
    names = sorted(set(re.findall(r"results/batches/(\d+-of-\d+)\.json", said.stdout + said.stderr)))
    assert names and {name.split("-of-")[1] for name in names} == {"8"}
    line = next(x for x in said.stderr.splitlines() if x.startswith("commsweep: 2 point(s)"))
    assert line == f"commsweep: 2 point(s), 2 workload(s), 0 AIOB profile(s), in {len(names)} job(s) of about " \
                   f"{round(2 / len(names))} point(s) each"


def test_ctrl_c_in_a_command_says_one_line_and_ends_as_interrupted(tmp_path):
    """Ctrl-C while a command works (here a real SIGINT, sent while it reads the config): one
    line, no traceback, and the status of a process SIGINT ended, as a shell expects."""
    script = ("import os, signal\nfrom commsweep.orchestration import cli, sweep\n"
              "sweep.load_config = lambda path: os.kill(os.getpid(), signal.SIGINT)\n"
              "cli.main(['sweep', 'my-sweep.yaml'])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGINT, "", "commsweep sweep: interrupted\n")


@pytest.mark.parametrize("program", ["commsweep", "python -m commsweep"])
def test_ctrl_c_while_commsweep_starts_says_one_line(tmp_path, program):
    """Ctrl-C while the program imports its modules, before its code runs (a real SIGINT, sent
    when the command table's module is imported): one line and the status of a process SIGINT
    ended, not a traceback through the imports."""
    hook = ("import builtins, os, signal\n"
            "real = builtins.__import__\n"
            "def hook(name, *args, **kwargs):\n"
            "    if name == 'stages':\n"
            "        builtins.__import__ = real\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = hook\n")
    if program == "commsweep":  # as the console script .venv/bin/commsweep
        script = tmp_path / "commsweep"
        script.write_text(hook + "from commsweep.orchestration.cli import main\nmain(['sweep', 'my.yaml'])\n")
        argv = [sys.executable, str(script)]
    else:
        run = "import runpy\nrunpy.run_module('commsweep', run_name='__main__', alter_sys=True)\n"
        argv = [sys.executable, "-c", hook + run]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == \
        (-signal.SIGINT, "", "commsweep: interrupted while starting; nothing was changed\n")


def test_every_commands_help_speaks_to_users(capsys):
    """`commsweep COMMAND --help` names options, files and pages, not the package's modules."""
    from commsweep.orchestration import cli

    for name in ["", *cli.COMMANDS]:
        with pytest.raises(SystemExit) as end:
            cli.main([name, "--help"] if name else ["--help"])
        assert end.value.code == 0
        said = " ".join(capsys.readouterr().out.split())
        assert not re.search(r"commsweep\.[a-z_]+\.|\b[a-z_]+\.py\b|issue #?\d", said), (name, said)


def test_the_command_line_page_covers_every_command_and_plot_kind():
    """docs/cli.md says it lists every command: each subcommand has its row, and the plot row
    names every kind of figure."""
    from commsweep.analysis.figures.names import KINDS as PLOTS
    from commsweep.orchestration import cli

    page = (REPO / "docs" / "cli.md").read_text()
    rows = {line.split("`")[1]: line for line in page.splitlines() if line.startswith("| `")}
    assert set(cli.COMMANDS) <= set(rows), sorted(set(cli.COMMANDS) - set(rows))
    assert [kind for kind in PLOTS if f"`{kind}`" not in rows["plot"]] == []
    assert "--version" in page


def test_docs_and_sources_cite_public_sources_not_the_maintainers_reference_folder():
    """A user's clone has no ../shared/reference: what the project says comes from cites the
    public repositories (and commits, files) instead. The tests may still read it."""
    places = ["README.md", "Makefile", "Snakefile", "pyproject.toml", "src", "docs", "workflow", "config", "bench",
              "profiles"]
    found = []
    for place in places:
        for path in [REPO / place] if (REPO / place).is_file() else sorted((REPO / place).rglob("*")):
            if path.is_file() and path.suffix not in (".pyc", ".png", ".csv"):
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(REPO)}:{n}" for n, line in enumerate(text.splitlines(), 1)
                          if "shared/reference" in line]
    assert found == []


def test_make_report_of_a_run_that_did_not_finish_says_so_and_names_the_command_that_finishes_it(tmp_path):
    """After Ctrl-C, the run record is there but not its end (results/status.txt): the report
    would fail in Snakemake on a missing figure, after a screen of warnings."""
    from commsweep.orchestration import provenance, sweep

    config = tmp_path / "my-sweep.yaml"
    config.write_text(sweeps.text("two-points"))
    loaded = sweep.load_config(config)
    points, _ = sweep.points_from_config(loaded)
    run = provenance.Run(config=loaded, inputs=provenance.check_external(loaded, points), config_files=("my-sweep.yaml",))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "run.json").write_text(run.record())
    argv = [COMMSWEEP, "sweep", "--check", "my-sweep.yaml", "--made", "results/run.json"]
    refused = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stderr == (f"commsweep sweep: error: run {run.id} of my-sweep.yaml did not finish (no "
                              "results/status.txt, which its end writes): finish it first (make run CONFIG=my-sweep.yaml)\n")
    (tmp_path / "results" / "status.txt").write_text(f"all 2 point(s) ok (run {run.id})\n")
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.endswith(f"run {run.id}\n"), done.stderr


def test_a_sweep_whose_every_point_is_dropped_says_why_before_any_run(tmp_path):
    config = tmp_path / "my-sweep.yaml"
    config.write_text("sweep:\n  tp: [3]\nskip_invalid: true\n")
    done = subprocess.run([COMMSWEEP, "sweep", str(config)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.startswith(f"commsweep sweep: error: {config}: sweep: no valid sweep point: all 1 "
                                  "combination(s) dropped (skip_invalid, skip_unfit), e.g. [model=gpt-7b, "
                                  "world_size=16, tp=3,")
    assert "tp=3 does not divide the 32 attention heads" in done.stderr


def test_a_table_of_several_rows_per_point_given_as_the_sweep_is_refused(tmp_path, capsys):
    """`--sweep results/summary.csv` (the summary, several rows per point, where sweep.csv is
    meant) is refused naming the line, not read as a sweep of repeated points."""
    from commsweep.orchestration import cli

    config = sweeps.write_config(tmp_path, "two-points")
    assert cli.main(["sweep", str(config), "--table", str(tmp_path / "sweep.csv")]) == 0
    header, first, *rest = (tmp_path / "sweep.csv").read_text().splitlines()
    (tmp_path / "summary.csv").write_text("\n".join([header, first, first, *rest]) + "\n")
    capsys.readouterr()
    assert cli.main(["summarize", "--sweep", str(tmp_path / "summary.csv"), "-o", str(tmp_path / "s.csv")]) == 2
    said = capsys.readouterr().err
    assert f"summary.csv:3: field 'point': point {first.split(',')[0]} again (first at line 2)" in said
    assert not (tmp_path / "s.csv").exists()


def test_make_report_of_a_folder_without_a_run_names_the_command_with_that_folder(tmp_path, capsys, monkeypatch):
    """`make report CONFIG=my.yaml RESULTS=other` before any run there: the command it names runs
    the sweep into that folder, RESULTS included."""
    from commsweep.orchestration import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text(sweeps.text("two-points"))
    assert cli.main(["sweep", "my.yaml", "--check", "--results", "other", "--made"]) == 2
    assert capsys.readouterr().err == ("commsweep sweep: error: other/run.json: no run record: run the sweep first "
                                       "(make run CONFIG=my.yaml RESULTS=other)\n")
