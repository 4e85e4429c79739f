"""The difference from Megatron by cause (analysis/causes/), on real workloads and simulations.

``run_sweep`` makes a sweep's per-point results the way the rules do (the same commsweep
commands with the same arguments, in-process, without Snakemake), so these tests run in
seconds; tests/test_answer_workflow.py checks the same on a real Snakemake run.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import yaml

import sweeps
from commsweep.aiob.backends import profile_setup
from commsweep.analysis import causes
from commsweep.analysis.audit_csv import AuditRow
from commsweep.base import paths
from commsweep.base.errors import InputError
from commsweep.orchestration import cli, sweep
from commsweep.setup.arguments import to_commsweep_argv
from conftest import REPO

GiB = 2**30


def run_sweep(results: Path, config: dict) -> list[dict[str, str]]:
    """Every per-point result of a sweep, made by the commands the rules run; the points table."""
    from commsweep.setup.config_schema import validate_config
    from commsweep.simulate.stage import cp_exchange_of, fsdp_gathers_of

    validate_config(config)
    points, invalid = sweep.points_from_config(config)
    results.mkdir(parents=True, exist_ok=True)
    (results / "sweep.csv").write_text(sweep.table_csv(points, invalid))

    def main(*argv: str) -> None:
        assert cli.main([str(a) for a in argv]) == 0, argv

    done: set[str] = set()
    for p in points:
        workload = paths.workload_file(results, p.workload_key)
        if p.workload_key not in done:
            done.add(p.workload_key)
            workload.parent.mkdir(parents=True, exist_ok=True)
            extra = []
            if p.aiob:
                profile = results / "aiob" / f"{p.profile_key}.txt"
                if not profile.exists():
                    profile.parent.mkdir(parents=True, exist_ok=True)
                    main("profile", "--backend", "roofline", *to_commsweep_argv(profile_setup(p.setup)),
                         "--gpu", p.gpu, "-o", profile)
                extra = ["--aiob_enable", f"--comp_filepath={profile}"]
            if p.schedule == "megatron":
                extra += ["--pp-stage", config["generator"]["megatron_pp_stage"]]
            main("generate", *to_commsweep_argv(p.setup), "--schedule", p.schedule, *extra, "-o", workload)
            main("volumes", workload, "--format", "csv", "-o", paths.volumes_file(results, p.workload_key))
        out = paths.point_dir(results, p.point_key)
        out.mkdir(parents=True, exist_ok=True)
        net = ["-g_p_s", p.net.gpus_per_server, "-n_p_s", p.net.nics_per_server, "-nv", p.net.nvlink_gbps,
               "-nic", p.net.nic_gbps]
        overlap = dict(config["simulator"]["overlap"])
        if p.tp_overlap is not None:
            overlap["tp"] = p.tp_overlap
        priced = [x for flag, spec in (("--cp-exchange", cp_exchange_of(p)),
                                       ("--fsdp-gathers", fsdp_gathers_of(p, config))) if spec for x in (flag, spec)]
        main("simulate", "-w", workload, "-g", p.world_size, *net, "-r", f"{p.point_key}-", *priced,
             *(x for name, value in overlap.items() for x in (f"-{name}_o", value)),
             "--endtoend", out / "EndToEnd.csv", "--collectives", out / "collectives.csv", "--times", out / "times.csv")
        main("audit", workload, *to_commsweep_argv(p.setup), "--pp-stage", config["generator"]["megatron_pp_stage"],
             *net, "--format", "csv", "-o", paths.audit_file(results, p.point_key))
    with open(results / "sweep.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["status"] == "ok"]


def config_of(text: str) -> dict:
    from commsweep.setup.config_schema import validate_config

    config = yaml.safe_load(text)
    validate_config(config)
    return config


def default_config(**axes) -> dict:
    """The default sweep (config/config.yaml) with some axes replaced."""
    config = config_of((REPO / "config" / "config.yaml").read_text())
    config["sweep"].update(axes)
    return config


def by_cause(found: list[causes.PointCauses], point: str) -> dict[str, list[causes.CauseRow]]:
    out: dict[str, list[causes.CauseRow]] = {}
    for pc in found:
        if pc.point.point == point:
            for r in pc.rows:
                out.setdefault(r.cause, []).append(r)
    return out


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """The default sweep's TP 2 points on netA (8 points), made as the rules make them."""
    results = tmp_path_factory.mktemp("tp2") / "results"
    run_sweep(results, default_config(tp=[2], network=["netA"]))
    return results


