"""The sweep-wide comparison and the figures, on a sweep made of the AICB reference workloads.

The fixture lays out a results directory as the pipeline does: the 16 reference files as
the aicb points (default and AIOB paths, TP 1/2/4/8, SP off/on), the Megatron schedule of
the same setups, both on the two reference networks; volumes, audits, simulations (the
built-in engine with SimAI's ratio tables, as the simulate rule runs it) and the summary
table made by the package. The Megatron points on network B are left unsimulated, as when
a simulation is missing.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import shlex
from pathlib import Path

import pytest

from commsweep.analysis import audit, audit_csv, compare, summary, timeline, volumes
from commsweep.analysis.figures import canvas, exposed_by_group, plot, tables, tp_bytes_by_phase, volume_by_tp
from commsweep.base import paths
from commsweep.orchestration import cli
from commsweep.setup.arguments import add_aiob_arguments, add_training_arguments, setup_from_args
from commsweep.setup.points import TABLE_COLUMNS
from commsweep.simulate import run as simulate_run
from commsweep.simulate.stage import SimulateJob
from commsweep.simulate.collectives import csv_field
from commsweep.simulate.engine import load_ratios
from commsweep.workload import format as wf
from commsweep.workload import megatron

from conftest import REFERENCE

NETWORKS = {
    "netA": {"gpus_per_server": 8, "nics_per_server": 8, "nvlink_gbps": 360, "nic_gbps": 48.5},
    "netB": {"gpus_per_server": 8, "nics_per_server": 4, "nvlink_gbps": 200, "nic_gbps": 25},
}


def endtoend_total(path: Path) -> float:
    """The Total time of a SimAI EndToEnd.csv's summary line (us)."""
    with open(path, newline="") as fh:
        fields = list(csv.reader(fh))[1]
    return float(re.match(r"\s*([-0-9.e+]+)", fields[-1]).group(1))


def manifest_args(stem: str) -> str:
    """The AICB arguments of a reference workload, from the reference MANIFEST.csv."""
    with open(REFERENCE / "aicb" / "workloads" / "MANIFEST.csv", newline="") as fh:
        return next(r["command_args"] for r in csv.DictReader(fh) if r["file_name"] == stem + ".txt")


def _setup(args: str):
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    add_aiob_arguments(parser)
    return setup_from_args(parser.parse_args(shlex.split(args)))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    manifest = REFERENCE / "aicb" / "workloads" / "MANIFEST.csv"
    if not manifest.exists():
        pytest.skip(f"reference material not found at {manifest.parent} (set COMMSWEEP_REFERENCE to its folder)")
    results = tmp_path_factory.mktemp("sweep") / "results"
    with open(manifest, newline="") as fh:
        entries = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
    points = []
    for entry in entries:
        setup = _setup(entry["command_args"])
        aiob = entry["path"] == "aiob"
        setting = f"gpt7b_ws16_tp{setup.tp}_sp{int(setup.sp)}"
        variants = [("aicb", aiob, wf.read(REFERENCE / "aicb" / "workloads" / entry["file_name"]))]
        if not aiob:
            variants.append(("megatron", False, megatron.schedule(setup).workload()))
        for schedule, on, workload in variants:
            key = f"{setting}_{schedule}" + ("_aiob" if on else "")
            wf.write(workload, paths.workload_file(results, key))
            paths.volumes_file(results, key).write_text(volumes.to_csv(volumes.tally(workload)))
            for net, fields in NETWORKS.items():
                point = f"{key}__{net}"
                findings = audit.audit(workload, setup, time_us=audit.collective_time(
                    **fields, ratios=load_ratios(REFERENCE / "simai" / "ratio")))
                paths.point_dir(results, point).mkdir(parents=True, exist_ok=True)
                paths.audit_file(results, point).write_text(audit.to_csv(findings))
                points.append({
                    "point": point, "workload": key, "profile": "", "model": "gpt-7b", "world_size": 16,
                    "tp": setup.tp, "pp": 1, "ep": 1, "sp": setup.sp, "aiob": on, "schedule": schedule,
                    "micro_batch": 1, "global_batch": setup.global_batch, "seq_length": 2048, "recompute": False,
                    "network": net, "dp": setup.dp, "ga": setup.num_microbatches, **fields,
                })
                if schedule == "aicb" or net == "netA":
                    simulate_run.run(SimulateJob(
                        workload=str(paths.workload_file(results, key)), gpus=16,
                        gpus_per_server=fields["gpus_per_server"], nics_per_server=fields["nics_per_server"],
                        nvlink_gbps=str(fields["nvlink_gbps"]), nic_gbps=str(fields["nic_gbps"]), prefix=f"{point}-",
                        ratio_dir=str(REFERENCE / "simai" / "ratio"),
                        endtoend=str(paths.endtoend_file(results, point)),
                        collectives=str(paths.collectives_file(results, point)),
                        times=str(paths.times_file(results, point)),
                    ))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*TABLE_COLUMNS, "status"], lineterminator="\n")
    writer.writeheader()
    for p in points:
        writer.writerow({**p, "status": "ok"})
    (results / "sweep.csv").write_text(buf.getvalue())
    (results / "summary.csv").write_text(summary.summarize(results / "sweep.csv", paths.PointFiles.under(results)))
    return results


