"""``commsweep simulate``: one workload through the built-in engine or a user's SimAI.

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


class Options:
    """The command's options (``commsweep simulate --help``), with SimAI's defaults."""

    DEFAULTS = dict(
        tp_overlap="0", dp_overlap="0", ep_overlap="0", pp_overlap="1", ratio_dir=None, out_dir="results",
        endtoend=None, collectives=None, times=None, simai_bugs="fix", backend="builtin", simai_root=None, timeout=None,
        strict=False, ns3=None,
    )
    REQUIRED = ("workload", "gpus", "gpus_per_server", "nics_per_server", "nvlink", "nic", "prefix")

    def __init__(self, **values) -> None:
        missing = [k for k in self.REQUIRED if k not in values]
        unknown = [k for k in values if k not in self.DEFAULTS and k not in self.REQUIRED]
        if missing or unknown:
            raise TypeError(f"Options: missing {missing}, unknown {unknown}")
        self.__dict__.update({**self.DEFAULTS, **values})


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


def add_network_arguments(parser, *, required: bool, title: str = "network (SimAI's flags)") -> None:
    """SimAI_analytical's four network flags, and the ratio tables: one definition for every command.

    ``simulate`` requires them; ``audit`` and ``timeline`` take all four or none. Each keeps
    SimAI's spelling; the names ``audit`` once had (``--nvlink_gbps`` ...) parse as aliases.
    The bandwidths stay text, as typed: SimAI reads them with ``std::stof``, and so does the engine.
    """
    from ..base.flags import add_flag
    from ..setup.network import SERVER_FLAGS as FLAG

    n = parser.add_argument_group(title)
    add_flag(n, FLAG["gpus_per_server"], "--gpus-per-server", dest="gpus_per_server", type=int, required=required,
             default=None, help="GPUs per server (per NVLink domain)")
    add_flag(n, FLAG["nics_per_server"], "--nic_per_server", dest="nics_per_server", type=int, required=required,
             default=None, aliases=("--nics_per_server",), help="NICs per server")
    add_flag(n, FLAG["nvlink_gbps"], "--nvlink", dest="nvlink_gbps", type=number_text, required=required, default=None,
             aliases=("--nvlink_gbps",), help="NVLink bandwidth per GPU, GB/s")
    add_flag(n, FLAG["nic_gbps"], "--nic_busbw", dest="nic_gbps", type=number_text, required=required, default=None,
             aliases=("--nic_gbps",), help="bandwidth per NIC, GB/s")
    add_flag(n, "--ratio-dir", metavar="DIR", default=None,
             help="SimAI's ratio tables ({nvlink,nic,ata}_ratio.csv); default: a SimAI root's (simulate "
                  "--simai-root), else the engine's default (efficiency 1.0)")


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


def _check_gpus(opts: Options) -> None:
    from ..workload import format as wformat

    problem = gpu_mismatch(opts.gpus, wformat.read_header(opts.workload))
    if problem is None:
        return
    if opts.strict:
        raise ConfigError(problem)
    note(f"warning: {problem} (--strict makes this an error)")


def note(text: str) -> None:
    print(f"commsweep simulate: {text}", file=sys.stderr)


def run(opts: Options) -> None:
    if opts.backend == "ns3":  # SimAI's packet-level simulator: a topology, not the analytical flags
        from .ns3 import command

        _check_gpus(opts)
        command.run(opts)
        return
    from ..setup.network import Network

    network = Network(
        gpus=opts.gpus, gpus_per_server=opts.gpus_per_server, nics_per_server=opts.nics_per_server,
        nvlink_gbps=opts.nvlink, nic_gbps=opts.nic, tp_overlap=opts.tp_overlap, dp_overlap=opts.dp_overlap,
        ep_overlap=opts.ep_overlap, pp_overlap=opts.pp_overlap,
    )
    out_dir = Path(opts.out_dir)
    endtoend_path = Path(opts.endtoend) if opts.endtoend else out_dir / f"{opts.prefix}EndToEnd.csv"
    collectives_path = Path(opts.collectives) if opts.collectives else out_dir / f"{opts.prefix}collectives.csv"
    ratio_dir = ratio_dir_for(opts.ratio_dir, opts.simai_root)
    _check_gpus(opts)
    if opts.backend == "builtin":
        endtoend_text, collectives_text = _run_builtin(opts, network, ratio_dir)
    elif opts.backend == "simai":
        if not opts.simai_root:
            raise ConfigError("the simai backend needs the root of a built SimAI (--simai-root)", key="simai_root")
        from . import simai

        result = simai.run(Path(opts.simai_root), Path(opts.workload), network, prefix=opts.prefix,
                           ratio_dir=Path(ratio_dir) if ratio_dir else None, simai_bugs=opts.simai_bugs,
                           timeout=opts.timeout, log=sys.stdout)
        for warning in result.warnings:
            note(f"warning: {warning}")
        endtoend_text, collectives_text = result.endtoend_text, result.collectives_csv()
    else:
        raise ConfigError(f"must be builtin, simai or ns3, got {opts.backend!r}", key="backend")
    times_text = None
    if opts.times:
        from . import times

        times_text = times.table(collectives_text, endtoend_text, collectives_source=collectives_path,
                                 endtoend_source=endtoend_path)
    # The tidy tables first: the EndToEnd.csv is the file pipelines wait for.
    if times_text is not None:
        write_text(opts.times, times_text)
    write_text(collectives_path, collectives_text)
    write_text(endtoend_path, endtoend_text)


def _run_builtin(opts: Options, network, ratio_dir: str | None) -> tuple[str, str]:
    from ..workload import format as wformat
    from .engine import load_ratios, simulate

    ratios = load_ratios(ratio_dir)
    note(f"ratio tables: {ratios.source}")
    workload = wformat.read(opts.workload)
    sim = simulate(workload, network, ratios, prefix=opts.prefix, simai_bugs=opts.simai_bugs)
    for warning in sim.warnings():
        note(f"warning: {warning}")
    return sim.endtoend, sim.collectives_csv()
