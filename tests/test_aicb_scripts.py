"""AICB's own scripts' command lines parse in commsweep as in AICB, prefixes included.

AICB's README makes workloads with ``scripts/megatron_gpt.sh`` and
``scripts/megatron_workload_with_aiob.sh``; for DeepSeek models both pass ``--n_dense_layer``,
a prefix of AICB's ``--n_dense_layers`` that AICB's argparse resolves. The scripts' variable
expansion is written below as data (aliyun/aicb at commit 23eec3c48ca2d2d93dd888a4c7b22ab4421e782f:
their defaults, their ``-m/--model_size`` cases, the options exercised here and the words of
their ``cmd=``), and every command line they make, for each model they know, with and without
``--sp``, ``--aiob_enable`` and ``--comp_filepath``, must parse in ``commsweep generate`` and
``commsweep audit`` to the values AICB's parser gives. AICB's parser is itself written as data
here (its flags' types and defaults, ``utils/utils.py`` ``get_params``); with ``AICB_ROOT`` set to
a checkout of that commit, the values are also compared with its real parser.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commsweep.orchestration import cli
from commsweep.setup.arguments import AICB_FLAGS, AmbiguousPrefix, resolve_aicb_prefixes

# -- AICB's parser (utils/utils.py at 23eec3c: get_params and the get_*_params it calls) ----------

AICB_INTS = {
    "world_size": 1, "tensor_model_parallel_size": 1, "pipeline_model_parallel": 1, "context_parallel_size": 1,
    "pp_rank": -1, "global_batch": 4, "micro_batch": 1, "epoch_num": 1, "ffn_hidden_size": None,
    "hidden_size": 1024, "num_layers": 24, "seq_length": 2048, "num_attention_heads": None, "vocab_size": 32000,
    "max_position_embeddings": 4096, "stage": 3, "reduce_bucket_size": int(5e8), "allgather_bucket_size": int(5e8),
    "param_persistence_threshold": int(1e5), "model_persistence_threshold": sys.maxsize,
    "max_live_parameters": int(1e9), "prefetch_bucket_size": int(1e9), "make_vocab_size_divisible_by": 128,
    "begin_size": 1048576, "end_size": 1048576, "iter_num": 500, "multi_all_reduce_enable": 0,
    "expert_model_parallel_size": 1, "num_experts": 1, "moe_router_topk": 1,
    "n_dense_layers": 3, "n_shared_expert": 2, "qk_rope_dim": 64, "qk_nope_dim": 128, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "v_head_dim": 128,
}
AICB_STRINGS = {"frame": "Megatron", "gpu_type": None, "dtype": "bfloat16", "model_name": None,
                "test_comm": "all_reduce", "activation_func": None, "comp_filepath": None, "gated_linear_unit": False}
AICB_SWITCHES = (
    "computation_enable", "enable_visual", "workload_only", "add_bias_linear", "use_flash_attn", "swiglu",
    "amp_enabled", "contiguous_gradients", "enable_sequence_parallel", "use_distributed_optimizer",
    "overlap_grad_reduce", "overlap_version", "moe_enable", "moe_grouped_gemm", "aiob_enable", "bias_gelu_fusion",
    "openai_gelu", "onnx_safe", "squared_relu", "recompute_activations",
)


def dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def aicb_values(words: list[str]) -> dict:
    """What AICB's parser gives for ``words`` (every word ``--flag=value`` or a switch, full names)."""
    values = {**AICB_INTS, **AICB_STRINGS, **dict.fromkeys(AICB_SWITCHES, False)}
    for word in words:
        flag, eq, text = word.partition("=")
        name = dest(flag)
        values[name] = True if not eq else int(text) if name in AICB_INTS else text
    return values


def test_aicb_parser_as_data_is_aicb_flags():
    assert sorted(dest(f) for f in AICB_FLAGS if f not in ("-h", "--help")) == \
        sorted([*AICB_INTS, *AICB_STRINGS, *AICB_SWITCHES])


