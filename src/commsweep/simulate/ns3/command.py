"""``commsweep simulate --backend ns3``: one workload through a user's SimAI_simulator.

Its options (``stage.PacketJob``'s fields) name the binary, the topology (a template of SimAI's
generator and its parameters, or a topology file) and the SimAI.conf/AS_* settings;
:func:`run` writes the same files as the analytical backends (SimAI's EndToEnd.csv as the
simulator wrote it, the collectives table, and with ``--times`` their sums) plus the run's
record (``record``). Notes and warnings go to stderr, SimAI's stdout to stdout: a rule's log
keeps both.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import ConfigError
from ...base.files import read_text, write_text
from . import conf, record, runner, topology


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


def run(job) -> None:
    """Run one packet-level simulation (``stage.PacketJob``: ``commsweep simulate --backend ns3``)."""
    if not job.ns3_root:
        raise ConfigError("the ns3 backend needs SimAI_simulator (--ns3-root: a SimAI checkout or the binary)",
                          key="--ns3-root")
    settings = settings_from_pairs(job.ns3_set)
    params = {k: _typed(k, v, _TOPO_INTS, set(), "--topology-param") for k, v in job.topology_param}
    topo = topology_for(job.gpus, job.topology, params, job.topology_file)
    for text in topo.notes:
        note(text)
    note(conf.describe(settings))
    result = runner.run(Path(job.ns3_root), Path(job.workload), topo.name, topo.text, settings,
                        threads=int(job.threads), timeout=None if job.timeout is None else float(job.timeout),
                        stall=float(job.stall), log=sys.stdout, build=job.ns3_build)
    for warning in result.warnings:
        note(f"warning: {warning}")
    note(f"{result.endtoend.total_time:.3f} us simulated in {result.wall_s:.1f} s by a {result.build} build")
    write_outputs(job, result, settings, threads=int(job.threads), topology_name=topo.name)


def write_outputs(job, result: runner.Ns3Run, settings: conf.Settings, *, threads: int, topology_name: str) -> None:
    """The analytical backend's files (times, collectives, EndToEnd.csv last), then the record."""
    from .. import times

    out_dir = Path(job.out_dir)
    endtoend_path = Path(job.endtoend) if job.endtoend else out_dir / f"{job.prefix}EndToEnd.csv"
    collectives_path = Path(job.collectives) if job.collectives else out_dir / f"{job.prefix}collectives.csv"
    record_path = Path(job.record) if job.record else out_dir / f"{job.prefix}ns3.csv"
    collectives_text = result.collectives_csv()
    if job.times:
        write_text(job.times, times.table(collectives_text, result.endtoend_text, collectives_source=collectives_path,
                                           endtoend_source=endtoend_path))
    write_text(collectives_path, collectives_text)
    record.write(record_path, record.row(result, settings, threads=threads, topology=topology_name))
    write_text(endtoend_path, result.endtoend_text)
