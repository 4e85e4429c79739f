"""Several megatron-core releases: their environments, their traces side by side.

Tests that make a release's environment need pip and a package registry: where pip
cannot install the release they skip, with pip's message. Environments go to the cache
a user's traces use (``versions.cache_root()``), so a machine makes each release once.
Tests marked ``trace`` also run megatron-core on gloo processes (the megatron extra).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commsweep.base.errors import CommsweepError, InputError
from commsweep.trace import compare, records, runner, scale, tally, versions
from commsweep.trace.records import TraceRecord

MISSING = runner.missing_dependencies(versions.Environment("0.8.0", Path("/")))
OLDEST, NEWEST = versions.TRACED[0], versions.newest_traced()


def record(op, phase, module, layer=None, elements=2048, group="TP", size=2, rank=0):
    return TraceRecord(op, records.collective_of(op), group, size, elements, 4 * elements, phase, module, layer,
                       rank=rank)


def two_layer_stage(layer1_fc1=1, rank=0, gather="all_gather_into_tensor", gathers=(100, 300)):
    """One stage's records of a 2-layer model at TP 2 without SP: the embedding's and each
    layer's all-reduces (forward after linear_proj and linear_fc2, backward for linear_fc1),
    then the DP all-gather of two buckets (of ``gathers`` elements, in that order)."""
    op = "all_reduce"
    out = [record(op, "forward", "embedding.word_embeddings", rank=rank)]
    for layer in (0, 1):
        out += [record(op, "forward", f"decoder.layers.{layer}.self_attention.linear_proj", layer, rank=rank),
                record(op, "forward", f"decoder.layers.{layer}.mlp.linear_fc2", layer, rank=rank)]
        out += [record(op, "backward", f"decoder.layers.{layer}.mlp.linear_fc1", layer, rank=rank)] * (
            layer1_fc1 if layer == 1 else 1)
    return out + [record(gather, "after_backward", "distributed.Ddp.start_param_sync", None, n, "DP", 2, rank=rank)
                  for n in gathers]


# -- releases and their folders (no pip) ------------------------------------------------


def test_a_release_is_a_plain_version_number():
    for good in ("0.8.0", "0.19.2", "0.17.0rc0", "1.0"):
        assert versions.check_version(good) == good
    for bad in ("latest", "../0.8.0", "0.8.0; rm -rf", "v0.8.0", "0", ""):
        with pytest.raises(versions.VersionError, match=r"--megatron-core: expected a megatron-core release"):
            versions.check_version(bad)


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(versions.CACHE_ENV, str(tmp_path / "mine"))
    assert versions.cache_root() == tmp_path / "mine"
    monkeypatch.delenv(versions.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert versions.cache_root() == tmp_path / "xdg" / "commsweep" / "megatron-core"


def test_only_a_completed_folder_is_a_release(tmp_path):
    assert versions.cached("0.8.0", root=tmp_path) is None
    folder = tmp_path / "0.8.0"
    (folder / "megatron").mkdir(parents=True)  # a build that was killed before its record
    assert versions.cached("0.8.0", root=tmp_path) is None
    (folder / ".commsweep-environment.json").write_text("{trunc")  # or while writing it
    assert versions.cached("0.8.0", root=tmp_path) is None
    (folder / ".commsweep-environment.json").write_text(json.dumps({"installed": [], "unmet": ["numpy<2 (have 2.4)"]}))
    env = versions.cached("0.8.0", root=tmp_path)
    assert env == versions.Environment("0.8.0", folder) and env.unmet == ["numpy<2 (have 2.4)"]
    assert env.env({"PYTHONPATH": "/x", "A": "b"}) == {"PYTHONPATH": f"{folder}{os.pathsep}/x", "A": "b"}


def test_the_installed_release_needs_no_folder(tmp_path):
    installed = versions.installed_version()
    if installed is None:
        pytest.skip("no megatron-core installed (pip install '.[megatron]')")
    env = versions.environment(installed, root=tmp_path)
    assert env.path is None and env.env({"A": "b"}) == {"A": "b"} and not any(tmp_path.iterdir())


def test_a_bad_release_fails_before_pip(tmp_path):
    result = subprocess.run([sys.executable, "-m", "commsweep", "trace", "--megatron-core", "newest"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, versions.CACHE_ENV: str(tmp_path)})
    assert result.returncode == 2
    assert "commsweep trace: error: --megatron-core: expected a megatron-core release such as 0.8.0" in result.stderr
    # A release that cannot run on a CPU says why, without installing it.
    result = subprocess.run([sys.executable, "-m", "commsweep", "trace", "--megatron-core", "0.7.0"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, versions.CACHE_ENV: str(tmp_path)})
    assert result.returncode == 2
    assert "megatron-core 0.7.0 cannot be traced on the CPU: its transformer block imports Transformer Engine" in result.stderr
    assert not any(tmp_path.iterdir())


# -- making a release's folder with pip ------------------------------------------------


def _make(version: str, root: Path) -> versions.Environment:
    try:
        return versions.environment(version, root=root, log=io.StringIO())
    except versions.PipError as err:
        pytest.skip(f"cannot install megatron-core {version} with pip (no package registry?): {err}")


def test_two_jobs_making_one_release_at_once_make_it_once(tmp_path):
    """Both get the same complete folder; neither leaves a temporary one behind."""
    script = ("import sys; from pathlib import Path; from commsweep.trace import versions\n"
              "try:\n    print(versions.environment('0.8.0', root=Path(sys.argv[1])).path)\n"
              "except versions.PipError as err:\n    print('pip:', err); sys.exit(3)\n")
    jobs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [job.communicate(timeout=600) for job in jobs]
    if any(job.returncode == 3 for job in jobs):
        pytest.skip(f"cannot install megatron-core 0.8.0 with pip (no package registry?): {outs[0][0]}")
    assert [job.returncode for job in jobs] == [0, 0], outs
    assert {out.strip() for out, _ in outs} == {str(tmp_path / "0.8.0")}
    # One job installed it (and said so), the other waited for it.
    assert sum("installing megatron-core 0.8.0" in err for _, err in outs) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".0.8.0.lock", "0.8.0"]
    # 0.8 imports pkg_resources.packaging, gone from setuptools 70: its folder has an older one.
    made = json.loads((tmp_path / "0.8.0" / ".commsweep-environment.json").read_text())
    assert made["installed"] == ["megatron-core==0.8.0", "setuptools<70"]
    assert (tmp_path / "0.8.0" / "pkg_resources").is_dir() and not (tmp_path / "0.8.0" / "torch").exists()


def test_a_build_killed_half_way_is_made_again(tmp_path):
    (tmp_path / ".0.9.0.tmp-dead").mkdir()  # what kill -9 during pip leaves
    (tmp_path / "0.9.0" / "megatron").mkdir(parents=True)  # a folder nobody completed
    env = _make("0.9.0", tmp_path)
    assert env.path == tmp_path / "0.9.0" and (env.path / "megatron" / "core" / "__init__.py").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".0.9.0.lock", "0.9.0"]
    assert versions.cached("0.9.0", root=tmp_path) == env


def test_a_release_pip_cannot_find_is_named(tmp_path):
    with pytest.raises(versions.PipError, match=r"pip could not install megatron-core==0.0.999"):
        versions.environment("0.0.999", root=tmp_path, log=io.StringIO())
    assert [p.name for p in tmp_path.iterdir()] == [".0.0.999.lock"]


# -- tallies of several releases (no torch) ---------------------------------------------


def test_a_tally_counts_each_layer_once_and_names_the_rest_as_the_schedule_does():
    rows = tally.tally("0.16.1", "case", {0: two_layer_stage()})
    got = [(r.phase, r.scope, r.module, r.collective, r.group, r.elements, r.count) for r in rows]
    assert got == [
        ("forward", "layer", "mlp.linear_fc2", "allreduce", "TP", 2048, 1),
        ("forward", "layer", "self_attention.linear_proj", "allreduce", "TP", 2048, 1),
        ("forward", "model", "embedding", "allreduce", "TP", 2048, 1),
        ("backward", "layer", "mlp.linear_fc1", "allreduce", "TP", 2048, 1),
        ("after_backward", "model", "optimizer.param_allgather", "allgather", "DP", 100, 1),
        ("after_backward", "model", "optimizer.param_allgather", "allgather", "DP", 300, 1),
    ]
    with pytest.raises(CommsweepError, match="0.16.1 case: the layers of stage 0 issue different collectives"):
        tally.tally("0.16.1", "case", {0: two_layer_stage(layer1_fc1=2)})


def test_releases_that_agree_have_no_differences_but_their_torch_functions():
    rows = (tally.tally("0.8.0", "c", {0: [record("_all_gather_base", "forward", "embedding")]})
            + tally.tally("0.9.0", "c", {0: [record("_all_gather_base", "forward", "embedding")]})
            + tally.tally("0.10.0", "c", {0: [record("all_gather_into_tensor", "forward", "embedding")]}))
    assert tally.differences(rows) == []
    assert tally.op_changes(rows) == ["allgather: 0.8.0 to 0.9.0: _all_gather_base; 0.10.0: all_gather_into_tensor"]


def test_a_difference_between_releases_is_named_in_a_sentence():
    stages = {v: {"gpt": {0: two_layer_stage(layer1_fc1=1)}} for v in ("0.8.0", "0.16.1")}
    changed = {0: [r for r in two_layer_stage() if "linear_fc1" not in r.module]}  # backward all-reduces gone
    stages["0.19.2"] = {"gpt": changed}
    rows = [r for v, cases in stages.items() for c, st in cases.items() for r in tally.tally(v, c, st)]
    assert [d.sentence() for d in tally.differences(rows)] == [
        "gpt stage 0, backward, per layer, mlp.linear_fc1: allreduce over TP (2 ranks) of 2048 elements, "
        "how many: 0.8.0 to 0.16.1: 1; 0.19.2: 0"]
    text = tally.report(rows, stages)
    assert "releases: 0.8.0, 0.16.1, 0.19.2" in text
    assert "collectives that differ in number, group, size, phase or module: 1" in text


def test_the_same_collectives_in_another_order_are_named():
    stages = {"0.8.0": {"gpt": {0: two_layer_stage(gathers=(300, 100))}}, "0.9.0": {"gpt": {0: two_layer_stage()}},
              "0.10.0": {"gpt": {0: two_layer_stage()}}}
    assert tally.order_changes(stages) == [
        "gpt stage 0: 0.8.0 issues after_backward optimizer.param_allgather allgather DP x300 then after_backward "
        "optimizer.param_allgather allgather DP x100, 0.9.0 after_backward optimizer.param_allgather allgather DP x100 "
        "then after_backward optimizer.param_allgather allgather DP x300"]
    rows = [r for v, cases in stages.items() for c, st in cases.items() for r in tally.tally(v, c, st)]
    assert tally.differences(rows) == []  # the same collectives: only their order moved


def test_trace_versions_reads_trace_files_per_release_folder(tmp_path):
    for release, op in (("0.8.0", "_all_gather_base"), ("0.19.2", "all_gather_into_tensor")):
        (tmp_path / release).mkdir()
        stages = two_layer_stage(gather=op) + two_layer_stage(rank=2, gather=op)  # rank 2: stage 1's first
        (tmp_path / release / "gpt_tp2_pp2_sp0.csv").write_text(records.to_csv(stages))
    files = sorted(str(p) for p in tmp_path.glob("*/*.csv"))
    out, words = tmp_path / "trace_versions.csv", tmp_path / "trace_versions.txt"
    result = subprocess.run([sys.executable, "-m", "commsweep", "trace-versions", *files, "-o", str(out),
                             "--differences", str(words)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = tally.read_csv(out.read_text(), source=str(out))
    assert {(r.megatron_core, r.stage) for r in rows} == {(v, s) for v in ("0.8.0", "0.19.2") for s in (0, 1)}
    assert next(r for r in rows if r.op == "_all_gather_base").megatron_core == "0.8.0"
    assert "collectives that differ in number, group, size, phase or module: 0" in words.read_text()
    assert "allgather: 0.8.0: _all_gather_base; 0.19.2: all_gather_into_tensor" in words.read_text()
    # A trace outside a release's folder is named, with exit status 2.
    (tmp_path / "loose.csv").write_text(records.to_csv(two_layer_stage()))
    result = subprocess.run([sys.executable, "-m", "commsweep", "trace-versions", str(tmp_path / "loose.csv")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "loose.csv: expected the trace of a release" in result.stderr
    with pytest.raises(InputError, match=r"x.csv:2: field 'count': expected a whole number"):
        tally.read_csv(out.read_text().replace(",1\n", ",one\n", 1), source="x.csv")


def test_trace_check_names_each_release_of_a_trace(tmp_path):
    from test_trace import _hand_trace

    files = []
    for release, drop in (("0.8.0", None), ("0.19.2", 7)):
        (tmp_path / release).mkdir()
        files.append(tmp_path / release / "gpt_tp2_pp1_sp0.compare.csv")
        files[-1].write_text(compare.to_csv(compare.compare(_hand_trace(drop=drop))))
    result = subprocess.run([sys.executable, "-m", "commsweep", "trace-check", *map(str, files)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    rows = {r["trace"]: r["differing"] for r in csv.DictReader(io.StringIO(result.stdout))}
    assert rows == {"0.8.0/gpt_tp2_pp1_sp0": "0", "0.19.2/gpt_tp2_pp1_sp0": "1"}


def test_the_sweep_traces_each_listed_release(tmp_path):
    from test_workflow import snakemake

    import sweeps

    cfg = sweeps.write_config(tmp_path, "measured-releases")
    result = snakemake(tmp_path, "--configfile", str(cfg), "--dry-run")
    planned = {line.split()[1].strip(",") for line in result.stdout.splitlines()
               if line.strip().startswith("output: results/traces/")}
    assert planned == {f"results/traces/{v}/{k}.csv" for v in ("0.8.0", "0.19.2")
                       for k in ("gpt_tp1_pp1_sp0", "gpt_tp2_pp1_sp1")}
    assert "rule trace_versions:" in result.stdout and "rule trace_check:" in result.stdout
    cfg.write_text(cfg.read_text().replace("[0.8.0, 0.19.2]", "[latest]"))
    result = snakemake(tmp_path, "--configfile", str(cfg), "--dry-run", check=False)
    assert result.returncode != 0 and "megatron_core" in result.stderr + result.stdout


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_a_sweep_traces_two_releases_and_sets_them_side_by_side(tmp_path):
    """tests/sweeps/measured-releases.yaml for real (4 trace jobs, about 35 s on 2 cores): each
    release's traces match the schedule, the side by side finds no collective that differs,
    both steps record their outcome, and a release dropped later is listed as ignored."""
    import sweeps

    for release in ("0.8.0", "0.19.2"):
        _make(release, versions.cache_root())
    cfg = sweeps.write_config(tmp_path, "measured-releases")
    sweeps.run(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    keys = ("gpt_tp1_pp1_sp0", "gpt_tp2_pp1_sp1")
    check = {r["trace"]: r["differing"] for r in csv.DictReader((results / "trace_check.csv").open())}
    assert check == {f"{v}/{k}": "0" for v in ("0.8.0", "0.19.2") for k in keys}
    table = list(csv.DictReader((results / "trace_versions.csv").open()))
    assert {(r["megatron_core"], r["case"]) for r in table} == {(v, k) for v in ("0.8.0", "0.19.2") for k in keys}
    assert "collectives that differ in number, group, size, phase or module: 0\n" in (
        results / "trace_versions.txt").read_text()
    for step in ("trace_check", "trace_versions"):
        assert json.loads((results / "steps" / f"{step}.status").read_text())["status"] == "ok"
    assert (results / "status.txt").read_text().startswith("all 2 point(s) ok")
    cfg.write_text(cfg.read_text().replace("[0.8.0, 0.19.2]", "[0.19.2]"))
    sweeps.run(tmp_path, "--configfile", str(cfg))
    assert "  results/traces/0.8.0\n" in (results / "status.txt").read_text()
    assert {r["megatron_core"] for r in csv.DictReader((results / "trace_versions.csv").open())} == {"0.19.2"}


# -- with megatron-core: the oldest and the newest traced releases ----------------------

CASES = {  # test_trace's cases: TP 2 and 4, SP off and on, PP 2, DP 2, GPT and LLaMA (GQA)
    "gpt_tp2_sp0": ("gpt-7b", 2, False, 1, 1),
    "gpt_tp2_sp1": ("gpt-7b", 2, True, 1, 1),
    "gpt_tp4_sp1": ("gpt-7b", 4, True, 1, 1),
    "gpt_tp2_sp1_dp2": ("gpt-7b", 2, True, 1, 2),
    "llama-gqa_tp2_pp2_sp1": ("llama-70b", 2, True, 2, 1),
}
WORKAROUNDS = {  # what each release needs on the CPU (trace/compat.py)
    # stale_parallel_state: the PP 2 case follows cases without PP in the same processes.
    "0.8.0": ("layer_spec_norm_default", "param_gather_in_optimizer", "stale_parallel_state"),
    "0.19.2": ("cuda_stream_on_cpu", "paged_stash_without_triton"),
}


@pytest.fixture(scope="module")
def release_traces():
    """Every case traced by the oldest and the newest traced release (two launches each)."""
    from test_trace import point

    setups = {name: scale.scaled_setup(point(m, tp, sp, pp=pp), dp=dp) for name, (m, tp, sp, pp, dp) in CASES.items()}
    out = {}
    for release in (OLDEST, NEWEST):
        env = _make(release, versions.cache_root())
        out[release] = dict(zip(setups, runner.run(list(setups.values()), timeout=900, environment=env)))
    return out


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
@pytest.mark.parametrize("release", [OLDEST, NEWEST])
def test_the_megatron_schedule_matches_each_release_row_by_row(release_traces, release):
    for case, trace in release_traces[release].items():
        assert trace.megatron_core == release
        assert compare.rank_differences(trace) == [], case
        rows = compare.compare(trace)
        assert compare.differences(rows) == [], f"{release} {case}:\n{compare.summary(rows)}"
    assert set().union(*(t.workarounds for t in release_traces[release].values())) == set(WORKAROUNDS[release])


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_the_oldest_and_newest_release_issue_the_same_collectives(release_traces):
    """docs/megatron-versions.md's finding, on the cases CI traces: the same collectives
    per layer and phase; 0.8 calls torch's older names for all-gather and reduce-scatter."""
    stages = {v: {case: tally.stages_of(t) for case, t in traces.items()} for v, traces in release_traces.items()}
    rows = [r for v, cases in stages.items() for case, st in cases.items() for r in tally.tally(v, case, st)]
    assert tally.differences(rows) == []
    assert tally.op_changes(rows) == [
        f"allgather: {OLDEST}: _all_gather_base; {NEWEST}: all_gather_into_tensor",
        f"reducescatter: {OLDEST}: _reduce_scatter_base; {NEWEST}: reduce_scatter_tensor",
    ]
    assert tally.order_changes(stages) == []


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_trace_command_runs_the_release_asked_for(tmp_path):
    _make(OLDEST, versions.cache_root())
    result = subprocess.run(
        [sys.executable, "-m", "commsweep", "trace", "--megatron-core", OLDEST, "--tensor_model_parallel_size", "2",
         "--num_layers", "2", "--hidden_size", "64", "--num_attention_heads", "4", "--seq_length", "16",
         "--micro_batch", "2", "--global_batch", "2", "--vocab_size", "128", "--max_position_embeddings", "16",
         "--compare", str(tmp_path / "c.csv")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert f"megatron-core {OLDEST}; CPU workarounds: layer_spec_norm_default, param_gather_in_optimizer" in result.stderr
    assert "only in" not in result.stderr
    table = [line.split() for line in result.stdout.splitlines()[1:]]  # phase group size op count elements
    assert {(phase, op) for phase, group, _, op, *_ in table if group == "TP"} == {
        ("forward", "all_reduce"), ("backward", "all_reduce")}  # TP 2 without SP
    assert {op for _, group, _, op, *_ in table if group == "DP"} == {"_all_gather_base", "_reduce_scatter_base"}


# -- MoE with the oldest and the newest traced release ----------------------------------

MOE_CASES = {  # scaled Mixtral (every layer MoE, no shared expert): what 0.8.0 can build
    "mixtral_tp1_ep4": ("mixtral", 1, 4),
    "mixtral_tp2_sp1_ep2": ("mixtral", 2, 2),
    # top-1 without a load-balancing loss: 0.8's router gathers its logits all the same
    "mixtral-top1-noaux_tp2_sp1_ep2": ("mixtral-top1-noaux", 2, 2),
}


@pytest.fixture(scope="module")
def moe_release_traces():
    """The MoE cases traced by the oldest and the newest traced release (one launch each)."""
    import dataclasses

    from test_trace_moe import MIXTRAL, point

    models = {"mixtral": MIXTRAL, "mixtral-top1-noaux": dataclasses.replace(
        MIXTRAL, name="mixtral-top1-noaux", moe_topk=1, moe_aux_loss_coeff=0.0)}
    setups = {name: scale.scaled_setup(point(models[model], tp, ep)) for name, (model, tp, ep) in MOE_CASES.items()}
    out = {}
    for release in (OLDEST, NEWEST):
        env = _make(release, versions.cache_root())
        out[release] = dict(zip(setups, runner.run(list(setups.values()), timeout=900, environment=env)))
    return out


def _per_layer(rows: list[tally.Row], release: str, case: str) -> dict[tuple, int]:
    """(phase, module, collective, group) -> count, over the layer collectives of a case."""
    out: dict[tuple, int] = {}
    for r in rows:
        if r.megatron_core == release and r.case == case and r.scope == "layer":
            key = (r.phase, r.module, r.collective, r.group)
            out[key] = out.get(key, 0) + r.count
    return out


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_the_newest_release_matches_the_moe_schedule_and_the_oldest_differs_in_the_moe_layer_only(moe_release_traces):
    for case, trace in moe_release_traces[NEWEST].items():
        rows = compare.compare(trace)
        assert compare.differences(rows) == [], f"{NEWEST} {case}:\n{compare.summary(rows)}"
    assert set().union(*(t.workarounds for t in moe_release_traces[NEWEST].values())) == {
        "cuda_stream_on_cpu", "moe_split_sizes_on_host", "paged_stash_without_triton"}
    assert set().union(*(t.workarounds for t in moe_release_traces[OLDEST].values())) == {
        "experts_as_wide_as_ffn", "layer_spec_norm_default", "moe_router_by_name", "moe_te_functions_none",
        "param_gather_in_optimizer"}

    rows = [r for v, traces in moe_release_traces.items() for case, t in traces.items()
            for r in tally.tally(v, case, tally.stages_of(t))]
    differing = tally.differences(rows)
    assert differing and all(d.key[3] == "layer" and d.key[4].startswith("mlp") for d in differing)
    for case in MOE_CASES:
        old, new = _per_layer(rows, OLDEST, case), _per_layer(rows, NEWEST, case)
        # Tokens out and back; from 0.12 also their routing probabilities (docs/megatron-versions.md).
        assert old[("forward", "mlp", "alltoall", "EP")] == 2 and new[("forward", "mlp", "alltoall", "EP")] == 3
        assert old[("backward", "mlp", "alltoall", "EP")] == 2 and new[("backward", "mlp", "alltoall", "EP")] == 3
    old, new = _per_layer(rows, OLDEST, "mixtral_tp2_sp1_ep2"), _per_layer(rows, NEWEST, "mixtral_tp2_sp1_ep2")
    # 0.8 routes the whole sequence on every TP rank and moves tokens between them with all-to-alls.
    assert old[("forward", "mlp.router", "allgather", "TP")] == 1 and ("forward", "mlp.router", "allgather", "TP") not in new
    assert old[("forward", "mlp", "alltoall", "TP")] == 2 and ("forward", "mlp", "alltoall", "TP") not in new


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
@pytest.mark.parametrize("release", [OLDEST, NEWEST])
def test_the_moe_schedule_of_each_release_matches_its_trace_row_by_row(moe_release_traces, release):
    """`--megatron-version V`: V's schedule issues what V issues (the same traces as above)."""
    for case, trace in moe_release_traces[release].items():
        assert trace.megatron_core == release
        rows = compare.compare(trace, megatron_version=release)
        assert compare.differences(rows) == [], f"{release} {case}:\n{compare.summary(rows)}"
        assert rows == compare.compare(trace)  # a trace is checked against its own release's schedule


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_the_oldest_release_differs_from_the_newest_schedule_in_the_moe_rows_it_changes(moe_release_traces):
    """0.8.0's trace against 0.19.2's schedule, per MoE layer and micro-batch at TP 2 with SP
    and EP 2: the rows --megatron-version 0.8.0 takes out and puts in."""
    trace = moe_release_traces[OLDEST]["mixtral_tp2_sp1_ep2"]
    found: dict[tuple, tuple[int, int]] = {}
    for r in compare.differences(compare.compare(trace, megatron_version=NEWEST)):
        assert r.layer is not None and r.module.startswith(f"decoder.layers.{r.layer}.mlp"), r
        key = (r.phase, r.module.removeprefix(f"decoder.layers.{r.layer}."), r.collective, r.group, r.elements)
        count = found.get(key, (0, 0))
        found[key] = (count[0] + r.schedule_count, count[1] + r.trace_count)
    layers = trace.setup.model.num_layers
    s = trace.setup
    tokens, E, k, h, t = s.micro_batch * s.seq_length, s.model.num_experts, s.model.moe_topk, s.model.hidden_size, s.tp
    per_layer = {key: (n_schedule // layers, n_trace // layers) for key, (n_schedule, n_trace) in found.items()}
    assert per_layer == {
        # the newest's: probabilities over EP and expert TP, the counts over TP and over TP x EP
        ("forward", "mlp", "alltoall", "EP", tokens // t * k): (1, 0),
        ("backward", "mlp", "alltoall", "EP", tokens // t * k): (1, 0),
        ("forward", "mlp", "allgather", "TP", tokens * k): (1, 0),
        ("backward", "mlp", "reducescatter", "TP", tokens * k): (1, 0),
        ("forward", "mlp.router", "allreduce", "TP", E): (1, 0),
        ("forward", "mlp", "allgather", "TP_EP", t * s.ep * E): (1, 0),
        # 0.8.0's: the whole sequence's logits, the counts over EP, tokens across TP
        ("forward", "mlp.router", "allgather", "TP", tokens * E): (0, 1),
        ("backward", "mlp.router", "reducescatter", "TP", tokens * E): (0, 1),
        ("forward", "mlp", "allgather", "EP", s.ep * E): (0, 1),
        ("forward", "mlp", "alltoall", "TP", tokens * h // t): (0, 2),
        ("backward", "mlp", "alltoall", "TP", tokens * h // t): (0, 2),
    }


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_an_moe_model_the_oldest_release_cannot_build_is_refused_in_one_line():
    _make(OLDEST, versions.cache_root())
    result = subprocess.run(
        [sys.executable, "-m", "commsweep", "trace", "--megatron-core", OLDEST, "--model", "qwen1.5-moe-a2.7b",
         "--expert_model_parallel_size", "2", "--scaled"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"commsweep trace: error: megatron-core {OLDEST} cannot trace this model (")
    assert line.endswith("its TransformerConfig has no moe_shared_expert_intermediate_size, moe_shared_expert_gate")
