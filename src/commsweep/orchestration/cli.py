"""The ``commsweep`` command line: arguments only; the work is done in the package.

Heavy libraries (pandas, matplotlib, snakemake) are imported inside the commands that
need them, so the per-point commands the pipeline runs thousands of times start fast.
"""

from __future__ import annotations

import sys

# Ctrl-C before ``main`` runs: the C signal module, which imports nothing (``signal`` imports
# enum and functools, a window of its own).
import _signal


def _interrupted_while_starting(signum, frame) -> None:
    """Ctrl-C before ``main`` runs (this module's imports take a tenth of a second): one line,
    ended as Ctrl-C ends a program, nothing written yet. A KeyboardInterrupt there would print a
    traceback through the imports, or be lost where an import swallows it."""
    import os

    print("commsweep: interrupted while starting; nothing was changed", file=sys.stderr, flush=True)
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    os.kill(os.getpid(), _signal.SIGINT)
    os._exit(128 + _signal.SIGINT)  # only if the signal could not end the process


def _started_as_commsweep() -> bool:
    """Whether this process is the ``commsweep`` program (its console script or ``python -m
    commsweep``), not a process that imports this module (Snakemake's job scripts, tests)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (spec is not None and spec.name == "commsweep.__main__") or (
        spec is None and str(getattr(main, "__file__", "")).rsplit("/", 1)[-1] == "commsweep")


if _started_as_commsweep() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402 (after the Ctrl-C handler above, as everything below)
import contextlib  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from ..base.errors import CommsweepError, exit_interrupted  # noqa: E402
from ..base.files import emit  # noqa: E402
from . import storage  # noqa: E402
from .stages import STAGE_COMMANDS  # noqa: E402


# -- commands --------------------------------------------------------------------------


def cmd_sweep(ns: argparse.Namespace) -> None:
    from ..base.errors import ConfigError

    try:
        _sweep(ns)
    except ConfigError as err:
        if err.source is not None:
            raise
        # A key checked after reading (a GPU, an AIOB file, a limit): the file that set it, as
        # the schema's errors name it.
        raise ConfigError(err.message, key=err.key, source=ns.config) from None


def _sweep(ns: argparse.Namespace) -> None:
    from . import sweep

    if ns.results is not None:  # as Snakemake's --config results=DIR: validated with the config
        from ..setup.configfile import load

        config = load([ns.config], [f"results={ns.results}"], given_as="--results")
    else:
        config = sweep.load_config(ns.config)
    if ns.check or ns.todo or ns.run_unless_current or ns.report_with:
        _check_sweep(ns, config)
        return
    if ns.table:
        points, invalid = sweep.points_from_config(config)
        emit(sweep.table_csv(points, invalid), ns.table)
        return
    points, invalid = sweep.expand(config)
    if invalid and not config.get("skip_invalid"):
        for bad in invalid:
            print(f"invalid: {bad.describe()}", file=sys.stderr)
    print(f"{len(points)} valid point(s), {len(invalid)} invalid combination(s)")
    for p in points:
        print(p.point_key)
    unfit = [p for p in points if sweep.memory_columns(p)["fits"] is False]
    if unfit:
        print(f"note: {len(unfit)} point(s) do not fit their GPU's memory (fits=False in sweep.csv; "
              "skip_unfit: true drops them)", file=sys.stderr)
    if invalid and not config.get("skip_invalid"):
        raise CommsweepError(f"{len(invalid)} invalid combination(s); set skip_invalid: true to drop them")
    if not points:
        sweep.points_from_config(config)  # the error a run would stop with, naming why


def _point_files(ns: argparse.Namespace, lists: tuple[str, ...]):
    """The per-point files of a sweep-wide command: those given, else found under --results."""
    from ..base.paths import PointFiles

    given = {name: getattr(ns, name) for name in lists if getattr(ns, name) is not None}
    if given:
        return PointFiles.given(**given)
    return PointFiles.under(ns.results)


def _check_sweep(ns: argparse.Namespace, config: dict) -> None:
    """``sweep --check``: everything a run checks before its first job, and its name."""
    from . import provenance, sweep

    from ..base.paths import Layout, results_folder

    layout = Layout(results_folder(config))
    points, invalid = sweep.points_from_config(config)
    run = provenance.Run(config=config, inputs=provenance.check_external(config, points),
                         config_files=(provenance.relative_to_cwd(ns.config),))
    if ns.report_with and ns.made is None:
        ns.made = ""
    if ns.made is not None:
        ns.made = ns.made or layout.run_record()
        # The command that makes this sweep's results, in the folder the user gave.
        make_run = f"make run CONFIG={ns.config}" + (f" RESULTS={ns.results}" if ns.results is not None else "")
        try:
            record = provenance.read_record(ns.made)
        except FileNotFoundError:
            raise CommsweepError(f"{ns.made}: no run record: run the sweep first ({make_run})") from None
        if record["run"] != run.id:
            files, overrides = record.get("config_files") or [], record.get("config_overrides") or []
            rerun = f"run this sweep first ({make_run})"
            if record.get("config_digest") == run.config_digest:
                raise CommsweepError(f"{ns.made} is run {record['run']}, made from the same config, but its external "
                                     f"inputs or commsweep's version changed since, not run {run.id} of {ns.config}: "
                                     f"{rerun}")
            made_from = ", ".join(files) or "?"
            if overrides:
                made_from += f" with --config {' '.join(overrides)}"
            raise CommsweepError(f"{ns.made} is run {record['run']}, made from another config ({made_from}), not run "
                                 f"{run.id} of {ns.config}: {rerun}, or make the report of those results: "
                                 f"{provenance.report_command(files, overrides)}")
        verdict = Layout(str(Path(ns.made).parent)).verdict()
        if not Path(verdict).exists():  # removed when a run starts, written at its end (the check)
            raise CommsweepError(f"run {run.id} of {ns.config} did not finish (no {verdict}, which its end writes): "
                                 f"finish it first ({make_run})")
    print(f"{ns.config}: {len(points)} point(s), {len(invalid)} combination(s) skipped; run {run.id}")
    ignoring = sum(p.ignores_cp for p in points)
    if ignoring:
        print(f"note: {ignoring} aicb point(s) at cp > 1: AICB ignores CP; each is the workload of its GPUs without "
              "CP, audited against Megatron's schedule with it")
    ignoring = sum(p.ignores_fsdp for p in points)
    if ignoring:
        print(f"note: {ignoring} aicb point(s) with FSDP or FP8 gathers: AICB has neither; each is the distributed "
              "optimizer's workload in bf16, audited against Megatron's schedule with them")
    if ns.todo:
        from . import batch

        print(batch.describe_pending(batch.plan(points, config, layout, run)))
    if ns.run_unless_current or ns.report_with:
        from . import current

        if ns.report_with:
            sys.exit(current.report(ns.report_with, layout))
        sys.exit(current.run(ns.run_unless_current, run, ns.config, layout, report=ns.with_report))


def cmd_summarize(ns: argparse.Namespace) -> None:
    from ..analysis import summary

    emit(summary.summarize(Path(ns.sweep), _point_files(ns, ("status", "volumes", "times")), ns.run or ""), ns.output)


def cmd_plot(ns: argparse.Namespace) -> None:
    from ..analysis.figures import names, plot

    options = {}
    if ns.kind == names.FIGURES[names.DIFFERENCE_BY_CAUSE].kind and ns.sweep:
        options["sweep_csv"] = Path(ns.sweep)
    if ns.kind == names.FIGURES[names.EXPOSED_TP_BY_OVERLAP].kind:
        options["default_tp_overlap"] = ns.tp_overlap
    plot.plot(ns.kind, Path(ns.summary), Path(ns.output), **options)


def cmd_causes(ns: argparse.Namespace) -> None:
    from ..analysis import causes

    if ns.parts is not None:
        emit(causes.assemble(Path(ns.sweep), ns.parts), ns.output)
        return
    files = _point_files(ns, ("status", "volumes", "times", "collectives", "audits"))
    table = causes.packet_difference_by_cause if ns.simulation == "packet" else causes.difference_by_cause
    emit(table(Path(ns.sweep), files), ns.output)


def cmd_answer(ns: argparse.Namespace) -> None:
    from ..analysis import answer

    answer.write(Path(ns.causes), Path(ns.sweep), Path(ns.output), Path(ns.rst) if ns.rst else None,
                 Path(ns.packet) if ns.packet else None, tuple(map(Path, ns.astra)) if ns.astra else None)


def cmd_trace(ns: argparse.Namespace) -> None:
    from ..setup.arguments import setup_from_args
    from ..trace import compare, records, runner, scale, versions

    environment = versions.environment(versions.check_version(ns.megatron_core)) if ns.megatron_core else None
    if ns.world_size is None:  # a trace needs no more processes than one model replica (EP is carved out of DP)
        ns.world_size = ns.tensor_model_parallel_size * ns.pipeline_model_parallel * ns.expert_model_parallel_size
    setup = setup_from_args(ns)
    if ns.scaled:
        setup = scale.scaled_setup(setup, dp=ns.scaled_dp)
    trace = runner.run([setup], timeout=ns.timeout, environment=environment)[0]
    sys.stderr.write(f"megatron-core {trace.megatron_core}; CPU workarounds: {', '.join(trace.workarounds) or 'none'}\n")
    shown = trace.records if ns.ranks == "all" else [
        r for stage in trace.stages for r in trace.rank_records(trace.first_rank_of_stage(stage))]
    text = records.to_csv(shown) if ns.format == "csv" else records.summary_table(shown)
    emit(text, ns.output)
    if ns.compare:
        rows = compare.compare(trace)
        emit(compare.to_csv(rows), ns.compare)
        sys.stderr.write(compare.summary(rows))


def cmd_trace_check(ns: argparse.Namespace) -> None:
    import os

    from ..base.files import read_text
    from ..trace.compare import check_table

    # A trace's name: its path below the files' common folder (results/traces), so that
    # the traces of several releases (<release>/<key>.compare.csv) keep their release.
    paths = {f: Path(f).resolve() for f in ns.compare}
    common = Path(os.path.commonpath([p.parent for p in paths.values()]))
    emit(check_table({str(p.relative_to(common)).removesuffix(".compare.csv"): read_text(f)
                       for f, p in paths.items()}), ns.output)


def cmd_trace_versions(ns: argparse.Namespace) -> None:
    from ..trace import tally

    rows, traces = tally.read_traces(ns.traces)
    emit(tally.to_csv(rows), ns.output)
    if ns.differences:
        emit(tally.report(rows, traces), ns.differences)


def cmd_compare(ns: argparse.Namespace) -> None:
    from ..analysis import compare
    from ..base.files import atomic_open, write_text

    # findings.csv is written as the audits are read (it can hold millions of rows); it
    # lands only when the whole comparison succeeded.
    with atomic_open(ns.findings) as findings:
        tables = compare.compare(Path(ns.sweep), Path(ns.summary), _point_files(ns, ("audits",)), findings)
    write_text(ns.comparison, tables.comparison)
    write_text(ns.verdicts, tables.verdicts)
    if ns.by_kind:
        write_text(ns.by_kind, tables.by_kind)


def cmd_timeline(ns: argparse.Namespace) -> None:
    from ..analysis import audit, timeline
    from ..analysis.figures import timeline as timeline_figure
    from ..base.errors import ConfigError
    from ..setup.arguments import setup_from_args
    from ..workload import format as wformat
    from ..workload.generate import pipeline_stage

    setup = setup_from_args(ns)
    if ns.simulation is not None:
        times = timeline.read_endtoend(ns.simulation)
    else:
        workload = wformat.read(ns.workload)
        network = audit.network_from_args(ns, workload.header)
        if network is None:
            raise ConfigError("give the simulation (an EndToEnd.csv) or the network flags -g_p_s -n_p_s -nv -nic",
                              key="simulation")
        from ..simulate.engine import load_ratios

        times = timeline.simulate(workload, network, load_ratios(ns.ratio_dir))
    timeline_figure.draw(
        Path(ns.workload), times, setup, Path(ns.output),
        stage=pipeline_stage(ns.pp_stage, setup), audit_csv=Path(ns.audit) if ns.audit else None, title=ns.title,
    )


def cmd_guard(ns: argparse.Namespace) -> None:
    from ..base import status

    argv = list(ns.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0] in ("guard", "check"):
        raise CommsweepError("guard needs a commsweep command after '--', e.g. -- generate ...")
    parser = build_parser(only=argv[0] if argv[0] in COMMANDS else None)

    def run() -> None:
        inner = status.parse_quietly(lambda: parser.parse_args(argv))
        inner.func(inner)

    status.guard(argv[0], run, status_path=ns.status, outputs=ns.outputs, after=ns.after, attempt=ns.attempt,
                 provenance=status.job_provenance(ns.provenance) if ns.provenance is not None else None,
                 job=ns.job or "")


def cmd_validate(ns: argparse.Namespace) -> None:
    from ..aiob.megatron_kernels import software
    from ..analysis import validate
    from ..simulate.engine import load_ratios

    sw = software(ns.megatron)
    results = validate.validate(validate.read_runs(ns.runs), sw, ratios=load_ratios(ns.ratio_dir), source=ns.runs)
    emit(validate.to_csv(results) if ns.format == "csv" else validate.to_table(results, sw), ns.output)
    if ns.plot:
        validate.plot({f"{Path(ns.runs).stem} (Megatron-LM {sw.name})": results}, ns.plot)
    if ns.workloads:
        validate.write_workloads(results, ns.workloads)


def cmd_check(ns: argparse.Namespace) -> None:
    from ..base import status
    from ..setup.points import read_points

    ok, text = status.check(read_points(Path(ns.sweep)), _point_files(ns, ("status",)), ns.steps or (),
                            run=ns.run, ignored=ns.ignored or ())
    emit(text, ns.output)
    if not ok and not ns.exit_zero:
        to_file = ns.output not in (None, "-")
        raise CommsweepError(text.rstrip("\n") if to_file else "some points or steps failed (listed above)")


# -- parser ----------------------------------------------------------------------------


def add_trace_parser(sub) -> None:
    from ..base.flags import add_flag
    from ..setup.arguments import add_bucket_arguments, add_pipeline_arguments, add_training_arguments

    p = sub.add_parser(
        "trace", allow_abbrev=False,
        help="run megatron-core on CPU processes and record every collective (needs .[megatron])",
        description="Run one training step of a small megatron-core GPT on gloo processes (one per rank) "
                    "and record every collective: op, group, size, phase, module and layer. "
                    "Takes AICB's arguments; --world_size defaults to TP x PP.",
    )
    add_training_arguments(p)
    add_bucket_arguments(p.add_argument_group("the distributed optimizer's buckets"))
    add_pipeline_arguments(p.add_argument_group("the pipeline's schedule"))
    p.set_defaults(world_size=None)
    p.add_argument("--scaled", action="store_true",
                   help="trace the setup's structure at tiny sizes (what the pipeline does)")
    add_flag(p, "--scaled-dp", type=int, default=1, help="DP size of the scaled trace (default 1)")
    p.add_argument("--format", choices=("csv", "table"), default="table",
                   help="csv: one row per collective; table: counts per phase, group and op")
    p.add_argument("--ranks", choices=("first", "all"), default="first",
                   help="first: the first rank of each pipeline stage (default); all: every rank")
    p.add_argument("--compare", metavar="FILE",
                   help="also write the comparison with the megatron schedule (CSV) to FILE")
    p.add_argument("--megatron-core", metavar="VERSION",
                   help="trace this megatron-core release, installed on first use into its own folder under "
                        "$COMMSWEEP_MEGATRON_CACHE (default ~/.cache/commsweep/megatron-core); "
                        "default: the installed one (see docs/megatron-versions.md)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the processes are stopped")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_trace)


def add_trace_versions_parser(sub) -> None:
    p = sub.add_parser("trace-versions", help="several megatron-core releases' traces side by side, and how they differ")
    p.add_argument("traces", nargs="+", help="trace CSVs of `commsweep trace --format csv`, as <release>/<case>.csv")
    p.add_argument("-o", "--output", help="the table, one row per release and collective (default: stdout)")
    p.add_argument("--differences", metavar="FILE", help="also write the differences between releases in words")
    p.set_defaults(func=cmd_trace_versions)


def add_sweep_parser(sub) -> None:
    p = sub.add_parser("sweep", help="validate a sweep config and list its points")
    p.add_argument("config", help="a sweep config YAML (see config/config.yaml)")
    p.add_argument("--table", help="write the points table (CSV) to this file")
    p.add_argument("--check", action="store_true",
                   help="check it as a run does before its first job (schema, points, limits, external inputs) and "
                        "print one line with the run's name (what make run does first)")
    p.add_argument("--results", metavar="DIR",
                   help="the sweep's results folder, in place of the config's `results` (as Snakemake's "
                        "--config results=DIR)")
    p.add_argument("--made", metavar="RUN_JSON", nargs="?", const="",
                   help="with --check: also fail unless RUN_JSON (default: the results folder's run.json) is this "
                        "config's run, e.g. before building a report of the results (make report)")
    p.add_argument("--todo", action="store_true",
                   help="with --check: also say which per-point tasks a run in this folder would do now, per stage "
                        "(those whose outputs under results/ are not current)")
    p.add_argument("--run-unless-current", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="with --check, last: then run COMMAND (make run: Snakemake) unless nothing it reads or "
                        "writes changed since it last exited 0 in this folder, which it would find has nothing "
                        "to do (docs/cli.md, How a sweep runs them)")
    p.add_argument("--with-report", action="store_true",
                   help="with --run-unless-current: also make the HTML report of the results (report.html in the "
                        "results folder), in the same Snakemake run, or alone when nothing changed but the report "
                        "is missing or older than the results")
    p.add_argument("--report-with", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="with --check, last: check the results are this config's run (--made), then run COMMAND "
                        "(Snakemake) with --report REPORT (make report)")
    p.set_defaults(func=cmd_sweep)


SWEEP_HELP = "the points table (results/sweep.csv)"


def _add_point_files(p: argparse.ArgumentParser, *, results: str = "the results directory (when no files are given)",
                     **lists: str) -> None:
    """A sweep-wide command's points (``--sweep``) and their files: options that each take a
    list of per-point files (``paths.PointFiles.given``), else found under ``--results``."""
    p.add_argument("--sweep", required=True, help=SWEEP_HELP)
    p.add_argument("--results", default="results", help=results)
    for name, help_text in lists.items():
        p.add_argument(f"--{name}", nargs="*", metavar="FILE", help=help_text)


def add_summarize_parser(sub) -> None:
    p = sub.add_parser(
        "summarize", help="join every point's results into one table",
        description="Join the points of a sweep table with their volumes, simulated times and status into "
                    "one table. Each point's files are those given (--status, --volumes, --times: what the "
                    "pipeline does), else found under --results by the results layout.",
    )
    _add_point_files(p, status="the points' status files (<workload or point>/<stage>.status)",
                     volumes="the workloads' volumes.csv files", times="the points' times.csv files")
    p.add_argument("--run", help="the run the table belongs to, for its run column (results/run.json's run)")
    p.add_argument("-o", "--output", help="output CSV (default: stdout)")
    p.set_defaults(func=cmd_summarize)


def add_guard_parser(sub) -> None:
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
    p.add_argument("--provenance", nargs="*", metavar="KEY=CHECKSUM",
                   help="record what made the outputs: commsweep's version, the run's config digest and these "
                        "external inputs' checksums (the pipeline passes them)")
    p.add_argument("--job", metavar="DIGEST", help="record the task's digest (what a batch checks before it "
                                                   "skips the task: docs/workflow.md)")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...: the commsweep command to run")
    p.set_defaults(func=cmd_guard)


def add_check_parser(sub) -> None:
    p = sub.add_parser(
        "check", help="fail if a point of the sweep failed (and let the next run retry it)",
        description="The verdict of a run: 'all N point(s) ok', or the failed points and sweep-wide steps "
                    "with their errors (exit status 2). Each point's status files are those given "
                    "(--status), else found under --results.",
    )
    _add_point_files(p, status="the points' status files (<workload or point>/<stage>.status)")
    p.add_argument("--steps", nargs="*", metavar="FILE", help="the sweep-wide steps' status files")
    p.add_argument("--run", help="the run to name in the verdict (results/run.json's run)")
    p.add_argument("--ignored", nargs="*", metavar="PATH",
                   help="outputs of points not in this sweep, left from an earlier one, to list as ignored")
    p.add_argument("-o", "--output", help="write the verdict here too (also when something failed)")
    p.add_argument("--exit-zero", action="store_true",
                   help="exit 0 when something failed, once the verdict is written (the pipeline fails the run "
                        "itself, after the verdict is in place)")
    p.set_defaults(func=cmd_check)


def add_plot_parser(sub) -> None:
    p = sub.add_parser("plot", help="draw a figure from the summary table")
    from ..analysis.figures.names import KINDS

    p.add_argument("kind", choices=KINDS)
    # audit-by-kind reads results/findings_by_kind.csv; difference-by-cause
    # results/difference_by_cause.csv; the others results/summary.csv
    p.add_argument("summary", help="results/summary.csv (results/findings_by_kind.csv for audit-by-kind, "
                                   "results/difference_by_cause.csv for difference-by-cause)")
    p.add_argument("-o", "--output", required=True, help="output PNG")
    p.add_argument("--sweep", help="difference-by-cause: the points table (default: sweep.csv beside the input)")
    p.add_argument("--tp-overlap", type=float, default=0.0,
                   help="exposed-tp-by-overlap: the TP overlap ratio of a sweep without a tp_overlap axis "
                        "(its simulator.overlap.tp; default 0)")
    p.set_defaults(func=cmd_plot)


def add_causes_parser(sub) -> None:
    p = sub.add_parser("causes", help="each AICB point's difference from its Megatron point, by cause")
    _add_point_files(p, results="the results directory (audits, simulations, volumes), when no files are given",
                     status="the points' status files", volumes="the workloads' volumes.csv files",
                     times="the points' times.csv files", collectives="the points' collectives.csv files",
                     audits="the AICB points' audit.csv files")
    p.add_argument("--parts", nargs="*", metavar="FILE",
                   help="instead: the tables of parts of the sweep to put together in its order (what the "
                        "pipeline's batches write, results/batches/<batch>.causes.csv)")
    p.add_argument("--simulation", choices=("analytical", "packet"), default="analytical",
                   help="the points whose differences to work out: those simulated analytically (default), or "
                        "by SimAI's packet-level simulator, each against its packet-level Megatron point "
                        "(results/packet_difference_by_cause.csv)")
    p.add_argument("-o", "--output", help="output CSV (results/difference_by_cause.csv; default: stdout)")
    p.set_defaults(func=cmd_causes)


def add_answer_parser(sub) -> None:
    p = sub.add_parser("answer", help="the landing page: the sweep's answer in words, from difference_by_cause.csv")
    p.add_argument("causes", help="results/difference_by_cause.csv")
    p.add_argument("--sweep", required=True, help=SWEEP_HELP)
    p.add_argument("-o", "--output", required=True,
                   help="the page in Markdown (results/answer.md; figures linked relative to it, from plots/)")
    p.add_argument("--rst", help="also the page in reStructuredText, figures embedded (the report's front page)")
    p.add_argument("--packet", help="results/packet_difference_by_cause.csv: the answer under packet-level "
                                    "simulation too (a sweep with packet-level points)")
    p.add_argument("--astra", nargs=2, metavar=("DIFFERENCE", "POINTS"),
                   help="results/astra_difference.csv and results/astra_vs_simai.csv: the answer in ASTRA-sim "
                        "too (a sweep with simulator.astra.root)")
    p.set_defaults(func=cmd_answer)


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="sweep-wide findings, comparison of the generators, and verdicts")
    _add_point_files(p, results="the results directory, where the points' audits are found (when --audits is not "
                                "given)", audits="the points' audit.csv files (a point without one is not audited)")
    p.add_argument("--summary", required=True, help="the summary table (results/summary.csv)")
    p.add_argument("--findings", required=True,
                   help="output: every point's findings, after the point's key (CSV; join results/sweep.csv on point)")
    p.add_argument("--comparison", required=True, help="output: the generators compared per setting (CSV)")
    p.add_argument("--verdicts", required=True, help="output: per point, its audit totals and verdict (CSV)")
    p.add_argument("--by-kind", dest="by_kind", metavar="FILE",
                   help="output: per point and kind of finding, its totals (CSV; the audit-by-kind figure's input)")
    p.set_defaults(func=cmd_compare)


def add_timeline_parser(sub) -> None:
    from ..simulate.stage import add_point_arguments

    p = sub.add_parser(
        "timeline", allow_abbrev=False,
        help="draw one simulated iteration per layer, with the audit beside it",
    )
    p.add_argument("workload", help="a SimAI workload file")
    p.add_argument("simulation", nargs="?",
                   help="its simulation, as SimAI's EndToEnd.csv (default: simulate it with the network flags)")
    add_point_arguments(p, schedule=False, network_title="network, to simulate the workload without a simulation "
                                                         "(SimAI's flags, all four)")
    p.add_argument("--audit", help="the workload's audit CSV (commsweep audit --format csv)")
    p.add_argument("--title", help="the figure's title (default: the workload's folder name)")
    p.add_argument("-o", "--output", required=True, help="output PNG")
    p.set_defaults(func=cmd_timeline)


def add_validate_parser(sub) -> None:
    p = sub.add_parser(
        "validate", allow_abbrev=False,
        help="predict measured training runs' iteration times and compare (runs file: CSV)",
        description="Predict the iteration time of every run of a runs file (Megatron schedule with the kernel "
                    "model's compute, SimAI's model) and compare it with the measured time. Columns of the "
                    "runs file: see docs/validation.md.",
    )
    p.add_argument("runs", help="a runs file (CSV), e.g. src/commsweep/data/validation/korthikanti2022_table5.csv")
    p.add_argument("--format", choices=("table", "csv"), default="table")
    p.add_argument("--megatron", choices=("2021", "2022", "core", "nemo"), default="2022",
                   help="the Megatron-LM the runs used: 2021 (Narayanan et al.: fp16, local DDP), 2022 (default; "
                        "Korthikanti et al.: async TP, gradient-accumulation fusion), core (megatron-core: flash "
                        "attention, distributed optimizer, overlapped DP), nemo (NVIDIA's performance recipes: "
                        "core plus TP communication overlap and overlapped pipeline sends)")
    p.add_argument("--ratio-dir", help="SimAI's ratio tables ({nvlink,nic,ata}_ratio.csv); default: efficiency 1.0")
    p.add_argument("--plot", metavar="FILE", help="also draw predicted against measured seconds (PNG)")
    p.add_argument("--workloads", metavar="DIR",
                   help="also write each run's SimAI workload and SimAI command line (DIR/commands.sh) there")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_validate)


def cmd_packet_compare(ns: argparse.Namespace) -> None:
    from ..analysis import packet, summary

    emit(packet.table(summary.read(ns.summary).rows, packet.read_records(ns.records)), ns.output)


def add_packet_compare_parser(sub) -> None:
    p = sub.add_parser("packet-compare", help="each packet-level point beside its analytical twin",
                       description="One line per packet-level point of a summary: its analytical twin's and its own "
                                   "times, the packet/analytical ratio, and its run record (FCT spread, PFC pauses, "
                                   "send latency, build, wall time).")
    p.add_argument("--summary", required=True, help="the sweep's summary.csv")
    p.add_argument("--records", nargs="*", default=[], help="the packet-level points' ns3.csv records")
    p.add_argument("-o", "--output", help="output CSV (default: stdout)")
    p.set_defaults(func=cmd_packet_compare)


def cmd_compare_sweeps(ns: argparse.Namespace) -> None:
    from ..analysis import compare_sweeps

    a, b = compare_sweeps.read_answer(ns.a), compare_sweeps.read_answer(ns.b)
    emit(compare_sweeps.compare(a, b), ns.output)
    print(f"commsweep compare-sweeps: {compare_sweeps.describe(a, b)}", file=sys.stderr)


def add_compare_sweeps_parser(sub) -> None:
    p = sub.add_parser("compare-sweeps", help="two sweeps' answers side by side: each point's difference by cause "
                                              "and totals, B less A")
    p.add_argument("a", metavar="A", help="a sweep's results folder (e.g. results)")
    p.add_argument("b", metavar="B", help="another sweep's results folder (e.g. results/my-sweep)")
    p.add_argument("-o", "--output", help="output CSV (default: stdout)")
    p.set_defaults(func=cmd_compare_sweeps)


def add_trace_check_parser(sub) -> None:
    p = sub.add_parser("trace-check", help="one verdict per trace: does the megatron schedule match megatron-core")
    p.add_argument("compare", nargs="+", help="comparison CSVs of `commsweep trace --compare` (<key>.compare.csv)")
    p.add_argument("-o", "--output", help="output CSV (default: stdout)")
    p.set_defaults(func=cmd_trace_check)


def add_chakra_parser(sub) -> None:
    from ..workload.chakra_command import add_parser

    add_parser(sub)


def add_astra_compare_parser(sub) -> None:
    from ..analysis.astra_compare import add_parser

    add_parser(sub)


COMMANDS = {
    **STAGE_COMMANDS,
    "chakra": add_chakra_parser,
    "astra-compare": add_astra_compare_parser,
    "sweep": add_sweep_parser,
    "summarize": add_summarize_parser,
    "compare": add_compare_parser,
    "causes": add_causes_parser,
    "answer": add_answer_parser,
    "plot": add_plot_parser,
    "timeline": add_timeline_parser,
    "trace": add_trace_parser,
    "trace-check": add_trace_check_parser,
    "packet-compare": add_packet_compare_parser,
    "trace-versions": add_trace_versions_parser,
    "compare-sweeps": add_compare_sweeps_parser,
    "validate": add_validate_parser,
    "guard": add_guard_parser,
    "check": add_check_parser,
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; with ``only``, just that command's parser (and its imports).

    The pipeline runs the per-point commands thousands of times: building the other
    commands' parsers would import their modules for nothing.
    """
    parser = argparse.ArgumentParser(
        prog="commsweep",
        description="Sweep LLM-training communication through AICB-style workloads and SimAI's model.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, add in COMMANDS.items():
        if only is None or only == name:
            add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the program itself (not a command run in-process): a quick end (exits.quick)
        from .exits import quick

        quick()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # A job starts with Ctrl-C held back (commsweep.orchestration.interrupts): taken here.
        from .interrupts import accept

        if _signal.getsignal(_signal.SIGINT) is _interrupted_while_starting:
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # taken below from now on
        accept()
        return _main(argv)
    except KeyboardInterrupt:
        exit_interrupted(f"commsweep {argv[0] if argv else ''}: interrupted".replace("  ", " "))
        return 130


def _main(argv: list[str]) -> int:
    # A job without a shared filesystem: run from its root, paths relative to it (commsweep.orchestration.storage).
    argv = storage.enter(argv)
    parser = build_parser(only=argv[0] if argv[:1] and argv[0] in COMMANDS else None)
    ns = parser.parse_args(argv)
    try:
        ns.func(ns)
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except CommsweepError as err:
        print(f"commsweep {ns.command}: error: {err}", file=sys.stderr)
        return 2
    except FileNotFoundError as err:
        print(f"commsweep {ns.command}: error: {err.filename}: no such file", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader stopped reading (``| head -1``): it has what it wanted, so nothing is
        # wrong and nothing is said, as ripgrep and friends do; what is left to write goes nowhere.
        _stdout_to_devnull()
        return 0
    return 0


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush meets no closed pipe."""
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
