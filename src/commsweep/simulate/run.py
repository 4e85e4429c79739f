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


def _checked_text(text: str, parse) -> str:
    """``text`` kept as typed once ``parse`` reads it; its ``ValueError`` as argparse's error."""
    import argparse

    try:
        parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def cp_exchange_text(text: str) -> str:
    """``--cp-exchange``'s value, checked (``megatron_context_parallel.Exchange.parse``) and kept as typed."""
    from ..workload.megatron_context_parallel import Exchange

    return _checked_text(text, Exchange.parse)


def fsdp_gathers_text(text: str) -> str:
    """``--fsdp-gathers``'s value, checked (``megatron_fsdp.Gathers.parse``) and kept as typed."""
    from ..workload.megatron_fsdp import Gathers

    return _checked_text(text, Gathers.parse)


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
        endtoend_text, collectives_text = _run_simai(job, network, ratio_dir)
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


def _run_simai(job, network, ratio_dir: str | None) -> tuple[str, str]:
    """A user's SimAI_analytical on the workload (with ``--cp-exchange``, on the workload with
    the exchange in its rows, written to a private folder for the run)."""
    import tempfile

    from ..workload import format as wformat
    from . import simai

    from .engine import load_ratios

    workload_path, extra = Path(job.workload), ""
    with tempfile.TemporaryDirectory(prefix="commsweep-priced-") as folder:
        if job.cp_exchange is not None or job.fsdp_gathers is not None:
            priced, extra = with_unexpressed(wformat.read(job.workload), job, network, load_ratios(ratio_dir))
            workload_path = Path(folder) / workload_path.name
            wformat.write(priced, workload_path)
        result = simai.run(Path(job.simai_root), workload_path, network, prefix=job.prefix,
                           ratio_dir=Path(ratio_dir) if ratio_dir else None, simai_bugs=job.simai_bugs,
                           timeout=job.timeout, log=sys.stdout)
    for warning in result.warnings:
        note(f"warning: {warning}")
    return result.endtoend_text, result.collectives_csv() + extra


def _run_builtin(job, network, ratio_dir: str | None) -> tuple[str, str]:
    from ..workload import format as wformat
    from .engine import load_ratios, simulate

    ratios = load_ratios(ratio_dir)
    note(f"ratio tables: {ratios.source}")
    workload, extra = with_unexpressed(wformat.read(job.workload), job, network, ratios)
    sim = simulate(workload, network, ratios, prefix=job.prefix, simai_bugs=job.simai_bugs)
    for warning in sim.warnings():
        note(f"warning: {warning}")
    return sim.endtoend, sim.collectives_csv() + extra


def with_unexpressed(workload, job, network, ratios):
    """``workload`` with what a Megatron workload cannot hold priced into its rows' compute
    (``--cp-exchange``, ``--fsdp-gathers``), and those collectives as lines of the
    per-collective table (after the simulation's own); unchanged and none without them."""
    workload, exchanged = with_cp_exchange(workload, job.cp_exchange, network)
    workload, gathered = with_fsdp_gathers(workload, job.fsdp_gathers, network, ratios)
    return workload, exchange_rows(exchanged) + gather_rows(gathered, workload.header, network)


def with_fsdp_gathers(workload, spec: str | None, network, ratios):
    """``workload`` with what its per-layer FSDP all-gathers expose in the rows they precede,
    and each gather (``megatron_fsdp.in_rows``), one gather timed as the simulation times an
    all-gather of its bytes over DP (x CP: SimAI's DP group, ``engine.comm_time_ns``)."""
    if spec is None:
        return workload, []
    from ..workload import megatron_fsdp as fsdp
    from .engine import comm_time_ns

    g = fsdp.Gathers.parse(spec)
    gather_ns = tuple(comm_time_ns("ALLGATHER", "wg", n, workload.header, network, ratios) for n in g.layer_bytes)
    priced, gathered = fsdp.in_rows(workload, g, gather_ns)
    exposed = [sum(x.exposed_ns for x in gathered if x.phase == phase) for phase in ("fwd", "ig")]
    note(f"FSDP per-layer gathers ({g.kind}): {len(gathered)} all-gathers over DP ({sum(g.layer_bytes)} bytes, "
         f"{sum(gather_ns) / 1000:.0f} us a layer), exposed {exposed[0] / 1000:.0f} us forward and {exposed[1] / 1000:.0f} "
         "us backward, added to the rows they precede (no SimAI column carries them)")
    return priced, gathered


def gather_rows(gathered, header, network) -> str:
    """FSDP's per-layer gathers as lines of the per-collective table (group DP)."""
    from ..workload.format import group_sizes
    from .collectives import CollectiveTime, ns_text, to_csv
    from .engine import effective_size

    dp = group_sizes(header, int(network.gpus))["DP"] if gathered else 0
    table = [CollectiveTime(x.row, x.name, x.phase, "allgather", "DP", dp, effective_size(x.phase, x.bytes),
                            ns_text(x.time_ns), ns_text(x.exposed_ns)) for x in gathered]
    return to_csv(table).partition("\n")[2] if table else ""


# SimAI divides bytes by 2^30 and by its bandwidth flags: its "GB/s" are GiB/s.
SIMAI_GB = 2**30 / 1e9


def with_cp_exchange(workload, spec: str | None, network):
    """``workload`` with its CP exchange's exposed part in its core attention rows, and each
    collective of the exchange (``megatron_context_parallel.in_rows``), on the link its CP
    group runs over: ``-nv``, or the rank's share of ``-nic`` when the group spans servers
    (SimAI's flags are what NCCL reaches of each link, as the validation's time model takes
    them). Unchanged, with none, without ``spec``."""
    if spec is None:
        return workload, []
    from ..workload import megatron_context_parallel as cp

    x = cp.Exchange.parse(spec)
    gbps = cp.link_gbps(x, network.gpus_per_server, network.nics_per_server,
                        float(network.nvlink_gbps) * SIMAI_GB, float(network.nic_gbps) * SIMAI_GB)
    priced, exchanged = cp.in_rows(workload, x, gbps)
    exposed = [sum(e.exposed_ns for e in exchanged if e.phase == phase) for phase in ("fwd", "ig")]
    note(f"CP exchange ({x.kind}, cp {x.cp}, {gbps:g} GB/s): {len(exchanged)} collectives over the CP group, "
         f"exposed {exposed[0] / 1000:.0f} us forward and {exposed[1] / 1000:.0f} us backward, added to the core "
         "attention rows' compute (SimAI's format has no CP group)")
    return priced, exchanged


def exchange_rows(exchanged) -> str:
    """The CP exchange's collectives as lines of the per-collective table (group CP; the
    bytes as SimAI would time them), after the simulation's own."""
    from .collectives import CollectiveTime, ns_text, to_csv
    from .engine import effective_size

    table = [CollectiveTime(e.row, e.name, e.phase, e.comm.collective, e.comm.group, e.ranks,
                            effective_size(e.phase, e.comm.bytes),
                            ns_text(e.time_ns), ns_text(e.exposed_ns)) for e in exchanged]
    return to_csv(table).partition("\n")[2] if table else ""
