"""The audit on AICB's real reference workloads and on Megatron-schedule workloads."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import re
import shlex
from collections import Counter

import pytest

from commsweep.analysis import audit
from commsweep.base.errors import ConfigError, InputError
from commsweep.orchestration import cli
from commsweep.setup.arguments import add_aiob_arguments, add_training_arguments, setup_from_args
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup
from commsweep.workload import format as wf
from commsweep.workload import megatron

from conftest import reference_files, reference_path


def manifest() -> dict[str, str]:
    """file name -> AICB arguments, from the reference MANIFEST.csv."""
    path = reference_path("aicb", "workloads", "MANIFEST.csv")
    with open(path, newline="", encoding="utf-8") as fh:
        return {r["file_name"]: r["command_args"] for r in csv.DictReader(fh) if r["status"] == "ok"}


def setup_of(args: str) -> TrainingSetup:
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    add_aiob_arguments(parser)
    return setup_from_args(parser.parse_args(shlex.split(args)))


def audit_reference(path):
    setup = setup_of(manifest()[path.name])
    return setup, audit.audit(wf.read(path), setup, source=path)


REFERENCES = reference_files("aicb/workloads", "*.txt")


def _is(path, *, tp=None, sp=None, path_kind=None) -> bool:
    name = path.name
    return (
        (tp is None or f"_tp{tp}_" in name)
        and (sp is None or f"_sp{int(sp)}_" in name)
        and (path_kind is None or name.endswith(f"_{path_kind}.txt"))
    )


def references(keep) -> list:
    """The reference workloads ``keep(path)`` selects (the skipped case when there are none)."""
    return [p for p in REFERENCES if p.values[0] is None or keep(p.values[0])]


# -- the acceptance: AICB's known defects, found on the real files ------------------------


@pytest.mark.parametrize("path", references(lambda p: _is(p, sp=False, path_kind="aiob") and not _is(p, tp=1)))
def test_aiob_path_without_sp_lacks_both_backward_allreduces_of_every_layer(path):
    setup, findings = audit_reference(path)
    u = 2 * setup.micro_batch * setup.seq_length * setup.model.hidden_size
    workload = wf.read(path)
    per_layer: dict[int, list[audit.Finding]] = {}
    for f in findings:
        if f.kind == "missing" and f.unit.layer is not None:
            per_layer.setdefault(f.unit.layer, []).append(f)
    assert sorted(per_layer) == list(range(setup.model.num_layers))
    for layer, missing in per_layer.items():
        assert sorted(f.unit.kind for f in missing) == ["attention", "mlp"]
        for f in missing:
            assert (f.phase, f.expected.collective, f.expected.group, f.expected.bytes) == ("ig", "allreduce", "TP", u)
            assert f.delta_bytes == -u
            # The row that lacks it is the layer's own AICB row, whose ig column is NONE.
            assert workload.rows[f.row].name == f"{f.unit.kind}_layer"
            assert workload.rows[f.row].ig_comm == "NONE"
        assert sum(-f.delta_bytes for f in missing) == 2 * u


@pytest.mark.parametrize("path", references(lambda p: _is(p, tp=1, path_kind="default")))
def test_default_path_at_tp1_issues_tp_collectives_on_a_group_of_one(path):
    setup, findings = audit_reference(path)
    workload = wf.read(path)
    size1 = [f for f in findings if f.kind == "size1_group"]
    # Every layer's forward collectives sit on the TP group of one rank.
    layers = {f.unit.layer for f in size1 if f.unit.layer is not None and f.phase == "fwd"}
    assert layers == set(range(setup.model.num_layers))
    for f in size1:
        assert f.found.group == "TP" and f.expected is None
        assert f.delta_bytes == wf.effective_size(f.phase, f.found.bytes)
    # Exactly the TP collectives of the file are flagged (the one in grad_norm is a group finding).
    tp_collectives = [c for c in wf.collectives(workload) if c.group == "TP"]
    grouped = [f for f in findings if f.kind == "group"]
    assert len(size1) + len(grouped) == len(tp_collectives)
    assert [(f.expected.group, f.found.group) for f in grouped] == [("DP", "TP")]
    # A group of one GPU exchanges nothing: no simulated time (SimAI itself overflows here).
    timed = audit.audit(workload, setup, time_us=audit.collective_time(
        gpus_per_server=8, nics_per_server=8, nvlink_gbps=360, nic_gbps=48.5))
    assert all(f.delta_us == 0 for f in timed if f.kind == "size1_group")


@pytest.mark.parametrize("path", REFERENCES)
def test_every_finding_is_placed_and_costed(path):
    setup, findings = audit_reference(path)
    workload = wf.read(path)
    assert findings
    for f in findings:
        assert f.kind in audit.KINDS
        if f.row is None:
            assert f.kind == "missing" and f.layer  # a whole unit missing: the layer names it
        else:
            assert 0 <= f.row < len(workload.rows)
        expected = f.expected.bytes if f.expected else 0
        found = wf.effective_size(f.phase, f.found.bytes) if f.found and f.found.collective != "none" else 0
        assert f.delta_bytes == found - expected
    # The found side's collectives are exactly the workload's: each is matched silently or reported once.
    reported = Counter((f.row, f.phase) for f in findings if f.found is not None and f.found.collective != "none")
    assert max(reported.values(), default=1) == 1


@pytest.mark.parametrize("path", references(lambda p: _is(p, sp=True) and not _is(p, tp=1)))
def test_sequence_parallel_workloads_lack_the_weight_gradient_gathers(path):
    setup, findings = audit_reference(path)
    u = 2 * setup.micro_batch * setup.seq_length * setup.model.hidden_size
    # Megatron re-gathers the qkv and fc1 inputs for the weight gradient: one all-gather each,
    # which neither AICB path writes.
    missing_ag = [f for f in findings if f.kind == "missing" and f.unit.layer is not None
                  and f.expected.collective == "allgather" and f.phase == "ig"]
    assert len(missing_ag) >= 2 * setup.model.num_layers
    assert all(f.expected.bytes == u for f in missing_ag)
    if _is(path, path_kind="aiob"):
        # The AIOB path writes the input-gradient reduce-scatters with 0 bytes.
        zero = [f for f in findings if f.kind == "zero_bytes" and f.unit.layer is not None]
        assert len(zero) == 2 * setup.model.num_layers
        assert all(f.expected.collective == "reducescatter" and f.delta_bytes == -u for f in zero)
    else:
        # The default path leaves sizes in NONE columns.
        assert any(f.kind == "size_in_none_column" for f in findings)


# -- the Megatron schedule audits clean -------------------------------------------------

TINY = ModelSpec(name="tiny-gpt", num_layers=4, hidden_size=64, num_attention_heads=8,
                 ffn_hidden_size=256, vocab_size=1000, max_position_embeddings=128)
TINY_LLAMA = dataclasses.replace(
    TINY, name="tiny-llama", swiglu=True, position_embedding="rope", normalization="rmsnorm",
    add_bias_linear=False, tie_embeddings=False, num_query_groups=4, ffn_hidden_size=176,
)
CLEAN_CASES = [
    (model, tp, pp, sp, gb)
    for model in (TINY, TINY_LLAMA)
    for tp in (1, 2, 4)
    for pp in (1, 2)
    for sp in (False, True)
    for gb in (16, 48)
]


@pytest.mark.parametrize("model,tp,pp,sp,gb", CLEAN_CASES)
def test_megatron_workloads_audit_clean_for_every_stage(model, tp, pp, sp, gb):
    setup = TrainingSetup(model=model, world_size=16, tp=tp, pp=pp, sp=sp, global_batch=gb, seq_length=256)
    assert not setup.problems()
    for stage in range(pp):
        workload = megatron.schedule(setup, stage=stage).workload()
        assert audit.audit(workload, setup, stage=stage) == []


def test_megatron_gpt7b_workload_audits_clean_with_the_reference_arguments():
    args = manifest()["gpt7b_ws16_tp4_pp1_seq2048_mbs1_ga1_sp1_default.txt"]
    setup = setup_of(args)
    assert audit.audit(megatron.schedule(setup).workload(), setup) == []


def test_audit_against_the_wrong_stage_finds_the_embedding_and_output_layer():
    setup = TrainingSetup(model=TINY, world_size=8, tp=2, pp=2, global_batch=8, seq_length=256)
    last = megatron.schedule(setup, stage=1).workload()
    findings = audit.audit(last, setup, stage=0)
    kinds = {(f.unit.kind, f.kind) for f in findings}
    assert ("embedding", "missing") in kinds and ("output_layer", "extra") in kinds


# -- each kind, on a Megatron workload with one deliberate defect ---------------------------

SETUP = TrainingSetup(model=TINY, world_size=8, tp=2, sp=False, global_batch=8, seq_length=256)


def _mutated(edit) -> tuple[wf.Workload, list[audit.Finding]]:
    workload = megatron.schedule(SETUP).workload()
    rows = list(workload.rows)
    edit(rows)
    workload = wf.with_rows(workload, rows)
    return workload, audit.audit(workload, SETUP)


def _index(rows, name, nth=0):
    return [i for i, r in enumerate(rows) if r.name == name][nth]


def test_a_doubled_size_is_a_size_finding_with_its_ratio():
    u = SETUP.activation_bytes
    holder = {}

    def edit(rows):
        i = holder["i"] = _index(rows, "layer2_mlp_fc2", 1)
        rows[i] = dataclasses.replace(rows[i], fwd_size=2 * u)

    _, findings = _mutated(edit)
    (f,) = findings
    assert (f.row, f.kind, f.phase, f.layer) == (holder["i"], "size", "fwd", "mb1/layer2/mlp")
    assert f.ratio == 2.0 and f.delta_bytes == u


def test_a_dropped_collective_is_missing_on_its_row_and_a_dropped_row_names_its_layer():
    def edit(rows):
        i = _index(rows, "layer1_attention_qkv")
        rows[i] = dataclasses.replace(rows[i], ig_comm="NONE", ig_size=0)
        del rows[_index(rows, "output_layer")]

    workload, findings = _mutated(edit)
    by_kind = {f.layer: f for f in findings}
    assert set(by_kind) == {"mb0/layer1/attention", "mb0/output_layer"}
    qkv = by_kind["mb0/layer1/attention"]
    assert qkv.kind == "missing" and workload.rows[qkv.row].name == "layer1_attention_qkv"
    out = by_kind["mb0/output_layer"]
    assert out.kind == "missing" and out.row is None and out.expected.bytes == SETUP.activation_bytes


def test_a_second_copy_is_extra_and_a_moved_collective_is_a_group_finding():
    def edit(rows):
        i = _index(rows, "layer0_attention_proj")
        rows[i] = dataclasses.replace(rows[i], ig_comm="ALLREDUCE", ig_size=rows[i].fwd_size)
        j = _index(rows, "dp_grad_reducescatter")
        rows[j] = dataclasses.replace(rows[j], wg_comm="NONE", wg_size=0, fwd_comm="REDUCESCATTER", fwd_size=rows[j].wg_size)

    _, findings = _mutated(edit)
    kinds = {f.kind: f for f in findings}
    assert set(kinds) == {"extra", "group"}
    assert kinds["extra"].layer == "mb0/layer0/attention" and kinds["extra"].delta_bytes == SETUP.activation_bytes
    g = kinds["group"]
    assert (g.expected.group, g.expected.phase, g.found.group, g.found.phase) == ("DP", "wg", "TP", "fwd")
    assert g.delta_bytes == 0


def test_zero_bytes_and_a_size_in_a_none_column():
    def edit(rows):
        i = _index(rows, "layer3_mlp_fc1")
        rows[i] = dataclasses.replace(rows[i], ig_size=0, wg_size=123)

    _, findings = _mutated(edit)
    kinds = sorted(f.kind for f in findings)
    assert kinds == ["size_in_none_column", "zero_bytes"]
    zero = next(f for f in findings if f.kind == "zero_bytes")
    assert zero.expected.bytes == SETUP.activation_bytes and zero.delta_bytes == -SETUP.activation_bytes


def test_the_header_pipeline_traffic_is_audited():
    setup = TrainingSetup(model=TINY, world_size=8, tp=2, pp=2, global_batch=8, seq_length=256)
    workload = megatron.schedule(setup).workload()
    aicb_like = dataclasses.replace(workload, header=dataclasses.replace(workload.header, vpp=2))
    (f,) = audit.audit(aicb_like, setup)
    assert (f.kind, f.phase, f.row, f.layer) == ("size", "pp", None, "iteration/pipeline")
    assert f.ratio == 2.0


def test_aicbs_layernorm_row_is_its_own_unit_not_megatrons_sequence_parallel_gradients():
    """With SP off AICB all-reduces a 'layernorm' row of 2P bytes: its unit says so, rather than
    standing under Megatron's sequence-parallel gradients (which only exist with SP)."""
    name = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob.txt"
    path = reference_path("aicb", "workloads", name)
    findings = audit.audit(wf.read(path), setup_of(manifest()[name]))
    [layernorm] = [f for f in findings if f.row_name == "layernorm"]
    assert (layernorm.layer, layernorm.kind, layernorm.found.collective) == ("iteration/layernorm_grads", "extra",
                                                                            "allreduce")
    assert not [f for f in findings if f.layer == "iteration/sp_grads"]


