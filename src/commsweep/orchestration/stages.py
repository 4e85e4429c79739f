"""The stage table: every per-point stage (``base.stage.Stage``), in the order of a point's
work, and their commands' parsers.

A stage's class lives next to its code; this table is the one place that lists them. The
batch planner and runner (``batch``), provenance (``provenance.check_external``) and the
command line (``cli``) reach a stage only through it, so adding a stage (another simulator
backend, say) is its own module and one line here (docs/development.md, "Adding a stage").
"""

from __future__ import annotations

import argparse

from ..aiob.stage import PROFILE
from ..analysis.stage import AUDIT, VOLUMES
from ..base.stage import Stage
from ..simulate.ns3.stage import PACKET
from ..simulate.stage import SIMULATE
from ..workload.stage import GENERATE

# By name, in the order of a point's work: a stage comes after those it reads.
STAGES: dict[str, Stage] = {stage.name: stage for stage in (PROFILE, GENERATE, VOLUMES, SIMULATE, PACKET, AUDIT)}


def commands() -> dict:
    """The stages' commands by name, each with its parser (``commsweep COMMAND``); a command
    two stages share (``simulate``, whose ``--backend ns3`` is the packet-level stage's) once."""
    out: dict = {}
    for stage in STAGES.values():
        if stage.command not in out and type(stage).add_parser is not Stage.add_parser:
            out[stage.command] = stage.add_parser
    return out


STAGE_COMMANDS = commands()


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one stage's command (``prog`` as ``commsweep`` gives it)."""
    parser = argparse.ArgumentParser(prog="commsweep")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    STAGE_COMMANDS[command](sub)
    return parser


def check_external(config, points) -> dict:
    """Every stage's external inputs for the sweep's points, checked and checksummed, stage by
    stage in the table's order (the first missing one is the error)."""
    points = list(points)
    out: dict = {}
    for stage in STAGES.values():
        for key, value in dict(stage.check_external(config, points)).items():
            out.setdefault(key, value)
    return out