def _tables_text(results: Path) -> tuple[str, str, str, str]:
    """(findings.csv, comparison.csv, verdicts.csv, findings_by_kind.csv)."""
    findings = io.StringIO()
    tables = compare.compare(results / "sweep.csv", results / "summary.csv", paths.PointFiles.under(results), findings)
    return findings.getvalue(), tables.comparison, tables.verdicts, tables.by_kind


def _points(results: Path) -> dict[str, dict[str, str]]:
    with open(results / "sweep.csv", newline="") as fh:
        return {r["point"]: r for r in csv.DictReader(fh)}


def _tables(results: Path):
    """The tables as rows; each finding joined with its point's parameters (sweep.csv)."""
    findings, comparison, verdicts, _ = _tables_text(results)
    points = _points(results)
    joined = [{**points[f["point"]], **f} for f in csv.DictReader(io.StringIO(findings))]
    return joined, list(csv.DictReader(io.StringIO(comparison))), list(csv.DictReader(io.StringIO(verdicts)))


def test_summary_times_equal_the_full_simulation_files(sweep):
    """The summary reads only each point's times.csv; its times are those of the point's
    collectives.csv (summed exactly) and EndToEnd.csv (its summary line), the files the
    summary table was made from before."""
    from decimal import Decimal

    from commsweep.simulate import endtoend

    rows = list(csv.DictReader(open(sweep / "summary.csv", newline="")))
    simulated = 0
    for point in {r["point"] for r in rows}:
        mine = [r for r in rows if r["point"] == point]
        e2e = paths.endtoend_file(sweep, point)
        if not e2e.exists():
            assert all(r[c] == "" for r in mine for c in summary.SIM_COLUMNS)
            continue
        simulated += 1
        parsed = endtoend.read(e2e)
        sums: dict[tuple, list[Decimal]] = {}
        with open(paths.collectives_file(sweep, point), newline="") as fh:
            for c in csv.DictReader(fh):
                entry = sums.setdefault((c["phase"], c["collective"], c["group"]), [Decimal(0), Decimal(0)])
                entry[0] += Decimal(c["time_us"])
                entry[1] += Decimal(c["exposed_us"])
        for r in mine:
            assert r["sim_total_us"] == f"{parsed.total:.0f}"
            for column, key in summary.SIM_COMPONENTS.items():
                assert r[column] == f"{parsed.components[key]:.0f}"
            if r["phase"] == "pp":
                assert (r["time_us"], r["exposed_us"]) == ("", r["sim_pp_us"])
            else:
                time, exposed = sums.get((r["phase"], r["collective"], r["group"]), (None, None))
                assert (r["time_us"], r["exposed_us"]) == ((f"{time:.3f}", f"{exposed:.3f}") if time is not None
                                                           else ("", ""))
    assert simulated == 40  # 16 AICB workloads x 2 networks, the 8 Megatron workloads on network A


