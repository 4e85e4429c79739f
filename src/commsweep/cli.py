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
    from .arguments import setup_from_args
    from .workload import format as wformat
    from .workload.generate import build

    setup = setup_from_args(ns)
    profile = None
    if ns.aiob_enable:
        if ns.comp_filepath is None:
            raise CommsweepError(
                "--aiob_enable needs --comp_filepath: AICB would profile on a GPU here; "
                "make a profile with 'commsweep profile' or pass AICB's output file"
            )
        profile = ns.comp_filepath
    workload = build(setup, ns.schedule, profile_path=profile, pp_stage=ns.pp_stage)
    _emit(workload.render(), ns.output)


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


def cmd_guard(ns: argparse.Namespace) -> None:
    from . import status

    argv = list(ns.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("guard", "check"):
        raise CommsweepError("guard needs a commsweep command after '--', e.g. -- generate ...")
    parser = build_parser()

    def run() -> None:
        inner = status.parse_quietly(lambda: parser.parse_args(argv))
        inner.func(inner)

    status.guard(argv[0], run, status_path=ns.status, outputs=ns.outputs, after=ns.after, attempt=ns.attempt)


def cmd_check(ns: argparse.Namespace) -> None:
    from . import status
    from .analysis import summary

    _emit(status.check(summary.read_points(Path(ns.sweep)), Path(ns.results)), ns.output)


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

    p = sub.add_parser(
        "guard", help="run a per-point command and record its outcome (how the pipeline runs each point)",
        description="Run a commsweep command for one point and write a status file: ok, or its error. "
                    "On failure the declared outputs become one-line markers and the exit status is 0, "
                    "so the other points go on; 'commsweep check' fails the run at the end.",
    )
    p.add_argument("--status", required=True, help="the status file to write")
    p.add_argument("--outputs", nargs="*", default=[], help="the job's declared outputs")
    p.add_argument("--after", nargs="*", default=[], help="status files of the jobs this one needs")
    p.add_argument("--attempt", type=int, default=1, help="which run of the job this is (recorded in the status)")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...: the commsweep command to run")
    p.set_defaults(func=cmd_guard)

    p = sub.add_parser("check", help="fail if a point of the sweep failed (and let the next run retry it)")
    p.add_argument("--sweep", required=True, help="the points table (results/sweep.csv)")
    p.add_argument("--results", default="results", help="the results directory")
    p.add_argument("-o", "--output", help="write 'all N point(s) ok' here when none failed")
    p.set_defaults(func=cmd_check)

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