# -- the scripts (scripts/*.sh at 23eec3c), as data --------------------------------------------------
# A word of ``cmd=``: ("=", "--flag", var): always ``--flag=$var``; ("$", var): ``${var}``, a word
# when set; (":+", "--flag", var): ``${var:+--flag=$var}``.

_DEEPSEEK = dict(frame="DeepSeek", moe_enable="--moe_enable", q_lora_rank="1536", kv_lora_rank="512",
                 qk_nope_dim="128", qk_rope_dim="64", v_head_dim="128", tensor_model_parallel_size="1")
_SHARED_MODELS = {
    "175": dict(model_name="gpt_175B", num_layers="96", hidden_size="12288", num_attention_heads="96",
                tensor_model_parallel_size="8"),
    "22": dict(model_name="gpt_22B", num_layers="48", hidden_size="6144", num_attention_heads="64",
               tensor_model_parallel_size="8"),
    "13": dict(model_name="gpt_13B", num_layers="40", hidden_size="5120", num_attention_heads="40"),
    "deepseek671": dict(_DEEPSEEK, model_name="DeepSeek_671B", num_layers="61", hidden_size="18432",
                        num_attention_heads="128", ffn_hidden_size="2048", num_experts="256", n_shared_expert="1",
                        n_dense_layer="3"),
    "deepseek236": dict(_DEEPSEEK, model_name="DeepSeek_236B", num_layers="60", hidden_size="12288",
                        num_attention_heads="128", ffn_hidden_size="1536", num_experts="160", n_shared_expert="2",
                        n_dense_layer="1"),
    "deepseek16": dict(_DEEPSEEK, model_name="DeepSeek_16B", num_layers="27", hidden_size="10944",
                       num_attention_heads="16", ffn_hidden_size="1408", q_lora_rank="0", num_experts="64",
                       n_shared_expert="2", n_dense_layer="1"),
    "deepseek": dict(frame="DeepSeek", model_name="DeepSeek", moe_enable="--moe_enable"),
}
_TAIL = [
    (":+", "--ffn_hidden_size", "ffn_hidden_size"), (":+", "--comp_filepath", "comp_filepath"), ("$", "moe_enable"),
    (":+", "--moe_router_topk", "moe_router_topk"), (":+", "--num_experts", "num_experts"),
    (":+", "--expert_model_parallel_size", "expert_model_parallel_size"), ("$", "grouped_gemm"),
    *[(":+", f"--{v}", v) for v in ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim",
                                    "n_shared_expert")],
    (":+", "--n_dense_layer", "n_dense_layer"),
]
SCRIPTS = {
    "megatron_gpt.sh": dict(
        # Its defaults; WORLD_SIZE (nodes) and NUM_GPUS (nvidia-smi -L) as on one 8-GPU node, and
        # --world_size 8 given (the script's dp_num reads that lowercase variable).
        defaults=dict(WORLD_SIZE="1", NUM_GPUS="8", world_size="8", model_size="13", num_layers="40",
                      num_attention_heads="40", hidden_size="5120", seq_length="2048", micro_batch="1", epoch_num="1",
                      tensor_model_parallel_size="8", pipeline_model_parallel="1", vocab_size="50257",
                      model_name="gpt_13b", ga_num="2", frame="Megatron", max_position_embeddings="4096",
                      num_experts="1"),
        models={**_SHARED_MODELS,
                "7": dict(model_name="gpt_7B", num_layers="36", hidden_size="4096", num_attention_heads="32"),
                "405": dict(model_name="llama_405B", num_layers="128", hidden_size="16384", ffn_hidden_size="53248",
                            num_attention_heads="128", tensor_model_parallel_size="8", pipeline_model_parallel="16"),
                "65": dict(model_name="llama_65B", num_layers="80", hidden_size="8192", ffn_hidden_size="28672",
                           num_attention_heads="64", tensor_model_parallel_size="8", pipeline_model_parallel="2"),
                "moe": dict(model_name="Mixtral_8*7B", num_layers="32", hidden_size="4096", num_attention_heads="32",
                            ffn_hidden_size="14336", tensor_model_parallel_size="2", moe_enable="--moe_enable",
                            grouped_gemm="--moe_grouped_gemm")},
        # world_size=$(($WORLD_SIZE * $NUM_GPUS)); dp_num=$((world_size/tp/pp)); global_batch=$((ga_num*dp_num*micro_batch))
        computed=lambda v: dict(
            cmd_world_size=str(int(v["WORLD_SIZE"]) * int(v["NUM_GPUS"])),
            global_batch=str(int(v["ga_num"]) * (int(v["world_size"]) // int(v["tensor_model_parallel_size"])
                                                 // int(v["pipeline_model_parallel"])) * int(v["micro_batch"]))),
        words=[("=", "--frame", "frame"), ("=", "--model_name", "model_name"), ("=", "--world_size", "cmd_world_size"),
               ("=", "--tensor_model_parallel_size", "tensor_model_parallel_size"),
               ("=", "--micro_batch", "micro_batch"), ("=", "--global_batch", "global_batch"),
               ("=", "--epoch_num", "epoch_num"), ("=", "--num_layers", "num_layers"),
               ("=", "--hidden_size", "hidden_size"), ("=", "--num_attention_heads", "num_attention_heads"),
               ("=", "--seq_length", "seq_length"), ("=", "--vocab_size", "vocab_size"),
               ("=", "--pipeline_model_parallel", "pipeline_model_parallel"), ("word", "--use-distributed-optimizer"),
               ("=", "--max_position_embeddings", "max_position_embeddings"), ("$", "aiob_enable"),
               ("$", "enable_visual"), ("$", "workload_only"), ("$", "sp_enable"), ("$", "use_flash_attn"),
               ("$", "swiglu"), *_TAIL],
    ),
    "megatron_workload_with_aiob.sh": dict(
        defaults=dict(frame="Megatron", world_size="32", tensor_model_parallel_size="8", pipeline_model_parallel="1",
                      global_batch="1024", micro_batch="1", num_layers="40", seq_length="4096", hidden_size="5120",
                      epoch_num="1", num_attention_heads="40", model_size="13", max_position_embeddings="4096",
                      vocab_size="50257", num_experts="1", gpu_type="None"),
        models={**_SHARED_MODELS,
                "7": dict(model_name="gpt_7B", num_layers="36", hidden_size="4096", num_attention_heads="32",
                          tensor_model_parallel_size="4"),
                "405": dict(model_name="llama_405B", num_layers="128", hidden_size="16384", ffn_hidden_size="53248",
                            num_attention_heads="128"),
                "moe": dict(model_name="Mixtral_8*7B", num_layers="32", hidden_size="4096", num_attention_heads="32",
                            ffn_hidden_size="14336", tensor_model_parallel_size="4", moe_enable="--moe_enable",
                            grouped_gemm="--moe_grouped_gemm")},
        computed=lambda v: {},
        words=[("=", "--gpu_type", "gpu_type"), ("=", "--frame", "frame"), ("=", "--world_size", "world_size"),
               ("=", "--tensor_model_parallel_size", "tensor_model_parallel_size"),
               ("=", "--pipeline_model_parallel", "pipeline_model_parallel"), ("=", "--global_batch", "global_batch"),
               ("=", "--micro_batch", "micro_batch"), ("=", "--num_layers", "num_layers"),
               ("=", "--seq_length", "seq_length"), ("=", "--hidden_size", "hidden_size"),
               ("=", "--epoch_num", "epoch_num"), ("=", "--num_attention_heads", "num_attention_heads"),
               ("=", "--model_name", "model_name"), ("=", "--max_position_embeddings", "max_position_embeddings"),
               ("=", "--vocab_size", "vocab_size"), ("word", "--use-distributed-optimizer"), ("$", "aiob_enable"),
               ("$", "use_flash_attn"), ("$", "swiglu"), ("$", "sp_enable"), ("$", "recompute_activations"), *_TAIL],
    ),
}
# The scripts' own options exercised here, and the variable each sets: --sp, --aiob_enable, --comp_filepath FILE.
OPTIONS = {"sp": ("sp_enable", "--enable_sequence_parallel"), "aiob": ("aiob_enable", "--aiob_enable"),
           "comp": ("comp_filepath", "results/aiob/gpt.txt")}


def script_words(script: str, model: str, options: tuple[str, ...]) -> list[str]:
    """The words after the program in ``script -m model`` with ``options``."""
    spec = SCRIPTS[script]
    values = dict(spec["defaults"])
    values.update(OPTIONS[o] for o in options)  # the option loop runs before the model's case
    values.update(spec["models"][model])
    values.update(spec["computed"](values))
    words = []
    for kind, *rest in spec["words"]:
        if kind == "word":
            words.append(rest[0])
        elif kind == "=":
            words.append(f"{rest[0]}={values[rest[1]]}")
        elif values.get(rest[-1]):
            words.append(values[rest[0]] if kind == "$" else f"{rest[0]}={values[rest[1]]}")
    return words


CASES = [(script, model, options) for script in SCRIPTS for model in SCRIPTS[script]["models"]
         for options in ((), ("sp",), ("aiob",), ("aiob", "comp"), ("sp", "aiob", "comp"))]


def full_words(words: list[str]) -> list[str]:
    """The words with each flag written out as AICB resolves it (for the expected values)."""
    return resolve_aicb_prefixes(words, AICB_FLAGS)


def commsweep_values(command: str, words: list[str]) -> dict:
    """AICB's flags as commsweep's ``command`` parses ``words``: None stands for AICB's default."""
    extra = {"audit": ["w.txt"], "timeline": ["w.txt", "-o", "t.png"]}.get(command, [])
    ns = cli.build_parser(only=command).parse_args([command, *extra, *words])
    defaults = aicb_values([])
    return {name: default if getattr(ns, name) is None else getattr(ns, name) for name, default in defaults.items()}


def test_the_scripts_use_a_prefix():
    # The point of this file: AICB's scripts pass --n_dense_layer, which AICB reads as --n_dense_layers.
    words = script_words("megatron_workload_with_aiob.sh", "deepseek671", ())
    assert "--n_dense_layer=3" in words and "--q_lora_rank=1536" in words


@pytest.mark.parametrize("script, model, options", CASES, ids=["-".join([s.split(".")[0], m, *o]) for s, m, o in CASES])
@pytest.mark.parametrize("command", ["generate", "audit"])
def test_a_script_command_line_parses_as_aicb_parses_it(script, model, options, command):
    words = script_words(script, model, options)
    assert commsweep_values(command, words) == aicb_values(full_words(words))


def test_generate_writes_the_deepseek_workload_of_aicbs_script(tmp_path):
    words = script_words("megatron_workload_with_aiob.sh", "deepseek16", ("sp",))
    words = [w for w in words if not w.startswith(("--world_size", "--global_batch", "--num_layers"))]
    out = tmp_path / "w.txt"
    # A smaller cluster and model than the script's, its --n_dense_layer prefix as written: the
    # first layer dense (the workload's dense MLP), the other MoE.
    assert cli.main(["generate", *words, "--world_size=8", "--global_batch=16", "--num_layers=2",
                     "--schedule=megatron", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ")
    assert "\nlayer0_mlp_fc1\t" in text and "\nlayer1_moe_expert_fc1\t" in text and "layer0_moe" not in text


def test_prefixes_resolve_among_aicbs_flags_only(capsys):
    own = set(AICB_FLAGS) | {"--expert_tensor_parallel_size", "--pp_stage", "--untie-embeddings", "--model"}
    # Unique among AICB's flags, though not among commsweep's: AICB's meaning.
    assert resolve_aicb_prefixes(["--expert=2", "--pp_=1", "--n_dense_layer", "3"], own) == \
        ["--expert_model_parallel_size=2", "--pp_rank=1", "--n_dense_layers", "3"]
    # A prefix of commsweep's flags only is no flag (AICB would refuse it); an exact flag is itself.
    assert resolve_aicb_prefixes(["--untie", "--model", "gpt-7b"], own) == ["--untie", "--model", "gpt-7b"]
    # After --, nothing is an option.
    assert resolve_aicb_prefixes(["--", "--n_dense"], own) == ["--", "--n_dense"]
    with pytest.raises(AmbiguousPrefix, match="ambiguous option: --n=3 could match --num_layers, "
                                              "--num_attention_heads, --num_experts, --n_dense_layers, --n_shared_expert"):
        resolve_aicb_prefixes(["--n=3"], own)
    # Through the command line: refused with exit status 2, as AICB refuses them.
    for words, said in ((["--use"], "ambiguous option: --use could match --use_flash_attn, --use-distributed-optimizer"),
                        (["--untie"], "unrecognized arguments: --untie"),
                        (["--num_q=2"], "unrecognized arguments: --num_q=2")):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["generate", *words])
        assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_profile_and_trace_take_prefixes_too():
    for command in ("profile", "trace"):
        ns = cli.build_parser(only=command).parse_args([command, "--hidden=256", "--tensor=2", "--n_dense_layer=1"])
        assert (ns.hidden_size, ns.tensor_model_parallel_size, ns.n_dense_layers) == (256, 2, 1)


# -- against AICB's real parser ------------------------------------------------------------------------

ROOT = os.environ.get("AICB_ROOT")
_REAL = """
import argparse, json, sys
sys.path.insert(0, sys.argv[1])
from utils import utils
class Parsed(Exception):
    pass
parse = argparse.ArgumentParser.parse_args
def capture(self, args=None, namespace=None):
    raise Parsed(vars(parse(self, args, namespace)))  # get_params' values before it derives others
argparse.ArgumentParser.parse_args = capture
out = []
for words in json.load(sys.stdin):
    sys.argv = ["aicb", *words]
    try:
        utils.get_params()
    except Parsed as parsed:
        out.append(parsed.args[0])
    except SystemExit as exit_:
        out.append({"exit": exit_.code})
print(json.dumps(out))
"""


@pytest.mark.skipif(not (ROOT and (Path(ROOT) / "utils" / "utils.py").is_file()),
                    reason="AICB_ROOT does not point to an AICB checkout (set AICB_ROOT=/path/to/aicb at 23eec3c48ca2 "
                           "to compare with AICB's real parser); the values above are AICB's parser as data")
def test_the_script_command_lines_against_aicbs_real_parser():
    lines = [script_words(*case) for case in CASES]
    refused = [["--n=3"], ["--use"], ["--mode=x"]]
    run = subprocess.run([sys.executable, "-c", _REAL, ROOT], input=json.dumps(lines + refused), text=True,
                         capture_output=True)
    assert run.returncode == 0, run.stderr  # AICB's utils import numpy and pandas
    real = json.loads(run.stdout.splitlines()[-1])
    for words, parsed in zip(lines, real):
        assert parsed == aicb_values(full_words(words)), words
        assert commsweep_values("generate", words) == parsed, words
    assert real[len(lines):] == [{"exit": 2}] * len(refused)
    for words in refused:
        with pytest.raises(SystemExit) as exit_:
            cli.build_parser(only="generate").parse_args(["generate", *words])
        assert exit_.value.code == 2