def test_findings_table_holds_every_audit_row_with_its_point(sweep):
    text = _tables_text(sweep)[0]
    lean = list(csv.DictReader(io.StringIO(text)))
    assert tuple(lean[0]) == compare.FINDINGS_COLUMNS  # the point's key and the audit's columns only
    expected = []
    for point in _points(sweep):
        path = paths.audit_file(sweep, point)
        expected += [{"point": point, **dict(zip(audit.COLUMNS, row.cells()))} for row in audit_csv.read(path)]
    assert lean == expected and len(lean) > 0
    findings, _, _ = _tables(sweep)
    assert {f["schedule"] for f in findings} == {"aicb"}  # the Megatron points audit clean


def test_findings_by_kind_sum_every_finding_of_a_point(sweep):
    findings, _, verdicts = _tables(sweep)
    by_kind = list(csv.DictReader(io.StringIO(_tables_text(sweep)[3])))
    assert tuple(by_kind[0]) == compare.BY_KIND_COLUMNS
    sums: dict[tuple, list] = {}
    for f in findings:
        entry = sums.setdefault((f["point"], f["kind"]), [0, 0, 0, 0.0])
        delta = int(f["delta_bytes"])
        entry[0] += 1
        entry[1] += -delta if delta < 0 else 0
        entry[2] += delta if delta > 0 else 0
        entry[3] += float(f["delta_us"] or 0)
    assert {(r["point"], r["kind"]) for r in by_kind} == set(sums) and len(by_kind) == len(sums)
    for r in by_kind:
        n, missing, extra, us = sums[(r["point"], r["kind"])]
        assert (int(r["findings"]), int(r["missing_bytes"]), int(r["extra_bytes"])) == (n, missing, extra)
        assert float(r["delta_us"]) == pytest.approx(us, abs=1e-3 * n)
    # ... and per point they add up to the verdicts' totals.
    for v in verdicts:
        rows = [r for r in by_kind if r["point"] == v["point"]]
        assert sum(int(r["findings"]) for r in rows) == int(v["findings"] or 0)
        assert sum(int(r["missing_bytes"]) for r in rows) == int(v["missing_bytes"] or 0)
        assert sum(int(r["extra_bytes"]) for r in rows) == int(v["extra_bytes"] or 0)


def test_findings_by_kind_reads_back_typed(sweep, tmp_path):
    """read_by_kind, the figure's reader, gives back what by_kind_csv wrote; a cell it would not
    write names its line and column."""
    text = _tables_text(sweep)[3]
    path = tmp_path / "findings_by_kind.csv"
    path.write_text(text)
    columns, rows = compare.read_by_kind(path)
    assert columns == compare.BY_KIND_COLUMNS
    written = list(csv.DictReader(io.StringIO(text)))
    assert [(r.point.point, r.variant, r.kind, str(r.findings), str(r.missing_bytes), str(r.extra_bytes))
            for r in rows] == [(w["point"], w["variant"], w["kind"], w["findings"], w["missing_bytes"],
                                w["extra_bytes"]) for w in written]
    assert all(r.variant == r.point.variant and isinstance(r.point.tp, int) for r in rows)
    header, first, *rest = text.splitlines(keepends=True)
    path.write_text(header + first.replace(f",{rows[0].kind},{rows[0].findings},", f",{rows[0].kind},many,") + "".join(rest))
    with pytest.raises(compare.InputError, match=rf"{re.escape(str(path))}:2: field 'findings': expected a number"):
        compare.read_by_kind(path)


def test_a_damaged_audit_is_an_error_naming_its_line(sweep, tmp_path):
    import shutil

    copy = tmp_path / "results"
    shutil.copytree(sweep, copy)
    point = next(p for p in _points(copy) if "aicb" in p)
    path = paths.audit_file(copy, point)
    lines = path.read_text().split("\n")
    cells = lines[2].split(",")
    cells[audit.COLUMNS.index("delta_bytes")] = "lots"
    lines[2] = ",".join(cells)
    path.write_text("\n".join(lines))
    with pytest.raises(compare.InputError, match=rf"{re.escape(str(path))}:3: field 'delta_bytes': expected an integer"):
        compare.compare(copy / "sweep.csv", copy / "summary.csv", paths.PointFiles.under(copy), io.StringIO())
    # A layer name that must be quoted takes the csv module's path; the row is copied as it was.
    cells = lines[1].split(",")
    cells[audit.COLUMNS.index("layer")] = 'a "quoted", layer'
    lines[1] = ",".join(csv_field(c) for c in cells)
    lines[2] = lines[1]
    path.write_text("\n".join(lines))
    out = io.StringIO()
    compare.compare(copy / "sweep.csv", copy / "summary.csv", paths.PointFiles.under(copy), out)
    rows = [r for r in csv.DictReader(io.StringIO(out.getvalue())) if r["point"] == point]
    assert rows[0]["layer"] == rows[1]["layer"] == 'a "quoted", layer'
    assert [list(r.values())[1:] for r in rows] == [r.cells() for r in audit_csv.read(path)]


