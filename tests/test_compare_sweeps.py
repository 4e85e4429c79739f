"""commsweep compare-sweeps: two sweeps' answers side by side, from their results folders."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from commsweep.analysis import compare_sweeps
from commsweep.base.errors import InputError
from commsweep.orchestration import cli

COMMSWEEP = str(Path(sys.executable).with_name("commsweep"))
CAUSES = "point,model,tp,sp,aiob,path,cause,phase,collective,group,rows,bytes,exposed_us,explanation\n"
SUMMARY = "point,status,phase,collective,payload_bytes,sim_total_us,sim_exposed_us,run\n"


def sweep_folder(folder: Path, causes: list[tuple], summary: list[tuple]) -> Path:
    """A results folder with the two files of a sweep's answer, in the pipeline's columns."""
    folder.mkdir(parents=True)
    (folder / "difference_by_cause.csv").write_text(
        CAUSES + "".join(f"{p},gpt-7b,2,False,False,aicb_default,{c},fwd,allreduce,TP,1,{b},{e},why\n"
                         for p, c, b, e in causes))
    (folder / "summary.csv").write_text(
        SUMMARY + "".join(f"{p},{s},fwd,allreduce,{b},{t},{x},abc\n" for p, s, b, t, x in summary))
    return folder


def table(text: str) -> dict[tuple[str, str, str], tuple[str, str, str]]:
    return {(r["point"], r["measure"], r["cause"]): (r["a"], r["b"], r["difference"])
            for r in csv.DictReader(io.StringIO(text))}


def test_each_point_and_cause_side_by_side_with_b_less_a(tmp_path):
    a = sweep_folder(tmp_path / "a", [("p1", "extra", 100, 1.5), ("p1", "extra", 50, 0.5), ("p2", "missing", 10, 0)],
                     [("p1", "ok", 7, 1000, 400), ("p1", "ok", 3, 1000, 400), ("p2", "ok", 1, 900, 100)])
    b = sweep_folder(tmp_path / "b", [("p1", "extra", 120, 3.25), ("p3", "extra", 5, 0)],
                     [("p1", "ok", 10, 1100, 500), ("p2", "failed", 0, 0, 0), ("p3", "ok", 2, 800, 50)])
    answer_a, answer_b = compare_sweeps.read_answer(a), compare_sweeps.read_answer(b)
    rows = table(compare_sweeps.compare(answer_a, answer_b))
    # A cause's rows of a point are summed; B less A where both sweeps have the value.
    assert rows[("p1", "bytes", "extra")] == ("150", "120", "-30")
    assert rows[("p1", "exposed_us", "extra")] == ("2", "3.250", "1.250")
    assert rows[("p1", "payload_bytes", "")] == ("10", "10", "0")
    assert rows[("p1", "sim_total_us", "")] == ("1000", "1100", "100")
    # One sweep only (p2's cause and, failed in B, its totals; p3 new in B): no difference.
    assert rows[("p2", "bytes", "missing")] == ("10", "", "")
    assert rows[("p2", "sim_total_us", "")] == ("900", "", "")
    assert rows[("p3", "bytes", "extra")] == ("", "5", "")
    assert compare_sweeps.describe(answer_a, answer_b) == \
        f"2 point(s) in both sweeps (2 differ), 0 only in {a}, 1 only in {b}"


def test_the_command_writes_the_table_and_says_what_differs(tmp_path, capsys):
    a = sweep_folder(tmp_path / "a", [("p1", "extra", 100, 1)], [("p1", "ok", 7, 1000, 400)])
    out = tmp_path / "compared.csv"
    assert cli.main(["compare-sweeps", str(a), str(a), "-o", str(out)]) == 0
    assert set(table(out.read_text()).values()) == {("100", "100", "0"), ("1", "1", "0"), ("7", "7", "0"),
                                                    ("1000", "1000", "0"), ("400", "400", "0")}
    assert capsys.readouterr().err == f"commsweep compare-sweeps: 1 point(s) in both sweeps (0 differ), 0 only in " \
                                      f"{a}, 0 only in {a}\n"


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "summary.csv").unlink(), "summary.csv: no such file"),
    (lambda f: (f / "difference_by_cause.csv").write_text("point,cause,bytes\n"),
     "difference_by_cause.csv:1: no column exposed_us"),
    (lambda f: (f / "summary.csv").write_text(SUMMARY + "p1,ok,fwd,allreduce,7,soon,400,abc\n"),
     "summary.csv:2: column sim_total_us: not a number: 'soon'"),
])
def test_a_folder_that_is_not_a_sweeps_answer_is_named_with_file_line_and_column(tmp_path, damage, message):
    a = sweep_folder(tmp_path / "a", [("p1", "extra", 100, 1)], [("p1", "ok", 7, 1000, 400)])
    damage(a)
    with pytest.raises(InputError, match=message):
        compare_sweeps.read_answer(a)
    done = subprocess.run([COMMSWEEP, "compare-sweeps", str(a), str(a)], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_make_compare_sweeps_without_two_folders_says_how_to_give_them(tmp_path):
    """`make compare-sweeps` typed alone names make's variables, not the command's A and B."""
    import sweeps

    folder = sweeps.project(tmp_path / "project")
    done = sweeps.make(folder, "-o", ".snakemake/commsweep/compiled", "compare-sweeps", "A=results", check=False)
    assert done.returncode == 2
    assert "make compare-sweeps: give two results folders: make compare-sweeps A=DIR B=DIR" in done.stderr
    assert "usage:" not in done.stderr
