"""The Megatron schedule of one megatron-core release (``--megatron-version``), restated
here from the releases' traces (docs/megatron-versions.md) independently of
``workload/megatron_releases.py`` and ``megatron_moe.py``. The traces themselves are
checked against each release's schedule row by row in test_versions.py."""

from __future__ import annotations

import dataclasses
import itertools
import re
import subprocess
import sys

import pytest
import yaml

from commsweep.analysis import audit
from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.trace import versions
from commsweep.workload import format as wf
from commsweep.workload import megatron, megatron_releases

from conftest import REPO
from test_megatron_moe import MIXED, SHARED, TINY_MOE, measured, moe_volumes, without

NEWEST = megatron_releases.NEWEST
# One release per behaviour the traces showed, and a patch release of a traced minor.
RELEASES = ("0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.3", "0.16.1", "0.19.2", "0.12.0")
NO_AUX = dataclasses.replace(TINY_MOE, name="tiny-moe-noaux", moe_aux_loss_coeff=0.0)
AUX = dataclasses.replace(TINY_MOE, name="tiny-moe-aux", moe_aux_loss_coeff=0.01)
UNGATED = dataclasses.replace(SHARED, name="tiny-moe-shared-ungated", moe_shared_expert_gate=False)


def minor(version: str) -> tuple[int, int]:
    return tuple(int(p) for p in version.split(".")[:2])


def builds(setup: TrainingSetup, version: str) -> bool:
    """What each release can build (its TransformerConfig and parallel state)."""
    m = setup.model
    if minor(version) < (0, 10) and (m.moe_shared_expert_intermediate_size or m.moe_layer_freq != 1
                                      or setup.expert_tp != setup.tp):
        return False
    return not (minor(version) < (0, 16) and m.moe_shared_expert_intermediate_size and m.moe_shared_expert_gate)