def test_audit_bytes_add_up_to_the_volume_difference_with_megatron(sweep):
    """Two independent paths to one number: the audit's summed delta_bytes of an AICB point
    equals its payload minus the Megatron point's payload in the comparison table."""
    findings, comparison, _ = _tables(sweep)
    audited: dict[tuple, int] = {}
    for f in findings:
        if f["network"] == "netA":
            key = (f["tp"], f["sp"], f["aiob"])
            audited[key] = audited.get(key, 0) + int(f["delta_bytes"])
    diff: dict[tuple, int] = {}
    for r in comparison:
        if r["quantity"] == "payload_bytes" and r["network"] == "netA":
            for column, aiob in (("default_minus_megatron", "False"), ("aiob_minus_megatron", "True")):
                key = (r["tp"], r["sp"], aiob)
                diff[key] = diff.get(key, 0) + int(r[column])
    assert len(diff) == 16 and diff == audited


def test_comparison_of_the_two_aicb_paths_shows_the_dropped_backward_allreduces(sweep):
    _, comparison, _ = _tables(sweep)
    u = 2 * 1 * 2048 * 4096
    row = next(r for r in comparison if r["quantity"] == "count" and r["tp"] == "4" and r["sp"] == "False"
               and r["network"] == "netA" and (r["phase"], r["collective"], r["group"]) == ("ig", "allreduce", "TP"))
    # Default path: 32 layers x 2 + the embedding; AIOB path: layernorm + embedding_grads; Megatron: 64 + output layer.
    assert (int(row["aicb_default"]), int(row["aicb_aiob"]), int(row["megatron"])) == (66, 2, 65)
    assert int(row["aiob_minus_default"]) == -64
    payload = next(r for r in comparison if r["quantity"] == "payload_bytes" and r["tp"] == "4" and r["sp"] == "False"
                   and r["network"] == "netA" and (r["phase"], r["collective"], r["group"]) == ("fwd", "allreduce", "TP"))
    assert int(payload["megatron"]) == 65 * u + 3 * 4 * 2048  # embedding + 2 per layer, and cross entropy


def test_time_rows_come_from_the_summary_and_stay_empty_where_a_simulation_is_missing(sweep):
    _, comparison, _ = _tables(sweep)
    totals = [r for r in comparison if r["quantity"] == "total_us" and r["group"] == ""]
    assert len(totals) == 16  # 8 settings x 2 networks
    for r in totals:
        assert r["aicb_default"] and r["aicb_aiob"]
        assert float(r["aiob_minus_default"]) == pytest.approx(float(r["aicb_aiob"]) - float(r["aicb_default"]))
        if r["network"] == "netA":
            assert float(r["default_minus_megatron"]) == pytest.approx(float(r["aicb_default"]) - float(r["megatron"]))
        else:
            assert r["megatron"] == "" and r["default_minus_megatron"] == ""
    groups = {r["group"] for r in comparison if r["quantity"] == "exposed_us" and r["phase"] == ""}
    assert groups == {"", "TP", "DP", "EP", "DP_EP", "PP"}
    # A clean SimAI run (TP 2, network A) and the engine agree on the AICB point's total.
    stem = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob"
    r = next(r for r in totals if (r["tp"], r["sp"], r["network"]) == ("2", "True", "netA"))
    assert float(r["aicb_aiob"]) == pytest.approx(endtoend_total(REFERENCE / "simai" / "endtoend" / f"{stem}__netA-EndToEnd.csv"), abs=1)
    # The collectives' own times: the AIOB path's missing backward all-reduces cost time.
    ig = next(r for r in comparison if r["quantity"] == "time_us" and (r["tp"], r["sp"], r["network"]) == ("4", "False", "netA")
              and (r["phase"], r["collective"], r["group"]) == ("ig", "allreduce", "TP"))
    assert float(ig["megatron"]) > 0
    # ... and the audit's delta_us of those collectives adds up to the same difference.
    findings, _, _ = _tables(sweep)
    audited = sum(float(f["delta_us"] or 0) for f in findings
                  if (f["tp"], f["sp"], f["aiob"], f["network"]) == ("4", "False", "True", "netA") and f["phase"] == "ig"
                  and "allreduce" in (f["expected_collective"], f["found_collective"]))
    assert float(ig["aiob_minus_megatron"]) == pytest.approx(audited, abs=0.01)


