"""The aicb schedule: AICB's reference workloads byte for byte, and AICB's rules (SPEC.md).

Real AICB is not needed here; ``test_aicb_real.py`` compares against it when AICB_ROOT is set.
"""

from __future__ import annotations

import csv
import shlex
import subprocess
import sys

import pytest

from commsweep.aiob import profile_file
from commsweep.base.errors import CommsweepError, ConfigError
from commsweep.orchestration import sweep
from commsweep.orchestration.cli import build_parser
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb
from commsweep.workload import format as wf
from commsweep.workload.generate import build
from commsweep.workload.stage import from_arguments

from conftest import REFERENCE

EXAMPLE = REFERENCE / "aicb" / "aiob_inputs" / "Example.txt"


def manifest_rows() -> list:
    path = REFERENCE / "aicb" / "workloads" / "MANIFEST.csv"
    if not path.exists():
        reason = f"reference material not found at {path} (set COMMSWEEP_REFERENCE to its folder)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-reference")]
    with open(path, newline="") as fh:
        return [pytest.param(row, id=row["file_name"]) for row in csv.DictReader(fh)]


def command_line(row: dict) -> list[str]:
    """A MANIFEST command line, with AICB's relative Example.txt path made the reference's."""
    args = row["command_args"].replace("workload/aiob_inputs/Example.txt", str(EXAMPLE))
    return shlex.split(args)


def generate(*argv: str) -> str:
    """``commsweep generate ARGS`` in-process: the text it would write."""
    text, _ = from_arguments(build_parser().parse_args(["generate", *argv]))
    return text


def example_profile() -> profile_file.AiobProfile:
    if not EXAMPLE.exists():
        pytest.skip(f"reference material not found at {EXAMPLE} (set COMMSWEEP_REFERENCE to its folder)")
    return profile_file.read(EXAMPLE)


def model(**fields) -> ModelSpec:
    base = dict(name="m", num_layers=4, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
                vocab_size=50257, add_bias_linear=False)
    return ModelSpec(**{**base, **fields})


def setup(**fields) -> TrainingSetup:
    m = fields.pop("model", None) or model()
    base = dict(world_size=16, tp=2, global_batch=8, seq_length=2048)
    return TrainingSetup(model=m, **{**base, **fields})


MOE = model(num_experts=8, moe_topk=2, ffn_hidden_size=2048)


# -- the reference workloads -----------------------------------------------------------


@pytest.mark.parametrize("row", manifest_rows())
def test_reference_workload_reproduced_from_its_manifest_arguments(row):
    expected = (REFERENCE / "aicb" / "workloads" / row["file_name"]).read_bytes()
    assert generate(*command_line(row)).encode() == expected


def test_command_line_writes_the_reference_file(tmp_path, reference):
    name = "gpt7b_ws16_tp2_pp1_seq2048_mbs1_ga1_sp1_aiob.txt"
    row = next(r for r in csv.DictReader(open(reference("aicb", "workloads", "MANIFEST.csv"))) if r["file_name"] == name)
    out = tmp_path / "w.txt"
    subprocess.run([sys.executable, "-m", "commsweep", "generate", *command_line(row), "-o", str(out)], check=True)
    assert out.read_bytes() == reference("aicb", "workloads", name).read_bytes()


# -- structure: SPEC.md's line counts and parameter count ------------------------------


def spec_line_count(s: TrainingSetup, aiob: bool) -> int:
    """SPEC.md sections 3 and 4: preamble + g x body + 7 tail lines."""
    g, layers = s.num_microbatches, s.model.num_layers // s.pp
    if s.model.is_moe:
        pre, per = (6, 7 * layers + 2) if aiob else (3, 7 * layers + 3)
    elif s.sp:
        pre, per = (6, 4 * layers + 2) if aiob else (3, 4 * layers + 3)
    else:
        pre, per = (7, 2 * layers + 1) if aiob else (4, 2 * layers + 2)
    return pre - (2 if s.ep == s.dp else 0) + g * per + 7


CASES = [
    setup(),
    setup(sp=True, tp=4, pp=2, global_batch=6),
    setup(tp=1, global_batch=48, micro_batch=2),
    setup(sp=True, tp=8, world_size=8, global_batch=3, recompute=True),
    setup(model=MOE, sp=True, ep=2, global_batch=16),
    setup(model=MOE, sp=True, tp=1, world_size=8, ep=8, global_batch=8, pp=1),  # ep == dp
    setup(model=model(num_layers=30), pp=4, world_size=32, global_batch=12),  # 30 // 4 layers
]