def release_delta(s: TrainingSetup, stage: int, version: str) -> tuple[dict, dict]:
    """(taken, added): the (phase, collective, group) -> (count, bytes) that ``version``'s
    MoE layers issue less and more than the newest release's (``moe_volumes``)."""
    m = s.model
    t, ep, e, k, E = s.tp, s.ep, s.expert_tp, m.moe_topk, m.num_experts
    n = s.num_microbatches * len([layer for layer in range(stage * s.layers_per_stage, (stage + 1) * s.layers_per_stage)
                                  if layer % m.moe_layer_freq == 0])
    u = 2 * s.micro_batch * s.seq_length * m.hidden_size
    tokens = s.micro_batch * s.seq_length // t
    taken: dict[tuple, list[int]] = {}
    added: dict[tuple, list[int]] = {}

    def put(into, key, count, size):
        if key[0] == "fwd" and 0 < size < 4096:  # as moe_volumes: SimAI's smallest forward message
            size = 4096
        entry = into.setdefault(key, [0, 0])
        entry[0] += count
        entry[1] += count * size

    if minor(version) < (0, 12):  # the routing probabilities stay on the token's rank
        if ep > 1:
            for phase in ("fwd", "ig"):
                put(taken, (phase, "alltoall", "EP"), n, 2 * tokens * k)
        if e > 1:
            put(taken, ("fwd", "allgather", "TP"), n, 2 * tokens * k * e)
            put(taken, ("ig", "reducescatter", "TP"), n, 2 * tokens * k * e)
    if (0, 9) <= minor(version) < (0, 11) and t > 1 and not m.moe_aux_loss_coeff:
        put(added, ("fwd", "allreduce", "TP"), n, 8 * E)  # the token counts, without a loss too
    if minor(version) < (0, 9) and t > 1:  # every TP rank routes the whole sequence
        if m.moe_aux_loss_coeff:
            put(taken, ("fwd", "allreduce", "TP"), n, 8 * E)
        put(added, ("fwd", "allgather", "TP"), n, 2 * s.micro_batch * s.seq_length * E)  # the logits
        put(added, ("ig", "reducescatter", "TP"), n, 2 * s.micro_batch * s.seq_length * E)
        if ep == 1:  # token counts: over EP alone (the newest gathers them over expert TP)
            put(taken, ("fwd", "allgather", "TP"), n, 8 * e * E)
        else:  # the newest's expert-TP x EP gather has no SimAI group, so is no row
            put(added, ("fwd", "allgather", "EP"), n, 8 * ep * E)
        for phase in ("fwd", "ig"):
            put(added, (phase, "alltoall", "TP"), 2 * n, u // t)  # sequence shard <-> hidden shard
    return {k: tuple(v) for k, v in taken.items()}, {k: tuple(v) for k, v in added.items()}


def plus(total: dict, part: dict) -> dict:
    out = dict(total)
    for key, (count, size) in part.items():
        c, b = out.get(key, (0, 0))
        out[key] = (c + count, b + size)
    return out


CASES = [
    pytest.param(model, tp, ep, etp, pp, id=f"{model.name}-tp{tp}-ep{ep}-etp{etp}-pp{pp}")
    for model, tp, ep, etp, pp in itertools.product((AUX, NO_AUX, UNGATED, MIXED), (1, 2, 4), (1, 2, 4), (None, 1),
                                                    (1, 2))
    if not (etp == 1 and tp == 1) and not (model is MIXED and pp == 1)
]


@pytest.mark.parametrize("model, tp, ep, etp, pp", CASES)
def test_each_release_differs_from_the_newest_in_its_moe_layers_alone(model, tp, ep, etp, pp):
    setup = TrainingSetup(model=model, world_size=tp * pp * 8, tp=tp, pp=pp, ep=ep, etp=etp, sp=tp > 1,
                          micro_batch=2, global_batch=2 * 8 * 3, seq_length=64)
    for stage in sorted({0, pp - 1}):
        newest = measured(megatron.schedule(setup, stage=stage).workload())
        assert newest == measured(megatron.schedule(setup, stage=stage, megatron_version=NEWEST).workload())
        expected_newest = moe_volumes(setup, stage)
        rest = without(newest, expected_newest)  # the dense part, the same for every release
        for version in RELEASES:
            if not builds(setup, version):
                assert megatron.unsupported(setup, version), version
                continue
            assert megatron.unsupported(setup, version) == [], version
            workload = megatron.schedule(setup, stage=stage, megatron_version=version).workload()
            assert wf.parse(workload.render()) == workload
            taken, added = release_delta(setup, stage, version)
            assert measured(workload) == plus(without(plus(rest, expected_newest), taken), added), version


def test_the_rows_of_an_moe_layer_per_release():
    """One MoE layer at TP 2 with SP and EP 2, by row name, forward order."""
    setup = TrainingSetup(model=AUX, world_size=16, tp=2, ep=2, sp=True, micro_batch=2, global_batch=48,
                          seq_length=64)

    def rows(version):
        return [b.name.removeprefix("layer0_moe_") for b in megatron.schedule(setup, megatron_version=version).blocks
                if b.name.startswith("layer0_moe") and b.micro_batch == 0]

    newest = ["router", "dispatch", "dispatch_probs", "expert_fc1", "expert_probs_gather", "expert_fc2", "combine"]
    assert rows(None) == rows("0.12.3") == rows("0.19.2") == newest
    assert rows("0.9.0") == rows("0.11.0") == ["router", "dispatch", "expert_fc1", "expert_fc2", "combine"]
    assert rows("0.8.0") == rows("0.8.1") == ["router", "dispatch_metadata", "tp_dispatch", "dispatch", "expert_fc1",
                                               "expert_fc2", "combine", "tp_combine"]
    [router] = [b for b in megatron.schedule(setup, megatron_version="0.8.0").blocks
                if b.name == "layer0_moe_router" and b.micro_batch == 0]
    # The whole sequence's bf16 logits (b*s*E values), gathered forward, scattered backward.
    assert (router.fwd.collective, router.fwd.group, router.fwd.bytes) == ("allgather", "TP", 2 * 2 * 64 * 8)
    assert (router.ig.collective, router.ig.group, router.ig.bytes) == ("reducescatter", "TP", 2 * 2 * 64 * 8)


def test_dense_models_are_the_same_for_every_traced_release():
    for model in ("gpt-7b", "llama-70b"):
        for tp, pp, sp in ((2, 1, False), (4, 1, True), (2, 2, True), (8, 2, False)):
            setup = TrainingSetup(model=PRESETS[model], world_size=16 * tp * pp, tp=tp, pp=pp, sp=sp, global_batch=64)
            newest = megatron.schedule(setup).workload()
            for version in megatron_releases.TRACED:
                assert megatron.schedule(setup, megatron_version=version).workload() == newest, (model, version)


def test_a_release_the_schedule_does_not_know_is_refused_naming_the_flag():
    for given, says in (("0.7.0", "follows 0.8.0 to 0.19.2"), ("0.20.0", "newer than the newest traced release"),
                        ("latest", "expected a megatron-core release"), ("0.8", "follows 0.8.0")):
        if given == "0.8":  # two parts are a release number too
            assert megatron_releases.release(given).tp_routing
            continue
        with pytest.raises(ConfigError) as err:
            megatron_releases.release(given)
        assert str(err.value).startswith("--megatron-version: ") and says in str(err.value), given
    assert megatron_releases.release("0.19.7").version == "0.19.7"  # a patch release of a traced minor
    assert megatron_releases.release(None).version == NEWEST == versions.newest_traced()
    assert versions.TRACED is megatron_releases.TRACED


def test_a_model_an_old_release_cannot_build_is_refused_in_words():
    qwen = TrainingSetup(model=PRESETS["qwen1.5-moe-a2.7b"], world_size=16, tp=2, ep=2, sp=True, global_batch=16)
    assert megatron.unsupported(qwen) == [] and megatron.unsupported(qwen, "0.16.1") == []
    assert megatron.unsupported(qwen, "0.15.3") == [
        "megatron-core 0.15.3 cannot build this model: it lacks the shared expert's gate (from 0.16)"]
    etp1 = dataclasses.replace(qwen, etp=1)
    assert megatron.unsupported(etp1, "0.9.0") == [
        "megatron-core 0.9.0 cannot build this model: it lacks shared experts (from 0.10), an expert TP of its own "
        "(from 0.10), the shared expert's gate (from 0.16)"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "commsweep", *args], capture_output=True, text=True, timeout=120)


