"""Property-based tests: the readers of user input, fed mutated and random input.

Whatever they read, the workload reader, the AIOB reader, the EndToEnd.csv parser and the
config loader either succeed or raise the project's own error (a CommsweepError) that
names where the problem is: the file and line for files, the key for a config. Nothing
else (no IndexError, ValueError, TypeError, RecursionError ...) may escape.

Seeds are files the project makes, plus the reference material when present. Inputs are
derived deterministically (``derandomize``) so CI sees the same cases each run; the
number of inputs tried is printed at the end of the module (run pytest with -s to see it).
"""

from __future__ import annotations

import os
import re
import string
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commsweep.aiob import profile_file as pf
from commsweep.base.errors import CommsweepError, ConfigError, InputError
from commsweep.orchestration import sweep
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.simulate import endtoend
from commsweep.workload import format as wf
from commsweep.workload import megatron
from conftest import REFERENCE, REPO

# COMMSWEEP_FUZZ_EXAMPLES=20000 COMMSWEEP_FUZZ_RANDOM=1 explores further (and differently) by hand.
EXAMPLES = int(os.environ.get("COMMSWEEP_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("COMMSWEEP_FUZZ_RANDOM"), database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
TRIED: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and TRIED:
        listed = ", ".join(f"{k} {v}" for k, v in sorted(TRIED.items()))
        reporter.write_line(f"\nfuzzed inputs: {sum(TRIED.values())} ({listed})")


# -- seeds -----------------------------------------------------------------------------


def _reference(folder: str, pattern: str, limit: int = 6) -> list[str]:
    base = REFERENCE / folder
    files = sorted(base.glob(pattern))[:limit] if base.is_dir() else []
    return [f.read_text(encoding="utf-8") for f in files]


def _workload_seeds() -> list[str]:
    out = []
    for model, tp, pp, sp in (("gpt-7b", 2, 1, True), ("llama-7b", 4, 2, False), ("gpt-13b", 1, 1, False)):
        setup = TrainingSetup(model=PRESETS[model], world_size=16, tp=tp, pp=pp, sp=sp, global_batch=16)
        out.append(megatron.schedule(setup, None, stage=0).workload().render())
    return out + _reference("aicb/workloads", "*.txt") + _reference("simai/examples", "*.txt")


def _aiob_seeds() -> list[str]:
    good = pf.AiobProfile(
        sections=tuple((n, pf.OpTime(max=12.5, min=10, avg=11)) for n in pf.STANDARD_SECTIONS), train_iter=10
    )
    return [pf.render(good)] + _reference("aicb/aiob_inputs", "*.txt")


def _config_seeds() -> list[str]:
    import sweeps

    return [(REPO / "config" / "config.yaml").read_text(), sweeps.text("custom-models"), sweeps.text("partial")]


WORKLOADS = _workload_seeds()
AIOBS = _aiob_seeds()
CONFIGS = _config_seeds()


# -- mutations -------------------------------------------------------------------------

# Tokens that have broken parsers before: huge and odd numbers, signs, separators, unicode.
NASTY = [
    "", " ", "\t", "\n", "\r\n", "\r", "\x00", "\x0c", "\u2028", "\ufeff", ":", "::", "-", "-1", "0", "00",
    "1e3", "1e400", "nan", "inf", "-inf", "1.5", ".5", "5.", "1_000", "0x10", "9" * 20, "9" * 5000,
    "NONE", "ALLREDUCE", "ALLREDUCE_DP_EP", "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "pp_comm:", "checkpoints:",
    "train_iter:", "time_gpu_avg:", "Emb:", "[", "]", "{", "}", "&a", "*a", "!!python/object:os.system",
    "é", "😀", "%", "'", '"', ",", "(0.00%)", "-nan", "NaN or Inf",
]
token = st.one_of(st.sampled_from(NASTY), st.text(string.printable, max_size=12), st.text(max_size=6))
# What may replace a number: other numbers, in every spelling a parser may meet.
number = st.one_of(
    st.integers().map(str), st.integers(-(2**70), 2**70).map(str), st.floats().map(repr),
    st.sampled_from(["9" * 4301, "9" * 5000, "1" + "0" * 19, str(2**63), str(2**63 - 1), "-0", "+1", "1e999",
                     "0.0", "1.", "٣", "１２"]),
)
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


@st.composite
def mutated(draw, seeds: list[str]) -> str:
    """A seed with a few edits: replaced, deleted, duplicated or swapped lines and tokens."""
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        lines = text.split("\n")
        kind = draw(st.sampled_from(["number", "number", "token", "token", "insert", "delete", "dup", "swap",
                                     "cut", "line"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if kind == "number":
            spans = [m.span() for m in NUMBER.finditer(lines[i])]
            if spans:
                a, b = draw(st.sampled_from(spans))
                lines[i] = lines[i][:a] + draw(number) + lines[i][b:]
        elif kind == "token":
            parts = lines[i].split(" ") if " " in lines[i] else lines[i].split("\t")
            j = draw(st.integers(0, max(len(parts) - 1, 0)))
            parts[j] = draw(token)
            lines[i] = (" " if " " in lines[i] else "\t").join(parts)
        elif kind == "insert":
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(token) + lines[i][pos:]
        elif kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, max(len(lines) - 1, 0)))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "cut":
            text = text[: draw(st.integers(0, len(text)))]
            continue
        elif kind == "line":
            lines.insert(i, draw(st.text(max_size=40)))
        text = "\n".join(lines)
    return text


random_text = st.one_of(st.text(max_size=300), st.text(string.printable, max_size=300))


def line_count(text: str) -> int:
    return text.count("\n") + 1


def assert_located(err: InputError, source, text: str | None = None) -> None:
    """The error names the file and a line of it."""
    assert err.file == str(source), str(err)
    assert err.line is not None, f"no line in: {err}"
    if text is not None:
        # (one past the end: a missing line)
        assert 1 <= err.line <= line_count(text) + 1, f"line {err.line} outside the file: {err}"
    assert str(err).startswith(f"{source}:{err.line}: ")


def check_file_bytes(tmp_path_factory, name: str, data: bytes, read) -> None:
    """``read`` of a file named ``name`` holding ``data``: success or an error naming the file and a line."""
    path = tmp_path_factory.mktemp("bytes") / name
    path.write_bytes(data)
    try:
        read(path)
    except InputError as err:
        assert_located(err, path)


# -- the workload reader ---------------------------------------------------------------


def check_workload(text: str) -> None:
    try:
        workload = wf.parse(text, source="w.txt")
    except InputError as err:
        assert_located(err, "w.txt", text)
        return
    # What the reader accepts, it writes back byte for byte, and SimAI's pass runs on it.
    assert workload.render() == text
    list(wf.collectives(workload))


@FUZZ
@given(mutated(WORKLOADS))
def test_workload_reader_mutated(text):
    TRIED["workload"] += 1
    check_workload(text)


@FUZZ
@given(random_text)
def test_workload_reader_random(text):
    TRIED["workload"] += 1
    check_workload(text)


@settings(FUZZ, max_examples=EXAMPLES // 5)
@given(st.binary(max_size=200) | mutated(WORKLOADS).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_workload_reader_bytes(tmp_path_factory, data):
    TRIED["workload"] += 1
    check_file_bytes(tmp_path_factory, "w.txt", data, wf.read)


# -- the AIOB reader -------------------------------------------------------------------


def check_aiob(text: str) -> None:
    for standard in (False, True):
        try:
            profile = pf.parse(text, source="p.txt", require_standard=standard)
        except InputError as err:
            assert_located(err, "p.txt", text)
            continue
        # What the reader accepts, AICB's aggregation can use.
        pf.aicb_compute_times(profile)


@FUZZ
@given(mutated(AIOBS))
def test_aiob_reader_mutated(text):
    TRIED["aiob"] += 1
    check_aiob(text)


@FUZZ
@given(random_text)
def test_aiob_reader_random(text):
    TRIED["aiob"] += 1
    check_aiob(text)


@settings(FUZZ, max_examples=EXAMPLES // 5)
@given(st.binary(max_size=200))
def test_aiob_reader_bytes(tmp_path_factory, data):
    TRIED["aiob"] += 1
    check_file_bytes(tmp_path_factory, "p.txt", data, pf.read)


# -- SimAI's EndToEnd.csv (commsweep.simulate.endtoend, the simulation stage) ----------


def _endtoend_seeds() -> list[str]:
    seeds = _reference("simai/endtoend", "*EndToEnd.csv")
    row = "layer0," + ",".join([endtoend.RUN_NAME] + ["12"] * len(endtoend.ROW_FIELDS))
    seeds.append(endtoend.render("results/points/p/", [row, row.replace("layer0", "layer,1")],
                                 tuple(float(i) for i in range(len(endtoend.COMPONENTS))), 100.0))
    return seeds


ENDTOENDS = _endtoend_seeds()


def check_endtoend(text: str) -> None:
    try:
        endtoend.parse(text, source="EndToEnd.csv")
    except InputError as err:
        assert_located(err, "EndToEnd.csv", text)


@FUZZ
@given(st.one_of(mutated(ENDTOENDS), random_text))
def test_endtoend_parser(text):
    TRIED["endtoend"] += 1
    check_endtoend(text)


@settings(FUZZ, max_examples=EXAMPLES // 5)
@given(st.binary(max_size=200))
def test_endtoend_reader_bytes(tmp_path_factory, data):
    TRIED["endtoend"] += 1
    check_file_bytes(tmp_path_factory, "EndToEnd.csv", data, endtoend.read)


# -- the config loader -----------------------------------------------------------------


def check_config(path: Path) -> None:
    """load_config + points_from_config: success or a ConfigError naming the key or line."""
    try:
        config = sweep.load_config(path)
        sweep.points_from_config(config)
    except ConfigError as err:
        located = err.key is not None or (err.source is not None and err.source.startswith(f"{path}:"))
        assert located, f"neither key nor line in: {err}"
        if err.source is not None:
            assert err.source.startswith(str(path))
    except CommsweepError as err:  # pragma: no cover - the property's failure message
        raise AssertionError(f"{type(err).__name__} is not a ConfigError: {err}") from None


@settings(FUZZ, max_examples=EXAMPLES // 2)
@given(mutated(CONFIGS))
def test_config_loader_mutated_text(tmp_path_factory, text):
    TRIED["config"] += 1
    path = tmp_path_factory.mktemp("c") / "c.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check_config(path)


# Values a user might put anywhere in a config.
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**6), st.integers(), st.floats(allow_nan=True),
    st.sampled_from(["gpt-7b", "netA", "megatron", "aicb", "first", "", "x", "rope", "rmsnorm", "8"]),
    st.text(max_size=5),
)
value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
MODEL_FIELDS = [
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size", "max_position_embeddings",
    "num_query_groups", "swiglu", "position_embedding", "normalization", "add_bias_linear", "tie_embeddings",
    "num_experts", "moe_topk", "aicb_name", "base", "name",
]
KEY_PATHS = (
    [("sweep", a) for a in sweep.AXES]
    + [("models", "m", f) for f in MODEL_FIELDS]
    + [("networks", "netA", f) for f in sweep.NETWORK_FIELDS]
    + [("aiob", "backend"), ("aiob", "gpu"), ("generator", "megatron_pp_stage"), ("skip_invalid",), ("models",),
       ("networks",), ("sweep",)]
)


@st.composite
def edited_config(draw) -> dict:
    """A valid config with a few keys set to arbitrary values (or axis lists of them)."""
    config = yaml.safe_load(draw(st.sampled_from(CONFIGS[1:])))
    config.setdefault("models", {})["m"] = {"base": "gpt-7b", "num_layers": 4}
    config.setdefault("sweep", {})["model"] = ["m"]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(KEY_PATHS))
        new = draw(value)
        if path[0] == "sweep" and len(path) == 2 and draw(st.booleans()):
            new = draw(st.lists(scalar, min_size=1, max_size=3))
        node = config
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[path[-1]] = new
    return config


@settings(FUZZ, max_examples=EXAMPLES // 2)
@given(edited_config())
def test_config_loader_edited_values(tmp_path_factory, config):
    TRIED["config"] += 1
    path = tmp_path_factory.mktemp("c") / "c.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    check_config(path)


# -- what fuzzing found (each was a crash or an error without its place) ---------------

ROW = "a\t-1\t0\tNONE\t{fwd}\t0\tNONE\t0\t0\tNONE\t0\t100"
HEADER = WORKLOADS[0].split("\n")[0]


@pytest.mark.parametrize(
    "text, message",
    [
        (f"{HEADER}\n1\n{ROW.format(fwd='9' * 5000)}\n", "w.txt:3: field 'fwd_size': a 5000-digit number does not fit"),
        (f"{HEADER}\n{'9' * 5000}\n", "w.txt:2: field 'row_count': a 5000-digit number does not fit in 64 bits"),
        (f"{HEADER}\n1\n{ROW.format(fwd=0).replace('-1', '-0')}\n", "w.txt:3: field 'dependency': expected an integer"),
    ],
)
def test_found_workload(text, message):
    with pytest.raises(InputError) as err:
        wf.parse(text, source="w.txt")
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    "text, message",
    [
        ("train_iter:" + "9" * 5000 + "\n", "p.txt:1: field 'train_iter': expected an iteration count, got 5000 digits"),
        ("train_iter:1\nEmb:\n    time_gpu_max: " + "9" * 5000 + "\n", "p.txt:3: field 'time_gpu_max': expected a finite"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 2\n    time_gpu_min: 1\n    time_gpu_avg: 1\n",
         "p.txt:5: field 'layernorm': missing sections: layernorm"),
    ],
)
def test_found_aiob(text, message):
    with pytest.raises(InputError) as err:
        pf.parse(text, source="p.txt", require_standard=True)
    assert str(err.value).startswith(message)


def test_found_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"HYBRID\n2\n\xff\n")
    for read in (wf.read, pf.read):
        with pytest.raises(InputError, match=r"w.txt:3: not a UTF-8 text file \(invalid start byte at byte 9\)"):
            read(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("models:\n  m: {base: gpt-7b, num_query_groups: [8]}\nsweep:\n  model: [m]\n",
         "models.m.num_query_groups: [8] is not of type 'integer', 'null'"),
        ("models:\n  m: {base: [], num_layers: 8}\nsweep:\n  model: [m]\n", "models.m.base: [] is not of type 'string'"),
        ("models:\n  m: {base: gpt-9b, num_layers: 8}\nsweep:\n  model: [m]\n", "models.m.base: unknown base model 'gpt-9b'"),
        ("models:\n  m: {num_layers: 8}\nsweep:\n  model: [m]\n", "models.m.hidden_size: missing (a required key)"),
        ("models:\n  m: {base: gpt-7b, num_layers: 0}\nsweep:\n  model: [m]\n", "models.m.num_layers: 0 is less than the minimum of 1"),
        ("models:\n  m: {base: gpt-7b, swiglu: 'yes'}\nsweep:\n  model: [m]\n", "models.m.swiglu: 'yes' is not of type 'boolean'"),
        ("models:\n  &a gpt-x: {base: gpt-7b}\n  ? !!null ''\n  : {base: gpt-7b}\n",
         "models.None: model names must be strings"),
        ("sweep:\n  model: [nope]\n", "sweep.model: unknown model 'nope'"),
        ("sweep:\n  tp: [1]\n\x00\n", "c.yaml:3:1: invalid YAML: unacceptable character #x0000"),
        ("sweep:\n  tp: [" + "9" * 5000 + "]\n", "c.yaml:2:8: invalid YAML: a number with thousands of digits"),
        ("- 1\n", "<top level>: the config must be a mapping"),
    ],
)
def test_found_config(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        sweep.points_from_config(sweep.load_config(path))
    assert message in str(err.value)
