"""The landing page (analysis/answer.py): every number on it comes from difference_by_cause.csv."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from commsweep.analysis import answer, causes
from commsweep.base import paths
from commsweep.orchestration import cli, sweep
from test_causes import default_config, run_sweep

GiB = 2**30
UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}
QUANTITY = re.compile(r"([+\u2212]?)(\d[\d,]*(?:\.\d+)?) (bytes|GiB|MiB|KiB|ms)\b")


def derivable(rows: list[causes.Row]) -> tuple[set[int], set[float], set[int]]:
    """Bytes, exposed us and row counts the page may quote: per point, every cause's sum
    (with its + and - apart, and together), any two causes' sums added, and the point's total."""
    byte_values: set[int] = set()
    time_values: set[float] = set()
    counts: set[int] = set()
    by_point: dict[str, list[causes.Row]] = {}
    for r in rows:
        by_point.setdefault(r.point, []).append(r)
    for mine in by_point.values():
        groups: dict[tuple, list[causes.Row]] = {}
        for r in mine:
            sign = (r.bytes > 0) - (r.bytes < 0) or ((r.exposed_us or 0) > 0) - ((r.exposed_us or 0) < 0)
            groups.setdefault((r.cause, sign), []).append(r)
            groups.setdefault((r.cause,), []).append(r)
        groups[("total",)] = mine
        sums = {k: (sum(r.bytes for r in v), sum(r.exposed_us or 0.0 for r in v), sum(r.rows for r in v))
                for k, v in groups.items()}
        for b, us, n in sums.values():
            byte_values.add(b)
            time_values.add(us)
            counts.add(n)
        cause_sums = [v for k, v in sums.items() if len(k) == 1 and k != ("total",)]
        for (b1, u1, _), (b2, u2, _) in itertools.combinations(cause_sums, 2):
            byte_values.add(b1 + b2)
            time_values.add(u1 + u2)
    counts.add(sum(r.rows for r in rows if r.cause == "size_in_none_column"))
    return byte_values, time_values, counts


def check_numbers(text: str, rows: list[causes.Row]) -> int:
    """Every quantity on the page is one of the table's sums; returns how many were checked."""
    byte_values, time_values, counts = derivable(rows)
    checked = 0
    for sign, number, unit in QUANTITY.findall(text):
        value = float(number.replace(",", "")) * (-1 if sign == "\u2212" else 1)
        if unit == "bytes":
            ok = int(value) in byte_values
        elif unit == "ms":
            ok = any(round(t / 1000, 2) == value for t in time_values)
        else:
            ok = any(round(b / UNITS[unit], 2) == value for b in byte_values)
        assert ok, f"{sign}{number} {unit} is not a sum of rows of difference_by_cause.csv"
        checked += 1
    for number in re.findall(r"drops (\d+) all-reduces|hold ([\d,]+) `NONE`", text):
        value = int("".join(number).replace(",", ""))
        assert value in counts, f"{value} is not a row count of difference_by_cause.csv"
        checked += 1
    return checked


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    results = tmp_path_factory.mktemp("answer") / "results"
    run_sweep(results, default_config(tp=[2, 8], network=["netA", "netB"]))
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "difference_by_cause.csv")]) == 0
    return results


def test_every_number_on_the_page_comes_from_the_table(results):
    out = results / "answer.md"
    assert cli.main(["answer", str(results / "difference_by_cause.csv"), "--sweep", str(results / "sweep.csv"),
                     "-o", str(out), "--rst", str(results / "answer.rst")]) == 0
    text = out.read_text()
    rows = causes.read_csv(results / "difference_by_cause.csv")
    assert check_numbers(text, rows) > 30
    # The answer itself, with issue 14's numbers for gpt-7b at TP 2 (netA).
    assert "**ALLREDUCE is what Megatron issues.**" in text
    assert "drops 130 all-reduces per iteration: \u22122,181,038,080 bytes (\u22122.03 GiB)" in text
    assert "`extra_layernorm_grad_allreduce`" in text and "+7,303,725,056 bytes" in text
    assert "network netA" in text and "netB" not in text.split("## Per setting")[1]
    # Both paths of both settings have a verdict.
    assert text.count("AICB default path: net ") == 4 and text.count("AICB AIOB path: net ") == 4


def test_a_wrong_number_is_caught(results):
    rows = causes.read_csv(results / "difference_by_cause.csv")
    page = answer.to_markdown(answer.page(rows, points(results), {}))
    check_numbers(page, rows)
    with pytest.raises(AssertionError, match="not a sum"):
        check_numbers(page.replace("\u22122,181,038,080 bytes", "\u22122,181,038,081 bytes"), rows)
    with pytest.raises(AssertionError, match="not a sum"):
        check_numbers(page.replace("\u22122.03 GiB", "\u22122.04 GiB", 1), rows)