def test_verdicts_name_the_path_that_matches_and_what_each_misses(sweep):
    _, _, verdicts = _tables(sweep)
    assert tuple(verdicts[0]) == compare.VERDICT_COLUMNS
    by = {(v["tp"], v["sp"], v["variant"], v["network"]): v for v in verdicts}
    megatron_rows = [v for v in verdicts if v["variant"] == "megatron"]
    assert megatron_rows and all(v["matches_megatron"] == "yes" and v["findings"] == "0" for v in megatron_rows)
    v = by[("2", "False", "aicb_aiob", "netA")]
    assert v["matches_megatron"] == "no"
    assert int(v["misses_bytes"]) == int(v["missing_bytes"]) + int(v["extra_bytes"]) > 0
    assert v["verdict"].startswith("no AICB path matches Megatron; closest: ")
    assert "the AICB default path misses" in v["verdict"] and "the AICB AIOB path misses" in v["verdict"]
    # One verdict per setting: every point of the setting carries the same sentence.
    assert by[("2", "False", "megatron", "netA")]["verdict"] == v["verdict"]


def test_cli_compare_writes_the_four_tables(sweep, tmp_path):
    outs = [tmp_path / n for n in ("findings.csv", "comparison.csv", "verdicts.csv", "findings_by_kind.csv")]
    argv = ["compare", "--sweep", str(sweep / "sweep.csv"), "--summary", str(sweep / "summary.csv"),
            "--results", str(sweep), "--findings", str(outs[0]), "--comparison", str(outs[1]), "--verdicts", str(outs[2]),
            "--by-kind", str(outs[3])]
    assert cli.main(argv) == 0
    for out, text in zip(outs, _tables_text(sweep)):
        assert out.read_text() == text
    # A failed comparison leaves the findings already written in place (no partial file).
    bad = tmp_path / "summary.csv"
    bad.write_text("point,phase\nx,fwd\n")
    before = outs[0].read_bytes()
    assert cli.main([*argv[:4], str(bad), *argv[5:]]) == 2
    assert outs[0].read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_summary_without_volume_columns_is_refused(sweep, tmp_path):
    bad = tmp_path / "summary.csv"
    bad.write_text("point,phase\nx,fwd\n")
    with pytest.raises(compare.InputError, match=rf"{re.escape(str(bad))}:1: not a summary table: expected the columns"):
        compare.compare(sweep / "sweep.csv", bad, paths.PointFiles.under(sweep))


def test_the_summary_reader_names_the_line_and_field_of_a_bad_number(sweep, tmp_path):
    """summary.read gives back what summarize wrote, typed; a cell it would not write is an
    InputError naming its line and column."""
    text = (sweep / "summary.csv").read_text()
    table = summary.read(sweep / "summary.csv")
    assert table.columns == tuple(text.partition("\n")[0].split(","))
    assert len(table.rows) == text.count("\n") - 1 and all(r.ok and r.volume is not None for r in table.rows)
    row = table.rows[0]
    assert isinstance(row.volume.payload_bytes, int) and isinstance(row.iteration["sim_total_us"], int)
    lines = text.split("\n")
    cells = lines[3].split(",")
    cells[table.columns.index("payload_bytes")] = "12x"
    bad = tmp_path / "summary.csv"
    bad.write_text("\n".join([*lines[:3], ",".join(cells), *lines[4:]]))
    with pytest.raises(compare.InputError, match=rf"{re.escape(str(bad))}:4: field 'payload_bytes': expected a number"):
        summary.read(bad)