def test_micro_batches_of_an_aicb_file_with_ga_above_one():
    """AICB repeats the body per micro-batch but writes cross entropy once, after the last."""
    path = reference_path("aicb", "workloads", "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_default.txt")
    base = wf.read(path)
    body = [i for i, r in enumerate(base.rows) if r.name in ("embedding_layer", "attention_layer", "mlp_layer", "embedding_norm")]
    start, end = body[0], body[-1] + 1
    rows = list(base.rows[:end]) + list(base.rows[start:end]) + list(base.rows[end:])
    workload = wf.Workload(header=dataclasses.replace(base.header, ga=2, text=None), rows=tuple(rows))
    setup = dataclasses.replace(setup_of(manifest()[path.name]), global_batch=16)
    units = audit.segment(workload, setup.layers_per_stage)
    assert {u.micro_batch for u in units if u.layer is not None} == {0, 1}
    assert max(u.layer for u in units if u.layer is not None) == 31
    findings = audit.audit(workload, setup)
    # The three cross-entropy all-reduces of micro-batch 0 are missing; those of mb 1 are there.
    loss = [f for f in findings if f.unit.kind == "loss"]
    assert [(f.layer, f.kind) for f in loss] == [("mb0/loss", "missing")] * 3


def test_a_workload_of_another_setup_is_refused_naming_the_header_field():
    path = reference_path("aicb", "workloads", "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_default.txt")
    setup = dataclasses.replace(setup_of(manifest()[path.name]), tp=4, global_batch=4)
    with pytest.raises(InputError) as err:
        audit.audit(wf.read(path), setup, source=path)
    assert f"{path}:1: field 'model_parallel_NPU_group'" in str(err.value)