def points(results: Path) -> dict:
    from commsweep.setup.points import read_points

    return {p.point: p for p in read_points(results / "sweep.csv")}


def test_the_rst_page_is_valid_and_embeds_its_figures(results, tmp_path):
    from docutils.core import publish_parts

    rows = causes.read_csv(results / "difference_by_cause.csv")
    png = tmp_path / "plots" / "f.png"
    png.parent.mkdir()
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(300))
    blocks = answer.page(rows, points(results), {"a figure": "plots/f.png"})
    rst = answer.to_rst(blocks, tmp_path)
    html = publish_parts(rst, writer="html", settings_overrides={"halt_level": 2, "report_level": 1})["body"]
    assert "data:image/png;base64," in html and "ALLREDUCE is what Megatron issues." in html
    assert "<code" in html or "<tt" in html
    assert "![a figure](plots/f.png)" in answer.to_markdown(blocks)


def test_a_sweep_without_aiob_says_what_simai_does_with_none(tmp_path):
    results = tmp_path / "results"
    run_sweep(results, default_config(tp=[4], sp=[True], aiob=[False], network=["netA"]))
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "d.csv")]) == 0
    rows = causes.read_csv(results / "d.csv")
    text = answer.to_markdown(answer.page(rows, points(results), {}))
    assert "ALLREDUCE is what Megatron issues" not in text  # no AIOB point to quote
    # It says why, and which keys add the setting it quotes.
    assert "this sweep has none; add to `sweep.sp` (false), `sweep.aiob` (true)." in text
    assert "What SimAI does with NONE:" in text and "`size_in_none_column`" in text
    check_numbers(text, rows)


def test_without_the_axis_keys_and_tables_stay_as_they_were():
    """tp_overlap at simulator.overlap.tp's value is no axis: the default sweep is unchanged."""
    base = default_config()
    same = default_config(tp_overlap=[0])
    a, _ = sweep.points_from_config(base)
    b, _ = sweep.points_from_config(same)
    assert [p.point_key for p in a] == [p.point_key for p in b]
    assert sweep.table_csv(a) == sweep.table_csv(b)
    assert "tp_overlap" not in sweep.table_csv(a).splitlines()[0]
    varied, _ = sweep.points_from_config(default_config(tp_overlap=[0, 0.5]))
    assert len(varied) == 2 * len(a)
    assert varied[1].point_key == a[0].point_key + "_tpo0.5"
    assert ",nic_gbps,tp_overlap," in sweep.table_csv(varied).splitlines()[0]


def test_the_readme_quotes_the_default_sweeps_answer(results):
    """The README's answer: numbers of the default sweep's TP 2 and TP 8 points on netA, as
    difference_by_cause.csv has them (these points are the default sweep's, made the same way)."""
    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    section = readme.split("## The answer (default sweep)")[1].split("\n## ")[0]
    rows = [r for r in causes.read_csv(results / "difference_by_cause.csv") if r.point.endswith("__netA")]
    assert check_numbers(section, rows) >= 10
    assert "\u22122,181,038,080 bytes (\u22122.03 GiB)" in section and "+7,303,725,056 bytes" in section


def test_a_sweep_without_aicb_points_still_has_its_page_and_figures(tmp_path):
    from commsweep.analysis import summary
    from commsweep.analysis.figures import difference_by_cause, exposed_tp_by_overlap

    results = tmp_path / "results"
    run_sweep(results, default_config(tp=[2], schedule=["megatron"], network=["netA"]))
    (results / "summary.csv").write_text(summary.summarize(results / "sweep.csv", paths.PointFiles.under(results)))
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "difference_by_cause.csv")]) == 0
    assert (results / "difference_by_cause.csv").read_text() == ",".join(causes.COLUMNS) + "\n"
    (results / "plots").mkdir()
    difference_by_cause.draw(results / "difference_by_cause.csv", results / "plots" / "difference_by_cause.png")
    exposed_tp_by_overlap.draw(results / "summary.csv", results / "plots" / "exposed_tp_by_overlap.png")
    assert cli.main(["answer", str(results / "difference_by_cause.csv"), "--sweep", str(results / "sweep.csv"),
                     "-o", str(results / "answer.md")]) == 0
    text = (results / "answer.md").read_text()
    # Under its heading, first: what the sweep lacks, and the key that adds it.
    assert text.split("\n\n")[1] == ("**This sweep cannot answer: it has no `aicb` point.** The answer holds the "
                                      "workloads of AICB's two paths against Megatron's; add `aicb` to "
                                      "`sweep.schedule` (beside `megatron`).")
    assert "What SimAI does with NONE:" in text and "## Per setting" not in text
    assert "](plots/difference_by_cause.png)" in text