MIXTRAL_TP2 = ["--model", "mixtral-8x7b", "--world_size=16", "--tensor_model_parallel_size=2",
               "--enable_sequence_parallel", "--expert_model_parallel_size=2", "--global_batch=16", "--num_layers=2"]


def test_generate_and_audit_take_the_release(tmp_path):
    """AICB models megatron-core 0.8: audited against 0.8.0, a 0.8.0 workload is clean, and
    the newest release's workload misses its TP all-to-alls and router gathers."""
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    result = run("generate", "--schedule", "megatron", *MIXTRAL_TP2, "--megatron-version", "0.8.0", "-o", str(old))
    assert result.returncode == 0, result.stderr
    assert run("generate", "--schedule", "megatron", *MIXTRAL_TP2, "--megatron_version", "0.8.0").stdout == \
        old.read_text()  # the underscore spelling too
    assert run("generate", "--schedule", "megatron", *MIXTRAL_TP2, "-o", str(new)).returncode == 0
    assert "layer0_moe_tp_dispatch" in old.read_text() and "layer0_moe_tp_dispatch" not in new.read_text()
    setup_args = [a for a in MIXTRAL_TP2 if a != "--global_batch=16"] + ["--global_batch=16"]
    assert audit.audit(wf.read(old), _setup(setup_args), megatron_version="0.8.0") == []
    findings = audit.audit(wf.read(new), _setup(setup_args), megatron_version="0.8.0")
    # Every finding is in an MoE layer: 0.8.0's rows the workload lacks, and the rows it has
    # that 0.8.0 does not issue (the audit pairs each with the nearest collective it can).
    def row(name):
        return re.sub(r"^layer\d+_moe_", "", name)

    assert {row(f.expected.name) for f in findings if f.expected} == {
        "router", "dispatch_metadata", "tp_dispatch", "tp_combine"}
    assert {row(f.row_name) for f in findings} == {"router", "dispatch_probs", "expert_probs_gather"}
    result = run("audit", str(new), *MIXTRAL_TP2, "--megatron-version", "0.8.0", "--format", "csv")
    assert result.returncode == 0 and "layer0_moe_tp_dispatch" in result.stdout
    result = run("audit", str(old), *MIXTRAL_TP2, "--megatron-version", "0.8.0", "--format", "csv")
    assert result.returncode == 0 and result.stdout.count("\n") == 1  # the header alone: nothing differs
    bad = run("generate", "--schedule", "megatron", *MIXTRAL_TP2, "--megatron-version", "0.7.0")
    assert bad.returncode == 2 and bad.stderr.startswith("commsweep generate: error: --megatron-version: ")


