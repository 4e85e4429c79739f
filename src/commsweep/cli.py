"""The ``commsweep`` command line: arguments only; the work is done in the package.

Heavy libraries (pandas, matplotlib, snakemake) are imported inside the commands that
need them, so the per-point commands the pipeline runs thousands of times start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import CommsweepError


def _emit(text: str, output: str | None) -> None:
    """Write ``text`` atomically to ``output``, or to stdout when none is given."""
    if output is None or output == "-":
        sys.stdout.write(text)
    else:
        from .files import write_text

        write_text(output, text)


# -- commands --------------------------------------------------------------------------


def cmd_generate(ns: argparse.Namespace) -> None:
    from .workload.generate import from_arguments

    text, notes = from_arguments(ns)
    for note in notes:
        print(f"commsweep generate: note: {note}", file=sys.stderr)
    _emit(text, ns.output)


def cmd_volumes(ns: argparse.Namespace) -> None:
    from .analysis import volumes
    from .workload import format as wformat

    table = volumes.tally(wformat.read(ns.workload), gpus=ns.gpus)
    render = {"csv": volumes.to_csv, "json": volumes.to_json, "table": volumes.to_table}[ns.format]
    _emit(render(table), ns.output)


def cmd_sweep(ns: argparse.Namespace) -> None:
    from . import sweep

    config = sweep.load_config(ns.config)
    points, invalid = sweep.expand(config)
    if invalid and not config.get("skip_invalid") and not ns.table:
        for bad in invalid:
            print(f"invalid: {bad.describe()}", file=sys.stderr)
    if ns.table:
        points, invalid = sweep.points_from_config(config)
        _emit(sweep.table_csv(points, invalid), ns.table)
        return
    print(f"{len(points)} valid point(s), {len(invalid)} invalid combination(s)")
    for p in points:
        print(p.point_key)
    if invalid and not config.get("skip_invalid"):
        raise CommsweepError(f"{len(invalid)} invalid combination(s); set skip_invalid: true to drop them")


def cmd_summarize(ns: argparse.Namespace) -> None:
    from .analysis import summary

    _emit(summary.summarize(Path(ns.sweep), Path(ns.results)), ns.output)


def cmd_plot(ns: argparse.Namespace) -> None:
    from .analysis import plots

    plots.PLOTS[ns.kind](Path(ns.summary), Path(ns.output))


# -- parser ----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from .arguments import add_aiob_arguments, add_training_arguments

    parser = argparse.ArgumentParser(
        prog="commsweep",
        description="Sweep LLM-training communication through AICB-style workloads and SimAI's model.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "generate", allow_abbrev=False,
        help="write the SimAI workload of one setup (AICB's arguments)",
        description="Write a SimAI workload file. Takes AICB's own arguments, so an AICB command line works unchanged.",
    )
    add_training_arguments(p)
    add_aiob_arguments(p)
    p.add_argument("--schedule", choices=("aicb", "megatron"), default="aicb",
                   help="aicb: what AICB writes (default path, or AIOB path with --aiob_enable); "
                        "megatron: what Megatron-LM really communicates")
    p.add_argument("--pp_stage", default="first",
                   help="megatron schedule with pp > 1: the stage whose view the file holds (first, last or an index)")
    p.add_argument("--aicb-root", metavar="PATH",
                   help="aicb schedule: run the AICB checkout at PATH instead of the emulation")
    p.add_argument("--aicb-python", metavar="PYTHON",
                   help="the Python that runs AICB (needs numpy and pandas; default: this one)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("volumes", help="communication volumes of a workload per phase, collective and group")
    p.add_argument("workload", help="a SimAI workload file")
    p.add_argument("--format", choices=("csv", "json", "table"), default="table")
    p.add_argument("-g", "--gpus", type=int, default=None,
                   help="SimAI's -g (sets the DP group size); default: the header's all_gpus")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_volumes)

    p = sub.add_parser("sweep", help="validate a sweep config and list its points")
    p.add_argument("config", help="a sweep config YAML (see config/config.yaml)")
    p.add_argument("--table", help="write the points table (CSV) to this file")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("summarize", help="join every point's results into one table")
    p.add_argument("--sweep", required=True, help="the points table (results/sweep.csv)")
    p.add_argument("--results", default="results", help="the results directory")
    p.add_argument("-o", "--output", help="output CSV (default: stdout)")
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("plot", help="draw a figure from the summary table")
    p.add_argument("kind", choices=("volume-by-tp",))
    p.add_argument("summary", help="results/summary.csv")
    p.add_argument("-o", "--output", required=True, help="output PNG")
    p.set_defaults(func=cmd_plot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        ns.func(ns)
    except CommsweepError as err:
        print(f"commsweep {ns.command}: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"commsweep {ns.command}: error: {err.filename}: no such file", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