def test_a_sweep_without_megatron_points_says_it_has_bytes_but_no_time(tmp_path):
    results = tmp_path / "results"
    run_sweep(results, default_config(tp=[2], schedule=["aicb"], network=["netA"]))
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "d.csv")]) == 0
    rows = causes.read_csv(results / "d.csv")
    assert rows and all(r.exposed_us is None for r in rows)
    text = answer.to_markdown(answer.page(rows, points(results), {}))
    assert ("**This sweep has no `megatron` point,** so each AICB point's difference is in bytes only (against "
            "Megatron's schedule) and has no simulated time; add `megatron` to `sweep.schedule` for the exposed "
            "time.") in text
    # The headline quotes the bytes it has, and no time it has not.
    assert "ALLREDUCE is what Megatron issues" in text and "of exposed TP time" not in text
    assert "no simulated time of" not in text
    check_numbers(text, rows)


def test_the_packet_level_section_quotes_its_table_beside_the_analytical_one(results):
    """With packet-level points, the page's section on them (answer.packet_blocks): each of its
    numbers a sum of rows of the packet-level table or, for the number beside it, of the
    analytical one, and their ratio. The packet-level table here is the analytical one with every
    time 1.25 times as long, under the packet-level points' keys: a stand-in for SimAI_simulator's
    runs (the real ones: tests/test_ns3.py, test_real_simulator_answers_config_ns3)."""
    import dataclasses

    from commsweep.setup.points import PointRow

    rows = causes.read_csv(results / "difference_by_cause.csv")
    table = {k: PointRow.from_cells({**p.cells, "simulation": "analytical"}) for k, p in points(results).items()}
    packet = {f"{k}_packet": PointRow.from_cells({**p.cells, "point": f"{k}_packet", "simulation": "packet"})
              for k, p in table.items()}
    packet_rows = [dataclasses.replace(r, point=f"{r.point}_packet",
                                       exposed_us=None if r.exposed_us is None else r.exposed_us * 1.25) for r in rows]
    page = answer.to_markdown(answer.page(rows, {**table, **packet}, {}, packet_rows))
    section = page.split("## Under packet-level simulation (SimAI_simulator)\n")[1]
    # (The section writes what the dropped all-reduces leave out as sizes, without their sign.)
    unsigned = [dataclasses.replace(r, point=f"{r.point}~", bytes=-r.bytes,
                                    exposed_us=None if r.exposed_us is None else -r.exposed_us)
                for r in rows + packet_rows]
    assert check_numbers(section, rows + packet_rows + unsigned) > 10
    assert "At packet level the dropped all-reduces leave out" in section and "1.25x as much at packet level" in section
    assert section.count("AICB AIOB path: net ") == 4
    alone = answer.to_markdown(answer.page(rows, {**table, **packet}, {}, [r for r in packet_rows if "megatron" in r.point]))
    assert "no packet-level pair to answer with" in alone


def test_an_moe_sweep_is_told_that_aicb_refuses_sp_off_not_to_add_it(tmp_path):
    """config/moe.yaml asks for SP off, and AICB refuses MoE without SP (those points are
    skipped): the page must not advise adding what the sweep already asks for."""
    from commsweep.setup.points import read_points, read_skipped
    from test_causes import config_of

    from conftest import REPO

    config = config_of((REPO / "config" / "moe.yaml").read_text())
    config["sweep"].update(model=["qwen1.5-moe-a2.7b"], tp=[2], ep=[2], aiob=[True], network=["netA"])
    results = tmp_path / "results"
    run_sweep(results, config)
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "d.csv")]) == 0
    rows = causes.read_csv(results / "d.csv")
    skipped = read_skipped(results / "sweep.csv")
    assert rows and any(s.values["schedule"] == "aicb" and s.values["sp"] == "False" for s in skipped)
    text = answer.to_markdown(answer.page(rows, points(results), {}, skipped=skipped))
    assert "`sweep.sp`" not in text and "add to" not in text.split("\n\n")[1]
    assert ("it asks for AICB points with SP off, but AICB cannot make them (skipped, see `sweep.csv`): AICB "
            "refuses MoE without sequence parallelism") in text
    # A sweep that never asks for SP off is told to add it (the next run's page says if AICB refuses it).
    asked_for_sp_on_only = {p.point: p for p in read_points(results / "sweep.csv")}
    assert "add to `sweep.sp` (false)" in "\n".join(answer.lacks(rows, asked_for_sp_on_only, None, []))
