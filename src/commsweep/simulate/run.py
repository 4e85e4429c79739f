"""``commsweep simulate``: one workload through the built-in engine or a user's SimAI.

Runs a ``stage.SimulateJob`` (the command's flags, typed), in-process or from the command line.

Writes ``<out-dir>/<PREFIX>EndToEnd.csv`` (SimAI's file, byte-identical for the engine)
and ``<out-dir>/<PREFIX>collectives.csv`` (the tidy per-collective table), or the paths
given with ``--endtoend`` / ``--collectives``; with ``--times``, also their sums, what the
sweep's summary reads (``simulate.times``). Notes (which ratio tables were used, every
SimAI bug case met) go to stderr, so a pipeline rule's log keeps them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..base.errors import ConfigError
from ..base.files import write_text


def number_text(text: str) -> str:
    """A number kept as typed: SimAI reads it with std::stof, and so does the engine."""
    import argparse

    try:
        float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    return text


def add_gpus_argument(parser, *, required: bool) -> None:
    """SimAI's ``-g``: the GPUs of the run, which set the DP group size."""
    from ..setup.network import GPUS_FLAG

    parser.add_argument(GPUS_FLAG, "--gpus", type=int, required=required, default=None,
                        help="SimAI's -g: GPUs (sets DP = g / (tp * pp))" + ("" if required else "; default: the header's all_gpus"))


def ratio_dir_for(ratio_dir: str | None, simai_root: str | None) -> str | None:
    """The ratio tables to use: the configured directory, else a SimAI checkout's own."""
    if ratio_dir:
        return ratio_dir
    if simai_root:
        from .ratio import RATIO_SUBDIR

        return str(Path(simai_root) / RATIO_SUBDIR)
    return None


def gpu_mismatch(gpus: int, header) -> str | None:
    """Why ``-g gpus`` does not fit a workload's header (None when it equals ``all_gpus``).

    SimAI takes the DP group size from ``-g``, not from the file: DP = floor(g / (tp * pp)).
    A ``-g`` other than the workload's own GPUs silently simulates another DP, and one below
    tp x pp drops every DP collective.
    """
    if gpus == header.all_gpus:
        return None
    model_parallel = header.tp * header.pp
    dp = gpus // model_parallel
    why = (f"-g {gpus} differs from the workload's all_gpus: {header.all_gpus}; SimAI then takes "
           f"DP = floor({gpus} / (tp {header.tp} x pp {header.pp})) = {dp}")
    if dp == 0:
        why += ", and drops every DP collective"
    elif gpus % model_parallel:
        why += f" ({gpus} is not a multiple of {model_parallel})"
    return why


def check_gpus(workload: str, gpus: int, strict: bool) -> None:
    """Warn (or with ``strict`` fail) where ``-g`` is not the workload's all_gpus (``gpu_mismatch``)."""
    from ..workload import format as wformat

    problem = gpu_mismatch(gpus, wformat.read_header(workload))
    if problem is None:
        return
    if strict:
        raise ConfigError(problem)
    note(f"warning: {problem} (--strict makes this an error)")


def note(text: str) -> None:
    print(f"commsweep simulate: {text}", file=sys.stderr)


def run(job) -> None:
    """One simulation with an analytical backend (builtin or simai): its three tables written.
    ``job``: a ``stage.SimulateJob`` (this module is below the stage, which imports it)."""
    if job.backend not in ("builtin", "simai"):
        raise ConfigError(f"must be builtin or simai here, got {job.backend!r} (the ns3 backend's job is the "
                          "packet-level stage's)", key="backend")
    network = job.network()
    if job.bucket_overlap != "none":
        network = bucket_network(job, network, ratio_dir_for(job.ratio_dir, job.simai_root))
    out_dir = Path(job.out_dir)
    endtoend_path = Path(job.endtoend) if job.endtoend else out_dir / f"{job.prefix}EndToEnd.csv"
    collectives_path = Path(job.collectives) if job.collectives else out_dir / f"{job.prefix}collectives.csv"
    ratio_dir = ratio_dir_for(job.ratio_dir, job.simai_root)
    check_gpus(job.workload, job.gpus, job.strict)
    if job.backend == "builtin":
        endtoend_text, collectives_text = _run_builtin(job, network, ratio_dir)
    else:
        if not job.simai_root:
            raise ConfigError("the simai backend needs the root of a built SimAI (--simai-root)", key="simai_root")
        from . import simai

        result = simai.run(Path(job.simai_root), Path(job.workload), network, prefix=job.prefix,
                           ratio_dir=Path(ratio_dir) if ratio_dir else None, simai_bugs=job.simai_bugs,
                           timeout=job.timeout, log=sys.stdout)
        for warning in result.warnings:
            note(f"warning: {warning}")
        endtoend_text, collectives_text = result.endtoend_text, result.collectives_csv()
    times_text = None
    if job.times:
        from . import times

        times_text = times.table(collectives_text, endtoend_text, collectives_source=collectives_path,
                                 endtoend_source=endtoend_path)
    # The tidy tables first: the EndToEnd.csv is the file pipelines wait for.
    if times_text is not None:
        write_text(job.times, times_text)
    write_text(collectives_path, collectives_text)
    write_text(endtoend_path, endtoend_text)


def bucket_network(job, network, ratio_dir: str | None):
    """``network`` with the DP overlap ratio of the workload's overlapped buckets
    (``overlap.bucket_times``), noted with what it hides."""
    from dataclasses import replace

    from ..workload import format as wformat
    from .engine import load_ratios
    from .overlap import bucket_times

    times = bucket_times(wformat.read(job.workload), network, load_ratios(ratio_dir), overlap_grad_reduce=True,
                         overlap_param_gather=job.bucket_overlap == "grads+params")
    ratio = f"{times.ratio:.9f}".rstrip("0").rstrip(".") if times.ratio else "0"
    note(f"buckets ({job.bucket_overlap}): DP {times.total_ns / 1000:.0f} us, exposed {times.exposed_ns / 1000:.0f} us "
         f"(reduces {times.reduce_exposed_ns / 1000:.0f} of {times.reduce_ns / 1000:.0f}, gathers "
         f"{times.gather_exposed_ns / 1000:.0f} of {times.gather_ns / 1000:.0f}): -dp_o {ratio}")
    return replace(network, dp_overlap=ratio)


def _run_builtin(job, network, ratio_dir: str | None) -> tuple[str, str]:
    from ..workload import format as wformat
    from .engine import load_ratios, simulate

    ratios = load_ratios(ratio_dir)
    note(f"ratio tables: {ratios.source}")
    workload = wformat.read(job.workload)
    sim = simulate(workload, network, ratios, prefix=job.prefix, simai_bugs=job.simai_bugs)
    for warning in sim.warnings():
        note(f"warning: {warning}")
    return sim.endtoend, sim.collectives_csv()