@pytest.mark.parametrize("aiob", [False, True], ids=["default", "aiob"])
@pytest.mark.parametrize("s", CASES, ids=range(len(CASES)))
def test_line_count_and_header_follow_the_spec(s, aiob):
    w = aicb.generate(s, example_profile() if aiob else None)
    assert len(w.rows) == spec_line_count(s, aiob)
    h = w.header
    assert (h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus) == (s.tp, s.ep, s.pp, s.model.num_layers // s.pp,
                                                          s.num_microbatches, s.world_size)
    # The file reads back, and renders unchanged.
    assert wf.parse(w.render()).render() == w.render()


@pytest.mark.parametrize("s", CASES, ids=range(len(CASES)))
def test_parameter_count_follows_the_spec_formula(s):
    m, t = s.model, s.tp
    h, f, layers, v = m.hidden_size, m.ffn_hidden_size, m.num_layers // s.pp, s.padded_vocab
    mlp = 2 * h * f * (m.num_experts // s.ep) // t if m.is_moe else 2 * h * f // t
    p = 4 * v * h // t + s.seq_length * h + layers * (4 * h * h // t + mlp)
    if s.sp:
        p += v * h // t + 2 * h * layers
    moe = layers * mlp if m.is_moe else 0
    assert aicb.parameter_counts(s) == (p, moe)
    first = aicb.generate(s).rows[0]
    assert (first.name, first.fwd_size, first.wg_size) == ("grad_norm", 2 * p, 4 * p)
    gather = aicb.generate(s, example_profile()).rows[0]
    assert (gather.name, gather.wg_comm, gather.wg_size) == ("grad_gather", "ALLGATHER", 2 * (p - moe))


def test_biases_count_only_with_add_bias_linear():
    plain, biased = setup(sp=True), setup(sp=True, model=model(add_bias_linear=True))
    h, t, layers, f, v = 1024, 2, 4, 4096, biased.padded_vocab
    extra = layers * (3 * h // t + h + f // t + h) + v // t
    assert aicb.parameter_counts(biased)[0] - aicb.parameter_counts(plain)[0] == extra


# -- the default path --------------------------------------------------------------------


def test_default_path_sizes_ignore_tp_and_double_attention_with_recompute():
    s = setup(tp=1, recompute=True, global_batch=32)  # g = 2
    u = 2 * s.micro_batch * s.seq_length * s.model.hidden_size
    w = aicb.generate(s)
    by_name = {}
    for row in w.rows:
        by_name.setdefault(row.name, []).append(row)
    # TP = 1 still gets TP all-reduces; recompute doubles the attention forward size only.
    assert {(r.fwd_comm, r.fwd_size, r.ig_comm, r.ig_size) for r in by_name["attention_layer"]} == {("ALLREDUCE", 2 * u, "ALLREDUCE", u)}
    assert {(r.fwd_comm, r.fwd_size, r.ig_size) for r in by_name["mlp_layer"]} == {("ALLREDUCE", u, u)}
    # The tied-embedding all-reduce of 2Vh (unpadded V) once per micro-batch.
    assert [(r.fwd_size) for r in by_name["embedding_norm"]] == [2 * 50257 * 1024] * 2
    assert [r.fwd_size for r in by_name["cross_entropy1"]] == [4 * s.seq_length]


def test_default_path_moe_lines():
    s = setup(model=MOE, sp=True, tp=2, ep=4, global_batch=8)
    u = 2 * s.seq_length * s.model.hidden_size
    moe = [r for r in aicb.generate(s).rows if r.name == "mlp_moelayer"][:5]
    assert [(r.fwd_comm, r.fwd_size, r.ig_comm, r.ig_size) for r in moe] == [
        ("ALLGATHER", 2 * 4 * 8 * 2, "NONE", 0),
        ("ALLTOALL_EP", u * 2 // 2, "ALLTOALL_EP", u * 2 // 2),
        ("ALLGATHER", u * 2, "REDUCESCATTER", u * 2),
        ("REDUCESCATTER", u * 2, "ALLGATHER", u * 2),
        ("ALLTOALL_EP", u * 2 // 2, "ALLTOALL_EP", u * 2 // 2),
    ]


# -- the AIOB path -------------------------------------------------------------------------


def test_aiob_path_drops_backward_allreduces_without_sp():
    s = setup(tp=4, global_batch=4)
    body = [r for r in aicb.generate(s, example_profile()).rows if r.name in ("attention_layer", "mlp_layer")]
    assert {(r.fwd_comm, r.ig_comm, r.ig_size) for r in body} == {("ALLREDUCE", "NONE", 0)}
    default = [r for r in aicb.generate(s).rows if r.name in ("attention_layer", "mlp_layer")]
    assert {r.ig_comm for r in default} == {"ALLREDUCE"}


def test_aiob_compute_times_of_the_example():
    # SPEC.md: attention 1,820,000 ns, mlp 2,478,000, Emb 799,000, grad 16,647,000 / 17,374,000.
    s = setup(sp=True, tp=2, global_batch=16)  # g = 2
    rows = aicb.generate(s, example_profile()).rows
    get = {r.name: r for r in rows}
    assert get["grad_param_compute"].ig_compute == 16_647_000 + 17_374_000
    assert (get["attention_column"].fwd_compute, get["attention_row"].ig_compute) == (910_000, 910_000)
    assert (get["mlp_column"].fwd_compute, get["mlp_row"].wg_compute) == (1_239_000, 1_239_000)
    assert get["final_column"].fwd_compute == 910_000
    # embedding_layer's weight-gradient time is a stale variable: the gradient time on the
    # first micro-batch, the previous layer's (final_column's) backward time afterwards.
    emb = [r for r in rows if r.name == "embedding_layer"]
    assert [(r.fwd_compute, r.wg_compute) for r in emb] == [(799_000, 17_374_000), (799_000, 910_000)]
    no_sp = [r for r in aicb.generate(setup(global_batch=16), example_profile()).rows if r.name == "embedding_layer"]
    assert [r.wg_compute for r in no_sp] == [17_374_000, 2_478_000]


def test_aiob_recompute_doubles_flash_once_without_sp_and_twice_with_it():
    flash = 512_000
    plain = {r.name: r for r in aicb.generate(setup(recompute=True), example_profile()).rows}
    assert plain["attention_layer"].fwd_compute == 1_820_000 + flash
    sp = {r.name: r for r in aicb.generate(setup(recompute=True, sp=True), example_profile()).rows}
    assert sp["attention_column"].fwd_compute == int((1_820_000 + flash) * 2 / 2)
    assert sp["attention_column"].ig_compute == int((1_820_000 + flash) / 2)


def test_aiob_with_tp1_writes_no_tp_collective():
    rows = aicb.generate(setup(tp=1, sp=True, model=MOE, world_size=8, global_batch=8), example_profile()).rows
    body = [r for r in rows if r.name not in ("grad_gather", "grad_param_comm", "moe_grad_norm1", "moe_grad_norm2")
            and not r.name.startswith(("cross_entropy", "optimizer"))]
    assert {r.fwd_comm for r in body} | {r.ig_comm for r in body} == {"NONE"}
    assert {r.fwd_size for r in body} | {r.ig_size for r in body} == {0}


def test_a_section_named_after_a_layer_sets_that_layer_time():
    text = EXAMPLE.read_text() if EXAMPLE.exists() else pytest.skip("reference material not found")
    profile = profile_file.parse(text + "final_column:\n    time_gpu_max: 9\n    time_gpu_min: 3\n    time_gpu_avg: 4.2\n")
    final = next(r for r in aicb.generate(setup(sp=True), profile).rows if r.name == "final_column")
    assert (final.fwd_compute, final.ig_compute) == (2100, 2100)  # round(4200) halved


# -- the header ------------------------------------------------------------------------------


def test_pp_comm_is_a_float_with_sp_and_vpp_the_layers_per_stage():
    s = setup(model=model(num_layers=30, hidden_size=1000, num_attention_heads=3, ffn_hidden_size=3000),
              world_size=6, tp=3, pp=2, sp=True, seq_length=1001, global_batch=1)
    w = aicb.generate(s)
    text = w.render().split("\n")[0]
    assert text.endswith("vpp: 15 ga: 1 all_gpus: 6 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 667333.3333333334")
    assert w.header.pp_comm == 667333  # what SimAI's stoi reads
    assert aicb.generate(setup(pp=2, global_batch=8)).render().split("\n")[0].endswith("pp_comm: 4194304")
    assert aicb.generate(setup()).render().split("\n")[0].endswith("pp_comm: 0")


def test_zero_micro_batches_and_zero_layers_are_written_as_aicb_writes_them():
    # AICB only warns when global_batch < micro_batch * dp: ga 0 and no body.
    w = aicb.generate(setup(global_batch=2, sp=True, pp=2))  # dp = 4
    assert w.header.ga == 0 and w.header.text.endswith("pp_comm: 2097152.0")
    assert wf.parse(w.render()).render() == w.render()
    empty = aicb.generate(setup(model=model(num_layers=2), pp=4, world_size=16, global_batch=8))
    assert empty.header.vpp == 0
    assert empty.header.ga == 4  # dp = 2
    assert [r.name for r in empty.rows if r.name.endswith("_layer")] == ["embedding_layer"] * 4


# -- what AICB accepts and refuses -------------------------------------------------------


def test_aicb_accepts_what_megatron_rules_refuse():
    args = ["--world_size=16", "--tensor_model_parallel_size=2", "--global_batch=20", "--num_layers=6",
            "--pipeline_model_parallel=4", "--num_attention_heads=6", "--hidden_size=1536"]
    # pp=4 does not divide the 6 layers: AICB floors them to 1 per stage (dp = 2, ga = 10).
    text = generate(*args, "--schedule", "aicb")
    header = wf.parse(text).header
    assert (header.ga, header.vpp) == (20 // 2, 6 // 4)
    with pytest.raises(ConfigError, match="pp=4 does not divide num_layers=6"):
        generate(*args, "--schedule", "megatron")


def test_sweeps_stay_strict_for_the_aicb_schedule():
    cfg = {"sweep": {"model": ["gpt-7b"], "tp": [2], "global_batch": [20], "schedule": ["aicb"]}}
    from commsweep.setup.config_schema import validate_config

    validate_config(cfg)
    points, invalid = sweep.expand(cfg)
    assert not points and "not a multiple of micro_batch*dp" in invalid[0].describe()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--moe_enable", "--num_experts=8"], "AICB refuses MoE without sequence parallelism"),
        (["--world_size=10", "--tensor_model_parallel_size=4"], "world_size=10 is not divisible by tp*pp=4"),
        (["--world_size=3", "--tensor_model_parallel_size=3", "--hidden_size=4096", "--num_attention_heads=32"],
         "AICB's attention output layer needs tp=3 to divide 4096"),
        (["--world_size=3", "--tensor_model_parallel_size=3", "--hidden_size=3072", "--num_attention_heads=32",
          "--ffn_hidden_size=1000"], "AICB's MLP needs tp=3 to divide ffn_hidden_size=1000"),
        (["--expert_model_parallel_size=2", "--world_size=4"], "number of experts (1) is a multiple of expert_model_parallel_size=2"),
        (["--moe_enable", "--num_experts=8", "--expert_model_parallel_size=3", "--world_size=6",
          "--enable_sequence_parallel"], "number of experts (8)"),
        (["--moe_enable", "--num_experts=8", "--expert_model_parallel_size=2", "--world_size=4",
          "--enable_sequence_parallel", "--dtype=float16"], "expert parallelism with --dtype=float16"),
        (["--moe_grouped_gemm", "--dtype=float32"], "--moe_grouped_gemm needs --dtype=bfloat16"),
        (["--micro_batch=0"], "micro_batch must be at least 1"),
    ],
)
def test_refuses_what_aicb_refuses(argv, words):
    with pytest.raises(ConfigError, match=None) as info:
        generate(*argv)
    assert words in str(info.value)


def test_dense_ep_with_explicit_experts_is_accepted_as_aicb_does():
    text = generate("--world_size=16", "--expert_model_parallel_size=2", "--num_experts=4")
    assert " ep: 2 " in text.split("\n")[0]


def test_ignored_arguments_give_notes_not_errors():
    args = ["--world_size=16", "--tensor_model_parallel_size=2"]
    plain = generate(*args)
    ns = build_parser().parse_args(["generate", *args, "--comp_filepath=nowhere.txt", "--context-parallel-size=2",
                                    "--stage=2", "--gpu_type=H100", "--n_dense_layers=1"])
    text, notes = from_arguments(ns)
    assert text == plain
    assert any("--comp_filepath is ignored without --aiob_enable" in n for n in notes)
    assert any("--context-parallel-size" in n for n in notes)


def test_unknown_or_misspelt_aicb_argument_is_an_error(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--stage=7"])
    assert "invalid choice: 7" in capsys.readouterr().err


def test_malformed_profile_names_its_line(tmp_path):
    bad = tmp_path / "p.txt"
    bad.write_text("train_iter:1\nEmb:\n    time_gpu_max: 3\n    time_gpu_min: x\n    time_gpu_avg: 2\n")
    with pytest.raises(CommsweepError, match=r"p\.txt:4: field 'time_gpu_min'"):
        generate("--aiob_enable", f"--comp_filepath={bad}")


def test_aicb_root_needs_the_aicb_schedule_and_a_checkout(tmp_path):
    with pytest.raises(ConfigError, match="--aicb-root: runs AICB itself, so it needs --schedule aicb"):
        generate("--schedule", "megatron", "--aicb-root", str(tmp_path))
    with pytest.raises(ConfigError, match="is not an AICB checkout"):
        generate("--aicb-root", str(tmp_path))


def test_presets_agree_with_build():
    s = TrainingSetup(model=PRESETS["llama-7b"], world_size=16, tp=4, sp=True, global_batch=8)
    assert build(s, "aicb").render() == aicb.generate(s).render()
