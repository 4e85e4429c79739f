"""``commsweep simulate --backend ns3``: one workload through a user's SimAI_simulator.

Its options (:func:`add_arguments`) name the binary, the topology (a template of SimAI's
generator and its parameters, or a topology file) and the SimAI.conf/AS_* settings;
:func:`run` writes the same files as the analytical backends (SimAI's EndToEnd.csv as the
simulator wrote it, the collectives table, and with ``--times`` their sums) plus the run's
record (``record``). Notes and warnings go to stderr, SimAI's stdout to stdout: a rule's log
keeps both.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import ConfigError
from ...base.files import read_text, write_text
from . import conf, record, runner, topology


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser) -> None:
    g = parser.add_argument_group("packet-level simulation (--backend ns3: SimAI_simulator)")
    g.add_argument("--ns3-root", metavar="PATH",
                   help="a SimAI checkout built with './scripts/build.sh -c ns3', or its SimAI_simulator")
    g.add_argument("--ns3-build", metavar="LABEL",
                   help="how the binary was built, stated beside its times (default: its ns-3 profile, from its name)")
    g.add_argument("--topology", default="rail-optimized", choices=tuple(topology.TEMPLATES),
                   help="a template of SimAI's topology generator (default: rail-optimized, its quickstart's --ro)")
    g.add_argument("--topology-param", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="a generator parameter (gpu_per_server, gpu_type, bandwidth, nvlink_bw, latency, ...); "
                        "gpu is -g")
    g.add_argument("--topology-file", metavar="FILE", help="a topology file to use instead of a template")
    g.add_argument("--ns3-set", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                   help="a SimAI.conf or AS_* setting: cc_mode, buffer_mb, ecn, dynamic_pfc_threshold, "
                        "packet_payload, send_latency_us (us per flow: AS_SEND_LAT), nvls, pxn")
    g.add_argument("--threads", type=int, default=1, help="SimAI_simulator's -t (default 1)")
    g.add_argument("--stall", type=float, default=600.0, metavar="SECONDS",
                   help="stop a run when no flow finishes and nothing is printed for this long (default 600)")
    g.add_argument("--record", metavar="FILE", help="the run's record (default: <out-dir>/<PREFIX>ns3.csv)")


_INTS = {"cc_mode", "buffer_mb", "packet_payload", "send_latency_us"}
_BOOLS = {"ecn", "dynamic_pfc_threshold", "nvls", "pxn"}
_TOPO_INTS = {"gpu", "gpu_per_server", "nv_switch_per_server", "asw_switch_num", "nics_per_aswitch",
              "psw_switch_num", "asw_per_psw"}


def _typed(key: str, value: str, ints: set[str], bools: set[str], where: str):
    if key in ints:
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"expected a whole number, got {value!r}", key=f"{where}.{key}") from None
    if key in bools:
        if value.lower() not in ("0", "1", "true", "false"):
            raise ConfigError(f"expected 0/1/true/false, got {value!r}", key=f"{where}.{key}")
        return value.lower() in ("1", "true")
    return value


def settings_from_pairs(pairs) -> conf.Settings:
    values = {k: _typed(k, v, _INTS, _BOOLS, "--ns3-set") for k, v in pairs}
    return conf.settings_from_mapping(values, key="--ns3-set")


@dataclass(frozen=True)
class TopologyChoice:
    """The topology file of a run: its name and text (from a template or a user's file)."""

    name: str
    text: str
    notes: tuple[str, ...] = ()


def topology_for(gpus: int, template: str, params: dict, path: str | None = None) -> TopologyChoice:
    if path:
        return TopologyChoice(Path(path).name, read_text(path))
    if "gpu" in params and params["gpu"] != gpus:
        raise ConfigError(f"the topology's gpu is -g ({gpus}), not {params['gpu']}", key="topology.gpu")
    made = topology.generate(topology.named(template, **{**params, "gpu": gpus}))
    return TopologyChoice(made.file_name, made.text, made.notes)


def note(text: str) -> None:
    print(f"commsweep simulate: {text}", file=sys.stderr)


def run(opts) -> None:
    """Run one packet-level simulation with ``commsweep simulate``'s options (``run.Options``)."""
    ns = opts.ns3
    if not ns.ns3_root:
        raise ConfigError("the ns3 backend needs SimAI_simulator (--ns3-root: a SimAI checkout or the binary)",
                          key="--ns3-root")
    settings = settings_from_pairs(ns.ns3_set)
    params = {k: _typed(k, v, _TOPO_INTS, set(), "--topology-param") for k, v in ns.topology_param}
    topo = topology_for(opts.gpus, ns.topology, params, ns.topology_file)
    for text in topo.notes:
        note(text)
    note(conf.describe(settings))
    result = runner.run(Path(ns.ns3_root), Path(opts.workload), topo.name, topo.text, settings, threads=ns.threads,
                        timeout=opts.timeout, stall=ns.stall, log=sys.stdout, build=ns.ns3_build)
    for warning in result.warnings:
        note(f"warning: {warning}")
    note(f"{result.endtoend.total_time:.3f} us simulated in {result.wall_s:.1f} s by a {result.build} build")
    write_outputs(opts, result, settings, threads=ns.threads, topology_name=topo.name)


def write_outputs(opts, result: runner.Ns3Run, settings: conf.Settings, *, threads: int, topology_name: str) -> None:
    """The analytical backend's files (times, collectives, EndToEnd.csv last), then the record."""
    from .. import times

    out_dir = Path(opts.out_dir)
    endtoend_path = Path(opts.endtoend) if opts.endtoend else out_dir / f"{opts.prefix}EndToEnd.csv"
    collectives_path = Path(opts.collectives) if opts.collectives else out_dir / f"{opts.prefix}collectives.csv"
    record_path = Path(opts.ns3.record) if opts.ns3.record else out_dir / f"{opts.prefix}ns3.csv"
    collectives_text = result.collectives_csv()
    if opts.times:
        write_text(opts.times, times.table(collectives_text, result.endtoend_text, collectives_source=collectives_path,
                                           endtoend_source=endtoend_path))
    write_text(collectives_path, collectives_text)
    record.write(record_path, record.row(result, settings, threads=threads, topology=topology_name))
    write_text(endtoend_path, result.endtoend_text)