# -- figures ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["volume-by-tp", "tp-bytes-by-phase", "exposed-by-group", "audit-by-kind"])
def test_figures_are_png_and_deterministic(sweep, tmp_path, kind):
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    source = sweep / "summary.csv"
    if kind == "audit-by-kind":
        source = tmp_path / "findings_by_kind.csv"
        source.write_text(_tables_text(sweep)[3])
    assert cli.main(["plot", kind, str(source), "-o", str(a)]) == 0
    plot.plot(kind, source, b)
    assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert a.read_bytes() == b.read_bytes()


def test_exposed_figure_without_times_says_so(sweep, tmp_path):
    """A summary of points not simulated (their time columns empty, as summarize writes them
    without a times.csv): the figure says so instead of drawing empty bars."""
    rows = list(csv.DictReader(open(sweep / "summary.csv", newline="")))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, **{c: "" for c in summary.SIM_COLUMNS}} for r in rows)
    plain = tmp_path / "summary.csv"
    plain.write_text(buf.getvalue())
    assert all(not r.iteration and r.time_us is None for r in summary.read(plain).rows)
    said, drawn = tmp_path / "said.png", tmp_path / "drawn.png"
    exposed_by_group.draw(plain, said)
    canvas.message_figure(drawn, "No simulated times in the summary table:\nno point of this sweep was simulated.")
    assert said.read_bytes() == drawn.read_bytes()
    exposed_by_group.draw(sweep / "summary.csv", drawn)
    assert said.read_bytes() != drawn.read_bytes()


def test_timeline_lays_out_simai_rows_in_execution_order(sweep, tmp_path):
    stem = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob"
    e2e = REFERENCE / "simai" / "endtoend" / f"{stem}__netA-EndToEnd.csv"
    workload = wf.read(paths.workload_file(sweep, "gpt7b_ws16_tp2_sp1_aicb_aiob"))
    rows = timeline.read_endtoend(e2e)
    setup = _setup(manifest_args(stem))
    units = audit.segment(workload, setup.layers_per_stage)
    events = timeline.events(workload, rows, units)
    # Every microsecond of the rows is laid out once, back to back.
    assert sum(e.duration_us for e in events) == pytest.approx(
        sum(r.fwd_compute + r.wg_compute + r.ig_compute + r.fwd_exposed + r.wg_exposed + r.ig_exposed for r in rows))
    assert all(a.start_us + a.duration_us == pytest.approx(b.start_us) for a, b in zip(events, events[1:]))
    # SimAI's summary: total time = comp + exposed comm (pp = 1, no bubble).
    total = endtoend_total(e2e)
    assert events[-1].start_us + events[-1].duration_us == pytest.approx(total, abs=len(rows))
    # Forward runs layer 0 first; backward ends with the once-per-iteration rows (DP sync).
    first_layer = next(e for e in events if e.lane.startswith("layer"))
    assert first_layer.lane == "layer 0" and not first_layer.backward
    assert events[-1].lane == timeline.ITERATION_LANE and events[-1].what == "DP"
    out = tmp_path / "t.png"
    argv = ["timeline", str(paths.workload_file(sweep, "gpt7b_ws16_tp2_sp1_aicb_aiob")), str(e2e),
            *shlex.split(manifest_args(stem)),
            "--audit", str(paths.audit_file(sweep, "gpt7b_ws16_tp2_sp1_aicb_aiob__netA")), "-o", str(out)]
    assert cli.main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_refuses_a_simulation_of_another_workload(sweep, tmp_path, capsys):
    e2e = REFERENCE / "simai" / "endtoend" / "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob__netA-EndToEnd.csv"
    workload = paths.workload_file(sweep, "gpt7b_ws16_tp2_sp0_aicb_aiob")
    argv = ["timeline", str(workload), str(e2e), "--world_size=16", "--tensor_model_parallel_size=2",
            "--global_batch=8", "--num_layers=32", "--hidden_size=4096", "--num_attention_heads=32", "-o",
            str(tmp_path / "t.png")]
    assert cli.main(argv) == 2
    assert "not its simulation" in capsys.readouterr().err