POINT = "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb16_seq2048_aicb_aiob__netA"


def test_the_aiob_path_drops_130_backward_allreduces_at_tp2(tp2):
    """Issue 14's numbers: gpt-7b, TP 2, SP off, the AIOB path, from the default sweep's point."""
    found = causes.sweep_causes(tp2 / "sweep.csv", paths.PointFiles.under(tp2))
    mine = by_cause(found, POINT)
    [missing] = mine["missing_bwd_tp_allreduce"]
    assert (missing.phase, missing.collective, missing.group) == ("ig", "allreduce", "TP")
    assert missing.rows == 130 and missing.bytes == -2_181_038_080 == -130 * 16 * 2**20
    [layernorm] = mine["extra_layernorm_grad_allreduce"]
    [embedding] = mine["extra_embedding_grad_allreduce"]
    assert layernorm.bytes + embedding.bytes == 7_303_725_056
    assert layernorm.rows == embedding.rows == 1
    # Time: a dropped collective takes its Megatron time off; the extra ones add theirs.
    assert missing.exposed_ns < 0 < layernorm.exposed_ns
    assert "unattributed" not in mine


def test_causes_agree_with_commsweep_audit(tp2, tmp_path):
    """The same bytes as `commsweep audit` run by hand on the point's workload."""
    point = next(p for p in sweep.points_from_config(default_config(tp=[2], network=["netA"]))[0]
                 if p.point_key == POINT)
    out = tmp_path / "audit.csv"
    assert cli.main(["audit", str(paths.workload_file(tp2, point.workload_key)), *to_commsweep_argv(point.setup),
                     "--format", "csv", "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    dropped = [r for r in rows if r["kind"] == "missing" and r["phase"] == "ig"
               and (r["expected_collective"], r["expected_group"]) == ("allreduce", "TP")]
    assert len(dropped) == 130 and sum(int(r["delta_bytes"]) for r in dropped) == -2_181_038_080
    extra = [r for r in rows if r["kind"] == "extra" and r["phase"] == "ig" and r["found_collective"] == "allreduce"]
    assert sum(int(r["delta_bytes"]) for r in extra) == 7_303_725_056


def point_totals(results: Path, point: dict[str, str], partner: dict[str, str]) -> tuple[int, int]:
    """A point's difference from its Megatron point, read from its volumes and times files."""
    from commsweep.analysis import volumes
    from commsweep.simulate import times

    def payload(p):
        return sum(v.payload_bytes for v in volumes.read_csv(paths.volumes_file(results, p["workload"]).read_text()))

    def exposed(p):
        t = times.read(paths.times_file(results, p["point"]))
        return sum(times.ns(e) for _, e in t.collective.values()) + times.ns(t.iteration[("exposed_us", "PP")])

    return payload(point) - payload(partner), exposed(point) - exposed(partner)


def check_sums(results: Path, opposite: tuple[str, ...] = ()) -> list[causes.PointCauses]:
    """Every AICB point's causes add up to its difference from Megatron, in bytes and time.
    ``opposite``: causes whose fewer bytes may take more time (SimAI's fixed latency of a
    message under 1 MiB, simulate/bandwidth.py, exceeds its time of a larger one)."""
    points = {p["point"]: p for p in run_points(results)}
    found = causes.sweep_causes(results / "sweep.csv", paths.PointFiles.under(results))
    assert found
    for pc in found:
        partner = points[pc.partner]
        want_bytes, want_ns = point_totals(results, pc.point.cells, partner)
        assert sum(r.bytes for r in pc.rows) == want_bytes, pc.point.point
        assert sum(r.exposed_ns for r in pc.rows) == want_ns, pc.point.point
        assert not [r for r in pc.rows if r.cause == "unattributed"], pc.point.point
        # Never netted: a row is all in excess or all short.
        for r in pc.rows:
            if r.cause in opposite:
                continue
            assert r.bytes >= 0 or r.exposed_ns <= 0
            assert r.bytes <= 0 or r.exposed_ns >= 0
    return found


def run_points(results: Path) -> list[dict[str, str]]:
    with open(results / "sweep.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["status"] == "ok"]


def test_causes_add_up_on_every_point_of_the_default_settings(tp2):
    found = check_sums(tp2)
    assert {pc.point.aiob for pc in found} == {True, False}
    # Like with like: each path against the Megatron point with its own aiob.
    for pc in found:
        assert pc.partner.replace("_megatron", "_aicb") == pc.point.point


@pytest.mark.parametrize("name", ["causes-llama-pp2-recompute", "causes-tp8-last-stage", "causes-rope-recompute"])
def test_causes_add_up_on_other_setups(tmp_path, name):
    run_sweep(tmp_path / "results", config_of(sweeps.text(name)))
    found = check_sums(tmp_path / "results")
    slugs = {r.cause for pc in found for r in pc.rows}
    # Every finding of these setups has a named cause (no fallback by the audit's kind).
    assert slugs <= set(causes.CAUSES) - {s for s in causes.CAUSES if s.startswith("other_")}


def test_without_a_megatron_point_bytes_stand_and_time_is_unknown(tmp_path):
    results = tmp_path / "results"
    run_sweep(results, default_config(tp=[2], sp=[False], aiob=[True], schedule=["aicb"], network=["netA"]))
    [pc] = causes.sweep_causes(results / "sweep.csv", paths.PointFiles.under(results))
    assert pc.partner is None and pc.total_bytes is None
    assert all(r.exposed_ns is None for r in pc.rows)
    assert sum(r.bytes for r in pc.rows if r.cause == "missing_bwd_tp_allreduce") == -2_181_038_080
    text = causes.to_csv([pc])
    assert ",missing_bwd_tp_allreduce,ig,allreduce,TP,130,-2181038080,," in text


def test_the_table_reads_back(tp2, tmp_path):
    out = tmp_path / "difference_by_cause.csv"
    assert cli.main(["causes", "--sweep", str(tp2 / "sweep.csv"), "--results", str(tp2), "-o", str(out)]) == 0
    rows = causes.read_csv(out)
    assert out.read_text().splitlines()[0] == ",".join(causes.COLUMNS)
    assert {r.path for r in rows} == {"aicb_default", "aicb_aiob"}
    assert all(r.explanation == causes.CAUSES[r.cause].explanation for r in rows)
    bad = tmp_path / "bad.csv"
    bad.write_text(out.read_text().replace(",130,", ",many,", 1))
    with pytest.raises(InputError, match=r"bad.csv:\d+"):
        causes.read_csv(bad)
    # sp and aiob are True or False, as the points table writes them (not any other text as False)
    header, first, *rest = out.read_text().splitlines(keepends=True)
    cells = next(csv.reader([first]))
    cells[causes.COLUMNS.index("sp")] = "no"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    bad.write_text(header + buf.getvalue() + "".join(rest))
    with pytest.raises(InputError, match=r"bad.csv:2: bad value \(expected True or False, got 'no'\)"):
        causes.read_csv(bad)


# -- the classification itself ---------------------------------------------------------------


def item(unit: str, phase: str, kind: str, expected: str = "", found: str = "", exp_bytes=None, found_bytes=None,
         row: int | None = 0) -> AuditRow:
    ec, eg = expected.split() if expected else ("", "")
    fc, fg = found.split() if found else ("", "")
    return AuditRow(row, unit, phase, kind, ec, eg, exp_bytes, fc, fg, found_bytes)


def test_a_units_first_missing_backward_allgather_is_its_weight_gradient_regather():
    items = [
        item("mb0/layer0/attention", "ig", "missing", "allgather TP", exp_bytes=8),
        item("mb0/layer0/attention", "ig", "missing", "allgather TP", exp_bytes=8),
        item("mb0/layer0/mlp", "ig", "missing", "allgather TP", exp_bytes=8),
        item("mb0/embedding", "ig", "missing", "allgather TP", exp_bytes=8),
    ]
    assert causes.classify(items) == ["missing_wgrad_allgather", "missing_bwd_tp_allgather",
                                      "missing_wgrad_allgather", "missing_bwd_tp_allgather"]


def test_the_layernorm_allreduce_is_named_at_tp1_too():
    items = [
        item("iteration/layernorm_grads", "ig", "extra", found="allreduce TP", found_bytes=10),
        item("iteration/layernorm_grads", "ig", "size1_group", found="allreduce TP", found_bytes=10),
        item("mb0/layer0/attention", "fwd", "size1_group", found="allreduce TP", found_bytes=10),
        item("mb0/layer0/attention", "ig", "group", "allreduce TP", "allreduce DP", 4, 4),
    ]
    assert causes.classify(items) == ["extra_layernorm_grad_allreduce", "extra_layernorm_grad_allreduce",
                                      "size1_group", "other_group"]


def test_a_pipeline_stage_without_the_module_names_it():
    items = [item("mb0/embedding", "fwd", "extra", found="allreduce TP", found_bytes=8),
             item("mb0/loss", "fwd", "extra", found="allreduce TP", found_bytes=8),
             item("mb0/embedding", "ig", "extra", found="allreduce TP", found_bytes=8)]
    assert causes.classify(items, pp=2) == ["module_on_every_stage", "module_on_every_stage",
                                            "extra_embedding_bwd_allreduce"]
    assert causes.classify(items, pp=1) == ["other_extra", "other_extra", "extra_embedding_bwd_allreduce"]


def test_every_cause_is_named_and_explained_once():
    slugs = [slug for slug, _ in causes.RULES] + list(causes.FALLBACK.values())
    assert set(slugs) <= set(causes.CAUSES)
    for slug, cause in causes.CAUSES.items():
        assert cause.slug == slug and cause.label and cause.explanation.endswith(".")


def test_a_findings_cause_does_not_depend_on_the_order_of_the_findings():
    """Rules see one finding and a context no rule changes: the causes of the findings in
    another order are the same causes, in that order."""
    items = [
        item("mb0/layer0/attention", "ig", "missing", "allgather TP", exp_bytes=8, row=3),
        item("mb0/layer0/attention", "ig", "missing", "allgather TP", exp_bytes=8, row=5),
        item("mb0/layer0/mlp", "ig", "missing", "allgather TP", exp_bytes=8, row=7),
        item("mb0/layer0/mlp", "ig", "missing", "reducescatter TP", exp_bytes=8, row=7),
        item("mb0/embedding", "fwd", "missing", "reducescatter TP", exp_bytes=8, row=0),
        item("mb0/embedding", "fwd", "extra", found="allreduce TP", found_bytes=8, row=0),
    ]
    named = causes.classify(items)
    assert named[:2] == ["missing_wgrad_allgather", "missing_bwd_tp_allgather"]
    assert causes.classify(items[::-1]) == named[::-1]
    assert causes.classify(items[2:] + items[:2]) == named[2:] + named[:2]


def test_the_catalog_is_checked_when_read_naming_the_line_and_field():
    from commsweep.analysis.causes import catalog

    text = (catalog._source()).read_text(encoding="utf-8")
    assert list(catalog.parse(text)) == list(causes.CAUSES)
    first = "- slug: missing_bwd_tp_allreduce\n"
    line = text.splitlines().index(first.strip()) + 1
    second = "- slug: extra_layernorm_grad_allreduce\n"
    twice = text.splitlines().index(second.strip()) + 1
    with pytest.raises(InputError, match=rf"catalog.yaml:{twice}: field 'slug': 'missing_bwd_tp_allreduce' is not a new"):
        catalog.parse(text.replace(second, first), "catalog.yaml")
    with pytest.raises(InputError, match=rf"catalog.yaml:{line}: field 'labels': unknown field"):
        catalog.parse(text.replace(first, first + "  labels: two\n"), "catalog.yaml")
    no_label = text.replace(first + "  label: backward TP all-reduces dropped\n", first)
    with pytest.raises(InputError, match=rf"catalog.yaml:{line}: field 'label': expected text"):
        catalog.parse(no_label, "catalog.yaml")
