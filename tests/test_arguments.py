"""AICB-compatible arguments: AICB command lines parse unchanged, and setups round-trip."""

from __future__ import annotations

import argparse
import csv
import shlex

import pytest

from commsweep.setup.arguments import (
    add_aiob_arguments, add_training_arguments, same_setup, setup_from_args, to_aicb_argv, to_commsweep_argv,
)
from commsweep.base.errors import ConfigError
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup




def parse(argv):
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_training_arguments(parser)
    add_aiob_arguments(parser)
    return parser.parse_args(argv)


def test_manifest_command_lines_parse(reference):
    manifest = reference("aicb", "workloads", "MANIFEST.csv")
    with open(manifest, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 16
    for row in rows:
        ns = parse(shlex.split(row["command_args"]))
        setup = setup_from_args(ns)
        assert setup.model.num_layers == 32 and setup.model.hidden_size == 4096
        assert setup.model.ffn_hidden_size == 4 * 4096  # AICB's default
        assert setup.dp * setup.tp == 16
        assert setup.num_microbatches == 1
        assert setup.sp == ("--enable_sequence_parallel" in row["command_args"])


def test_aicb_defaults():
    setup = setup_from_args(parse([]))
    m = setup.model
    assert (m.num_layers, m.hidden_size, m.vocab_size, setup.seq_length) == (24, 1024, 32000, 2048)
    assert m.num_attention_heads == 24  # AICB: heads default to num_layers
    assert setup_from_args(parse(["--swiglu", "--hidden_size=4096"])).model.ffn_hidden_size == 10880  # int(4h*2/3 / 64) * 64


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("sp", [False, True])
def test_commsweep_argv_round_trips(name, sp):
    setup = TrainingSetup(model=PRESETS[name], world_size=32, tp=2, pp=2, ep=2 if PRESETS[name].is_moe else 1,
                          sp=sp, micro_batch=2, global_batch=64, seq_length=4096, recompute=True)
    assert same_setup(setup_from_args(parse(to_commsweep_argv(setup))), setup)


def test_aicb_argv_hides_what_aicb_cannot_express():
    setup = TrainingSetup(model=PRESETS["llama-70b"], world_size=64, tp=8, global_batch=8)
    argv = to_aicb_argv(setup)
    assert "--swiglu" in argv and not any(a.startswith(("--num-query-groups", "--position-embedding", "--normalization")) for a in argv)


def test_preset_and_overrides():
    setup = setup_from_args(parse(["--model", "llama-70b", "--num_layers", "4"]))
    assert setup.model.num_query_groups == 8 and setup.model.num_layers == 4


def test_unknown_argument_is_rejected(capsys):
    with pytest.raises(SystemExit):
        parse(["--tensor_parallel=2"])
    assert "unrecognized arguments: --tensor_parallel=2" in capsys.readouterr().err


def test_unsupported_frame():
    with pytest.raises(ConfigError, match="--frame: commsweep emulates --frame=Megatron and --frame=DeepSeek, got 'DeepSpeed'"):
        setup_from_args(parse(["--frame=DeepSpeed"]))


def test_deepseek_frame_takes_aicb_defaults_and_the_preset():
    # AICB's get_deepseek_params defaults, with every layer after the third an MoE layer.
    m = setup_from_args(parse(["--frame=DeepSeek", "--ffn_hidden_size=512"])).model
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (1536, 512, 128, 64, 128)
    assert m.moe_first_k_dense == 3 and m.moe_shared_expert_intermediate_size == 2 * 512 and m.num_experts == 1
    # A preset with MLA picks the frame; its flags override the preset; AICB's q_lora_rank 0 is no query latent.
    m = setup_from_args(parse(["--model", "deepseek-v3", "--q_lora_rank=0", "--n_dense_layers=1"])).model
    assert m.q_lora_rank is None and m.moe_first_k_dense == 1 and m.moe_ffn_hidden_size == 2048
    with pytest.raises(ConfigError, match="--frame: deepseek-v3 has multi-latent attention"):
        setup_from_args(parse(["--model", "deepseek-v3", "--frame=Megatron"]))
    # Under AICB's Megatron frame the DeepSeek flags are ignored, as AICB ignores them.
    assert not setup_from_args(parse(["--kv_lora_rank=64"])).model.is_mla
