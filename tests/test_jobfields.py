"""A job's fields are its command line (``base.jobfields``): a field added to a job is a flag
of its parser, a word of its command line and a value of the job parsed back."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from commsweep.base.jobfields import add_arguments, flag, from_namespace, to_argv
from commsweep.orchestration import stages
from commsweep.simulate.stage import SIMULATE, SimulateJob


def pair(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    return key, value


@dataclass(frozen=True, kw_only=True)
class Example:
    """One field of each way a flag is written."""

    command: ClassVar[str] = "example"

    path: str = flag(help="a positional argument")
    size: int = flag("-s", "--size", type=int, help="required: no default")
    mode: str = flag("--mode", choices=("a", "b"), default="a", when="always", help="always written")
    level: int = flag("--level", type=int, default=3, when="changed", help="written when not 3")
    ratio: float | None = flag("--ratio", type=float, default=None, equals=True, text=repr, help="--ratio=R")
    strict: bool = flag("--strict", action="store_true", default=False, help="a switch")
    knob: tuple[tuple[str, str], ...] = flag("--knob", action="append", type=pair, default=(),
                                             text=lambda kv: f"{kv[0]}={kv[1]}", help="KEY=VALUE, repeated")
    out_file: str | None = flag("--out-file", default=None, help="a hyphenated name: --out_file parses too")


def parser_of(job_type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="example")
    add_arguments(parser, job_type)
    return parser


def test_each_way_of_writing_a_flag_round_trips():
    parser = parser_of(Example)
    plain = Example(path="w.txt", size=4)
    assert to_argv(plain) == ["example", "w.txt", "-s", "4", "--mode", "a"]
    full = Example(path="w.txt", size=4, mode="b", level=5, ratio=0.1, strict=True, knob=(("x", "1"), ("y", "")),
                   out_file="o.csv")
    assert to_argv(full) == ["example", "w.txt", "-s", "4", "--mode", "b", "--level", "5", "--ratio=0.1", "--strict",
                             "--knob", "x=1", "--knob", "y=", "--out-file", "o.csv"]
    for job in (plain, full):
        assert from_namespace(Example, parser.parse_args(to_argv(job)[1:])) == job
    assert from_namespace(Example, parser.parse_args(["w", "-s", "1", "--out_file", "p"])).out_file == "p"
    with pytest.raises(SystemExit):  # --size has no default: required
        parser.parse_args(["w.txt"])
    assert "written when not 3" in parser.format_help()


def test_a_field_added_to_the_simulate_job_is_a_flag_in_argv_and_parses_back():
    """The worked example of docs/development.md ("Adding a simulate option"): one field."""
    with_knob = dataclasses.make_dataclass(
        "WithKnob", [("latency_us", "float | None", flag("--latency-us", type=float, default=None,
                                                           help="a fixed latency per collective, us"))],
        bases=(SimulateJob,), frozen=True, kw_only=True)
    parser = parser_of(with_knob)
    assert "a fixed latency per collective, us" in parser.format_help()
    base = dict(workload="w.txt", gpus=16, gpus_per_server=8, nics_per_server=1, nvlink_gbps="360", nic_gbps="48.5",
                prefix="p-")
    job = with_knob(**base, latency_us=2.5)
    argv = to_argv(job)
    assert argv[:5] == ["simulate", "-w", "w.txt", "-g", "16"] and argv[-2:] == ["--latency-us", "2.5"]
    assert from_namespace(with_knob, parser.parse_args(argv[1:])) == job
    # Not given: not written, so every command line planned before it stays as it was.
    assert to_argv(with_knob(**base)) == to_argv(SimulateJob(**base))


@pytest.mark.parametrize("name", list(stages.STAGES))
def test_every_field_of_a_stages_job_is_a_flag_of_its_command(name):
    """Each flag a job's fields name is one its command parses (a shared block's included)."""
    from commsweep.base.jobfields import flags

    stage = stages.STAGES[name]
    parser = stages.build_parser(stage.command)
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    known = {s for action in sub.choices[stage.command]._actions for s in action.option_strings}
    for field, spec in flags(stage.job_type):
        assert all(n in known for n in spec.names), (name, field.name)


def test_a_simulate_command_line_parses_to_the_job_it_was_written_from():
    job = SimulateJob(workload="w.txt", gpus=16, gpus_per_server=8, nics_per_server=1, nvlink_gbps="360",
                      nic_gbps="48.5", prefix="p-", tp_overlap="0.5", backend="simai", simai_root="/s", timeout=9.5,
                      out_dir="o", times="t.csv")
    parser = stages.build_parser("simulate")
    assert SIMULATE.from_args(parser.parse_args(SIMULATE.argv(job))) == job