def test_moe_without_sp_is_refused_with_megatrons_reason():
    setup = TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=16, tp=2, ep=2, sp=False, global_batch=16)
    with pytest.raises(ConfigError, match="megatron-core refuses MoE with tensor parallelism but without sequence"):
        audit.audit(megatron.schedule(SETUP).workload(), setup)


# -- command line ----------------------------------------------------------------------


def test_cli_writes_the_csv_columns_and_the_table(tmp_path, capsys):
    name = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob.txt"
    path = reference_path("aicb", "workloads", name)
    args = shlex.split(manifest()[name])
    out = tmp_path / "audit.csv"
    assert cli.main(["audit", str(path), *args, "--format", "csv", "-o", str(out)]) == 0
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert tuple(rows[0]) == audit.COLUMNS
    kinds = Counter(r[3] for r in rows[1:])
    assert kinds["missing"] == 2 * 32 + 1  # two per layer, and the output layer's
    assert cli.main(["audit", str(path), *args]) == 0
    table = capsys.readouterr().out
    assert "missing: 65 finding(s)" in table and "attention_layer" in table


def test_audit_csv_reads_back_typed_and_names_the_line_and_field_of_a_bad_cell(tmp_path):
    """The one reader of audit.csv gives back what the writer wrote, finding for finding."""
    from commsweep.analysis import audit_csv

    name = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob.txt"
    path = reference_path("aicb", "workloads", name)
    findings = audit.audit(wf.read(path), setup_of(manifest()[name]),
                           time_us=audit.collective_time(**NET_A))
    out = tmp_path / "audit.csv"
    out.write_text(audit.to_csv(findings))
    rows = audit_csv.read(out)
    assert len(rows) == len(findings) and rows[0].delta_us is not None
    assert [(r.row, r.layer, r.kind, r.delta_bytes) for r in rows] == [(f.row, f.layer, f.kind, f.delta_bytes)
                                                                        for f in findings]
    assert [r.delta_us for r in rows] == [float(f"{f.delta_us:.3f}") for f in findings]
    assert audit_csv.to_csv(rows) == out.read_text()
    header, first, *rest = out.read_text().splitlines(keepends=True)
    cells = first.split(",")
    cells[audit.COLUMNS.index("found_bytes")] = "many"
    out.write_text(header + ",".join(cells) + "".join(rest))
    with pytest.raises(InputError, match=rf"{out}:2: field 'found_bytes': expected an integer, got 'many'"):
        audit_csv.read(out)
    out.write_text(header + first.replace(",", ";", 1) + "".join(rest))
    with pytest.raises(InputError, match=rf"{out}:2: expected 15 fields, got 14"):
        audit_csv.read(out)


