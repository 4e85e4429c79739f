"""One spelling per flag: commsweep's own use hyphens, upstream ones keep AICB's and SimAI's, old spellings still parse."""

from __future__ import annotations

import argparse

import pytest

from commsweep.orchestration import cli

NETWORK = ["-g_p_s", "8", "-n_p_s", "4", "-nv", "360", "-nic", "48.5"]
SIMULATE = ["simulate", "-w", "w.txt", "-g", "16", "-r", "p-"]


def parse(argv):
    return vars(cli.build_parser(only=argv[0]).parse_args(argv))


@pytest.mark.parametrize(
    "new, old",
    [
        (["generate", "--pp-stage", "last"], ["generate", "--pp_stage", "last"]),
        (["generate", "--num-query-groups", "8", "--position-embedding", "rope", "--untie-embeddings"],
         ["generate", "--num_query_groups", "8", "--position_embedding", "rope", "--untie_embeddings"]),
        (["audit", "w.txt", "--pp-stage", "1", "--ratio-dir", "r"], ["audit", "w.txt", "--pp_stage", "1", "--ratio_dir", "r"]),
        (["timeline", "w.txt", "-o", "t.png", "--pp-stage", "last"], ["timeline", "w.txt", "-o", "t.png", "--pp_stage", "last"]),
        (["profile", "--list-gpus", "--gemm-efficiency", "0.5", "--attention-efficiency", "0.4",
          "--memory-efficiency", "0.3", "--launch-us", "2"],
         ["profile", "--list_gpus", "--gemm_efficiency", "0.5", "--attention_efficiency", "0.4",
          "--memory_efficiency", "0.3", "--launch_us", "2"]),
        (["trace", "--scaled-dp", "2"], ["trace", "--scaled_dp", "2"]),
        # audit's own names for SimAI's network flags, and the long names SimAI gives them
        (["audit", "w.txt", *NETWORK], ["audit", "w.txt", "--gpus_per_server", "8", "--nics_per_server", "4",
                                        "--nvlink_gbps", "360", "--nic_gbps", "48.5"]),
        (["audit", "w.txt", *NETWORK], ["audit", "w.txt", "--gpus-per-server", "8", "--nic_per_server", "4",
                                        "--nvlink", "360", "--nic_busbw", "48.5"]),
        ([*SIMULATE, *NETWORK, "--ratio-dir", "r"], [*SIMULATE, "--gpus_per_server", "8", "--nics_per_server", "4",
                                                     "--nvlink_gbps", "360", "--nic_gbps", "48.5", "--ratio_dir", "r"]),
    ],
)
def test_old_spellings_parse_the_same(new, old):
    assert parse(new) == parse(old)


def test_network_flags_are_one_definition():
    # simulate, audit and timeline read SimAI's network into the same names, as typed.
    for argv in ([*SIMULATE, *NETWORK], ["audit", "w.txt", *NETWORK], ["timeline", "w.txt", "-o", "t.png", *NETWORK]):
        ns = parse(argv)
        assert (ns["gpus_per_server"], ns["nics_per_server"], ns["nvlink_gbps"], ns["nic_gbps"]) == (8, 4, "360", "48.5")


@pytest.mark.parametrize("command, new", [("simulate", "--ratio-dir"), ("audit", "--pp-stage"), ("profile", "--list-gpus"),
                                          ("generate", "--num-query-groups"), ("trace", "--scaled-dp")])
def test_help_lists_one_spelling(command, new, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert new in text
    for old in ("--pp_stage", "--ratio_dir", "--list_gpus", "--launch_us", "--scaled_dp", "--nvlink_gbps",
                "--gpus_per_server", "--num_query_groups", "--untie_embeddings"):
        assert old not in text, old


def test_commsweep_flags_use_hyphens():
    # Every long option commsweep lists is hyphenated, or an upstream spelling: AICB's training
    # arguments (`arguments.py`) and SimAI's network and overlap flags.
    from commsweep.setup import arguments

    upstream = {"--nic_per_server", "--nic_busbw", "--tp_overlap", "--dp_overlap", "--ep_overlap", "--pp_overlap",
                "--aiob_enable", "--comp_filepath"}
    parser = cli.build_parser()
    aicb = argparse.ArgumentParser()
    arguments.add_training_arguments(aicb)
    upstream |= {s for a in aicb._actions for s in a.option_strings if "_" in s and "-" not in s[2:]}
    listed = {s for sub in parser._subparsers._group_actions[0].choices.values() for a in sub._actions
              for s in a.option_strings if s.startswith("--")}
    assert sorted(s for s in listed if "_" in s and s not in upstream) == []


def test_an_alias_satisfies_a_required_flag_and_errors_name_the_flag(capsys):
    assert parse([*SIMULATE, "--gpus_per_server", "8", "-n_p_s", "4", "-nv", "360", "-nic", "1"])["gpus_per_server"] == 8
    with pytest.raises(SystemExit) as exit_:
        cli.main([*SIMULATE, "-g_p_s", "8", "-n_p_s", "4", "--nvlink_gbps", "fast", "-nic", "48.5"])
    assert exit_.value.code == 2
    assert "argument -nv/--nvlink: expected a number, got 'fast'" in capsys.readouterr().err