def test_timeline_simulates_with_the_engine_as_simai_did(sweep, tmp_path):
    """Without an EndToEnd.csv the timeline simulates the workload itself: the row times
    equal those of SimAI's own run on the same workload and network."""
    from commsweep.setup.network import Network
    from commsweep.simulate.engine import load_ratios

    stem = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob"
    workload = wf.read(paths.workload_file(sweep, "gpt7b_ws16_tp2_sp1_aicb_aiob"))
    simai = timeline.read_endtoend(REFERENCE / "simai" / "endtoend" / f"{stem}__netA-EndToEnd.csv")
    ratio_dir = REFERENCE / "simai" / "ratio"  # SimAI's efficiency tables, which its run used
    ours = timeline.simulate(workload, Network(gpus=16, **NETWORKS["netA"]), load_ratios(ratio_dir))
    # Every row: its name and all 15 fields as printed.
    assert [(r.name, r.text) for r in ours] == [(r.name, r.text) for r in simai]
    args = manifest_args(stem)
    out = tmp_path / "t.png"
    argv = ["timeline", str(paths.workload_file(sweep, "gpt7b_ws16_tp2_sp1_aicb_aiob")), *shlex.split(args),
            "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5", "--ratio_dir", str(ratio_dir), "-o", str(out)]
    assert cli.main(argv) == 0 and out.stat().st_size > 0


def test_time_columns_are_the_simulate_stages_per_point_columns():
    assert compare.time_columns(["point", "time_us", "exposed_us", "sim_total_us", "sim_tp_us"]) == {
        "sim_total_us": ("total_us", ""), "sim_tp_us": ("exposed_us", "TP"),
    }
    assert compare.time_columns(["point", "phase"]) == {}


def test_setting_verdicts_in_words():
    clean, off = compare.Totals(), compare.Totals(findings=2, missing_bytes=2**30, extra_bytes=2**29)
    moved = compare.Totals(findings=1, group_findings=1)
    assert compare.setting_verdict({"aicb_default": clean, "aicb_aiob": clean}) == (
        "the AICB default path matches Megatron; the AICB AIOB path matches Megatron")
    assert compare.setting_verdict({"aicb_default": off, "aicb_aiob": clean, "megatron": clean}) == (
        "the AICB AIOB path matches Megatron; the AICB default path misses 1.5 GiB (1 GiB short, 0.5 GiB extra)")
    text = compare.setting_verdict({"aicb_default": off, "aicb_aiob": moved})
    assert text.startswith("no AICB path matches Megatron; closest: the AICB AIOB path;")
    assert "1 on a wrong group or phase" in text
    assert compare.setting_verdict({"aicb_aiob": None}).startswith("not audited")
    assert compare.setting_verdict({"megatron": clean}) == "no AICB path in this sweep"
    assert "a defect of the schedule or the audit" in compare.setting_verdict({"megatron": off})


def test_figures_leave_failed_points_out(tmp_path):
    """A failed point's one summary row has no numbers: the figures must not count it as 0 bytes."""
    from commsweep.analysis import summary

    columns = summary.COLUMNS
    point = dict(model="gpt-7b", world_size="16", tp="2", pp="1", ep="1", sp="False", aiob="False", schedule="megatron",
                 micro_batch="1", global_batch="16", seq_length="2048", recompute="False", network="netA", dp="8",
                 ga="2", gpus_per_server="8", nics_per_server="8", nvlink_gbps="360", nic_gbps="48.5")
    ok = {c: "" for c in columns}
    ok.update(point, point="p1__netA", workload="p1", status="ok", phase="fwd", collective="allreduce",
              group="TP", group_size="2", count="64", payload_bytes=str(64 * 2**24), wire_bytes_per_rank=str(64 * 2**24))
    failed = {c: "" for c in columns}
    failed.update(point, point="p2__netA", workload="p2", status="failed: generate: arguments: boom")

    def write(rows, name):
        path = tmp_path / name
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        return path

    with_failed, without = write([ok, failed], "with.csv"), write([ok], "without.csv")
    assert list(tables.read_summary(with_failed)["point"]) == ["p1__netA"]
    for draw in (tp_bytes_by_phase.draw, volume_by_tp.draw):
        draw(with_failed, tmp_path / "a.png")
        draw(without, tmp_path / "b.png")
        assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes(), draw.__module__