GPT7B_TP2 = ["--model", "gpt-7b", "--world_size=16", "--tensor_model_parallel_size=2", "--global_batch=8"]


@pytest.mark.parametrize("made, audited, message", [
    ([], ["--enable_sequence_parallel"],
     r"w.txt:8: the attention all-reduces forward over TP, as without sequence parallelism, .* "
     r"without --enable_sequence_parallel"),
    (["--enable_sequence_parallel"], [],
     r"w.txt:7: the attention all-gathers and reduce-scatters forward over TP, as with sequence parallelism, .* "
     r"with --enable_sequence_parallel"),
    ([], ["--num_layers", "24"], r"w.txt: the workload has 32 transformer layers per micro-batch where the audited "
                                 r"arguments give 24 \(--num_layers 24\)"),
    (["--num_layers", "24"], [], r"the workload has 24 transformer layers per micro-batch where the audited "
                                 r"arguments give 32"),
    ([], ["--hidden_size", "5120"], r"w.txt:8: the attention moves 16777216-byte activations over TP \(hidden size "
                                    r"4096 at micro batch 1 and sequence 2048\) where the audited arguments give "
                                    r"20971520 \(hidden size 5120\); .*--model"),
    ([], ["--seq_length", "4096"], r"w.txt:8: the attention moves 16777216-byte activations .*--seq_length"),
    ([], ["--tensor_model_parallel_size=4"], r"w.txt:1: field 'model_parallel_NPU_group': the workload has 2 where "
                                             r"the audited arguments give 4 \(--tensor_model_parallel_size\)"),
    ([], ["--global_batch=16"], r"w.txt:1: field 'ga': the workload has 1 where the audited arguments give 2 "
                                r"\(micro-batches: --global_batch over --micro_batch"),
    ([], ["--world_size=32", "--global_batch=16"],
     r"w.txt:1: field 'all_gpus': the workload has 16 where the audited arguments give 32 \(--world_size\)"),
])
def test_a_workload_audited_with_arguments_it_was_not_made_with_is_refused(tmp_path, capsys, made, audited, message):
    """What the rows tell of the setup (SP, the layers, the activation size) is checked against
    the audited arguments before any finding is made: exit 2, naming the file and the flag."""
    path = tmp_path / "w.txt"
    assert cli.main(["generate", *GPT7B_TP2, *made, "-o", str(path)]) == 0
    assert cli.main(["audit", str(path), *GPT7B_TP2, *made, "--format", "csv", "-o", str(tmp_path / "a.csv")]) == 0
    assert cli.main(["audit", str(path), *GPT7B_TP2, *audited]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_workload_audited_without_its_model_is_refused(tmp_path, capsys):
    path = tmp_path / "w.txt"
    assert cli.main(["generate", *GPT7B_TP2, "-o", str(path)]) == 0
    assert cli.main(["audit", str(path), *GPT7B_TP2[2:]]) == 2
    assert "(hidden size 1024); audit the workload with the model it was made from (--model" in capsys.readouterr().err


def test_cli_reports_a_bad_workload_with_its_place(tmp_path, capsys):
    bad = tmp_path / "w.txt"
    bad.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 1\n1\nx -1 0 NONE 0\n")
    assert cli.main(["audit", str(bad), "--world_size=1", "--global_batch=1"]) == 2
    assert f"{bad}:3:" in capsys.readouterr().err


def test_cli_needs_all_four_network_flags(capsys):
    path = reference_path("aicb", "workloads", "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob.txt")
    args = shlex.split(manifest()[path.name])
    assert cli.main(["audit", str(path), *args, "-g_p_s", "8"]) == 2
    assert "-nic" in capsys.readouterr().err


def test_the_network_flags_are_read_as_the_simulate_stage_reads_them():
    """All four or none (the simulate stage's check); SimAI's -g defaults to the header's GPUs."""
    header = wf.read(reference_path("aicb", "workloads", "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_aiob.txt")).header
    flags = {"gpus_per_server": 8, "nics_per_server": 8, "nvlink_gbps": 360.0, "nic_gbps": 48.5, "gpus": None}
    network = audit.network_from_args(argparse.Namespace(**flags), header)
    assert (network.gpus, network.gpus_per_server, network.nic_gbps) == (16, 8, 48.5)
    assert audit.network_from_args(argparse.Namespace(**{**flags, "gpus": 32}), header).gpus == 32
    assert audit.network_from_args(argparse.Namespace(**{k: None for k in flags}), header) is None
    with pytest.raises(ConfigError, match="all four of -g_p_s, -n_p_s, -nv and -nic"):
        audit.network_from_args(argparse.Namespace(**{**flags, "nic_gbps": None}), header)


# -- delta_us: the simulation engine's time, checked against SimAI's own output --------------

NET_A = {"gpus_per_server": 8, "nics_per_server": 8, "nvlink_gbps": 360, "nic_gbps": 48.5}


def endtoend_rows(stem: str) -> list[list[str]]:
    path = reference_path("simai", "endtoend", f"{stem}__netA-EndToEnd.csv")
    with open(path, newline="") as fh:
        return list(csv.reader(fh))[3:]


# SimAI's EndToEnd.csv: "total comm" (before overlap) of each phase, by column index.
TOTAL_COMM_COLUMN = {"fwd": 8, "wg": 11, "ig": 14}


@pytest.mark.parametrize("path", references(lambda p: not _is(p, tp=1)))
def test_delta_us_of_what_a_row_issues_is_simais_time_for_it(path):
    """An extra or mis-sized collective costs what SimAI printed for it (rounded to us)."""
    setup, _ = audit_reference(path)
    findings = audit.audit(wf.read(path), setup, time_us=audit.collective_time(**NET_A))
    rows = endtoend_rows(path.stem)
    checked = 0
    for f in findings:
        if f.kind in ("extra", "size1_group") and f.found.bytes >= 2**20:
            simai = float(rows[f.row][TOTAL_COMM_COLUMN[f.phase]])
            assert f.delta_us == pytest.approx(simai, abs=0.5), (f.row, f.phase)
            checked += 1
    assert checked


@pytest.mark.parametrize("path", references(lambda p: _is(p, sp=False, path_kind="aiob") and not _is(p, tp=1)))
def test_a_missing_layer_allreduce_costs_what_simai_gives_the_same_allreduce(path):
    """The AIOB path's missing ig all-reduce of u is the twin of the row's forward all-reduce of
    u (same group, same size): SimAI's time for that forward one is the missing cost."""
    setup, _ = audit_reference(path)
    findings = audit.audit(wf.read(path), setup, time_us=audit.collective_time(**NET_A))
    rows = endtoend_rows(path.stem)
    missing = [f for f in findings if f.kind == "missing" and f.unit.layer is not None]
    assert len(missing) == 2 * setup.model.num_layers
    for f in missing:
        assert -f.delta_us == pytest.approx(float(rows[f.row][TOTAL_COMM_COLUMN["fwd"]]), abs=0.5)


def test_cli_delta_us_with_simais_network_flags(tmp_path):
    name = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp0_default.txt"
    path = reference_path("aicb", "workloads", name)
    out = tmp_path / "a.csv"
    argv = ["audit", str(path), *shlex.split(manifest()[name]), "--format", "csv", "-o", str(out),
            "-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5"]
    assert cli.main(argv) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert rows and all(r["delta_us"] != "" for r in rows)
    layernorm = next(r for r in rows if r["layer"] == "iteration/layernorm_grads")
    simai = float(endtoend_rows(path.stem)[int(layernorm["row"])][TOTAL_COMM_COLUMN["ig"]])
    assert float(layernorm["delta_us"]) == pytest.approx(simai, abs=0.5)
