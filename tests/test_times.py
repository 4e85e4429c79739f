"""A point's times file (`commsweep simulate --times`): the sums the sweep's summary reads.

Checked against the full files of the same run (collectives.csv summed with exact
decimals, EndToEnd.csv's summary line) and against SimAI's own EndToEnd.csv.
"""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import pytest

import simai_runs
from commsweep.base.errors import InputError
from commsweep.orchestration.cli import main
from commsweep.simulate import collectives, endtoend, times

CLEAN = [r for r in simai_runs.params("clean") if r.values[0] is None or r.values[0].name.startswith("gpt7b_ws16_tp")][:4]


def simulate(run, out: Path, *extra: str) -> tuple[Path, Path, Path]:
    paths = out / "e.csv", out / "c.csv", out / "t.csv"
    argv = run.simulate_argv("--ratio-dir", str(simai_runs.RATIO_DIR), "--endtoend", str(paths[0]),
                             "--collectives", str(paths[1]), "--times", str(paths[2]), *extra)
    assert main(argv) == 0
    return paths


def summed(collectives_csv: Path) -> dict[tuple[str, str, str], tuple[Decimal, Decimal]]:
    """The collectives' times per phase, collective and group, summed exactly."""
    out: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    with open(collectives_csv, newline="") as fh:
        for c in csv.DictReader(fh):
            key = (c["phase"], c["collective"], c["group"])
            time, exposed = out.get(key, (Decimal(0), Decimal(0)))
            out[key] = (time + Decimal(c["time_us"]), exposed + Decimal(c["exposed_us"]))
    return out


@pytest.mark.parametrize("run", CLEAN)
def test_times_are_the_sums_of_the_full_files_and_simais_summary(run, tmp_path):
    e2e, coll, path = simulate(run, tmp_path)
    parsed = times.read(path)
    expected = summed(coll)
    assert list(parsed.collective) == list(expected)  # in order of first occurrence
    for key, (time, exposed) in expected.items():
        assert parsed.collective[key] == (f"{time:.3f}", f"{exposed:.3f}")
    # The iteration as SimAI itself printed it (its own EndToEnd.csv of the same run).
    simai = endtoend.read(run.endtoend)
    assert parsed.iteration[("total_us", "")] == f"{simai.total:.0f}"
    assert parsed.iteration[("exposed_us", "TP")] == f"{simai.components['exposed_tp']:.0f}"
    assert parsed.iteration[("compute_us", "")] == f"{simai.components['compute']:.0f}"
    assert {times.ITERATION[k] for k in endtoend.COMPONENTS} | {("total_us", "")} == set(parsed.iteration)
    assert path.read_text().count("\n") == 1 + 2 * len(expected) + len(times.ITERATION)


def test_a_simulation_cut_short_has_no_iteration_rows(tmp_path):
    """A SimAI run that failed inside its report leaves the row lines without the summary
    (reproduce mode keeps them), or nothing: the times file then has the collectives only."""
    runs = [r for r in simai_runs.load_runs() if r.name == "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob__netA"]
    if not runs:
        pytest.skip("reference runs not found")
    e2e, coll, path = simulate(runs[0], tmp_path)
    cut = e2e.read_text().split("\n", 2)[2]  # the row header and the rows
    assert not endtoend.parse(cut).complete
    for text in (cut, ""):
        parsed = times.parse(times.table(coll.read_text(), text))
        assert parsed.iteration == {} and parsed.collective == times.read(path).collective
    assert times.table(",".join(collectives.COLUMNS) + "\n", "") == "quantity,phase,collective,group,us\n"


def test_bad_times_files_name_line_and_field(tmp_path):
    with pytest.raises(InputError, match=r"t.csv:1: expected the header quantity,phase"):
        times.parse("phase,time_us\n", source="t.csv")
    head = "quantity,phase,collective,group,us\n"
    with pytest.raises(InputError, match=r"t.csv:2: expected 5 fields, got 4"):
        times.parse(head + "time_us,fwd,allreduce,TP\n", source="t.csv")
    with pytest.raises(InputError, match=r"t.csv:2: field 'quantity': expected time_us then exposed_us"):
        times.parse(head + "exposed_us,fwd,allreduce,TP,1.000\n", source="t.csv")
    with pytest.raises(InputError, match=r"t.csv:2: field 'quantity': not a quantity of the iteration: 'speed_us'"):
        times.parse(head + "speed_us,,,,1\n", source="t.csv")
    with pytest.raises(InputError, match="time_us of fwd allreduce TP without its exposed_us"):
        times.parse(head + "time_us,fwd,allreduce,TP,1.000\n", source="t.csv")
    ok = times.parse(head + "time_us,fwd,allreduce,TP,1.500\nexposed_us,fwd,allreduce,TP,0.500\ntotal_us,,,,9\n")
    assert ok.collective == {("fwd", "allreduce", "TP"): ("1.500", "0.500")} and ok.iteration == {("total_us", ""): "9"}


def test_bad_collectives_name_line_and_field():
    head = "row,layer,phase,collective,group,group_size,bytes,time_us,exposed_us\n"
    good = "0,attention,fwd,allreduce,TP,2,4096,1.500,1.500\n"
    with pytest.raises(InputError, match=r"c.csv:1: expected the header row,layer"):
        times.table("row,layer\n", "", collectives_source="c.csv")
    with pytest.raises(InputError, match=r"c.csv:3: expected 9 fields, got 8"):
        times.table(head + good + "1,mlp,fwd,allreduce,TP,2,4096,1.5\n", "", collectives_source="c.csv")
    with pytest.raises(InputError, match=r"c.csv:3: field 'exposed_us': expected a time in us, got 'soon'"):
        times.table(head + good + "1,mlp,fwd,allreduce,TP,2,4096,1.500,soon\n", "", collectives_source="c.csv")
    # A quoted layer name (the csv module's path) sums like any other.
    quoted = '2,"mlp, the second",fwd,allreduce,TP,2,4096,0.250,0.125\n'
    assert times.parse(times.table(head + good + quoted, "")).collective == {("fwd", "allreduce", "TP"): ("1.750", "1.625")}
    with pytest.raises(InputError, match=r"c.csv:2: expected 9 fields, got 3"):
        times.table(head + '0,"a, b",fwd\n', "", collectives_source="c.csv")