def _setup(argv):
    from commsweep.setup.arguments import add_training_arguments, setup_from_args
    import argparse

    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    return setup_from_args(parser.parse_args(argv))


def test_the_sweep_takes_the_release_from_its_config(tmp_path):
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["generator"]["properties"]["megatron_version"]["default"] == NEWEST

    def config(generator: str) -> dict:
        path = tmp_path / "sweep.yaml"
        path.write_text("sweep:\n  model: [qwen1.5-moe-a2.7b]\n  world_size: [16]\n  tp: [2]\n  ep: [2]\n"
                        "  sp: [true]\n  global_batch: [16]\n" + generator)
        return sweep.load_config(path)

    assert sweep.megatron_version(config("")) == NEWEST and len(sweep.expand(config(""))[0]) == 1
    points, invalid = sweep.expand(config("generator:\n  megatron_version: 0.12.3\n"))
    assert points == [] and "it lacks the shared expert's gate (from 0.16)" in invalid[0].reasons[0]
    with pytest.raises(ConfigError, match="^generator.megatron_version: megatron-core 0.7.0: "):
        sweep.expand(config("generator:\n  megatron_version: 0.7.0\n"))


def test_a_sweep_asking_for_an_unknown_release_fails_before_any_job(tmp_path):
    import sweeps

    sweeps.fails_before_any_job(tmp_path, "bad-megatron-version",
                                "generator.megatron_version: megatron-core 0.99.0 is newer than the newest traced release")


@pytest.mark.parametrize("path", ["default", "aiob"])
def test_aicb_audited_against_the_release_it_models(path):
    """AICB models megatron-core 0.8: against 0.8.0 its Mixtral at TP 2 lacks no routing
    probabilities and no load-balancing all-reduce, but 0.8's routing over TP, whose six
    collectives per MoE layer and micro-batch (the logits' gather and its backward, the two
    TP all-to-alls each way) the audit names moe_tp_routing_missing."""
    from collections import Counter

    from test_audit_moe import MIXTRAL, audited, setup

    s = setup(MIXTRAL, tp=2, ep=2)
    newest = Counter(c for c in audited(s, path)[1] if c)
    assert newest["moe_probs_alltoall_missing"] and newest["moe_router_allreduce_missing"]
    assert "moe_tp_routing_missing" not in newest

    from commsweep.aiob import roofline
    from commsweep.aiob.gpus import GPUS
    from commsweep.analysis import causes
    from commsweep.workload import aicb

    profile = roofline.profile(s, GPUS["H100-SXM"])[0] if path == "aiob" else None
    rows = [audit.record(f) for f in audit.audit(aicb.generate(s, profile), s, megatron_version="0.8.0")]
    old = Counter(c for c in causes.classify(rows) if c in causes.MOE_CAUSES)
    g, L = s.num_microbatches, s.model.num_layers
    assert old["moe_tp_routing_missing"] == 6 * g * L  # gather, its backward, two all-to-alls each way
    assert not {"moe_probs_alltoall_missing", "moe_probs_gather_missing", "moe_router_allreduce_missing"} & set(old)
