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
    with pytest.raises(ConfigError, match="--frame: only --frame=Megatron"):
        setup_from_args(parse(["--frame=DeepSpeed"]))
