"""SimAI's NS-3 topology file: the templates of SimAI's generator, written byte for byte, and a strict reader.

The file (read by ``SetupNetwork`` in SimAI's ``network_frontend/ns3/common.h``)::

    <nodes> <gpus per server> <nvswitches> <other switches> <links> <gpu type>
    <switch ids, each followed by a space>
    <src> <dst> <rate> <delay> <error rate>        (one line per link)

Node ids: GPUs first, then NVSwitches, ASW (ToR), PSW (aggregation) switches. SimAI reads
exactly ``<links>`` link lines and ignores the rest; it knows the GPU types A100, A800, H100
and H800 and reads any other word (H20, ...) as ``NONE`` (no NVLS).

:func:`generate` is SimAI's ``astra-sim-alibabacloud/inputs/topo/gen_Topo_Template.py``
(SimAI cef83f9d) made a pure function: the same templates (:func:`resolve`: Spectrum-X,
AlibabaHPN single and dual plane, DCN+ single and dual ToR, and the bare rail-optimised /
non-rail-optimised shapes), the same defaults, the same arithmetic, the same file name and
bytes. Where that script would raise (too many GPUs for one pod, a GPU count that is not a
whole number of servers, so it indexes past its switch lists) this raises
:class:`TopologyError` saying so; where it corrects the ToR count with a warning, the
warning is kept in :attr:`Topology.notes`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import ConfigError, InputError
from ...base.files import read_text

KNOWN_GPU_TYPES = ("A100", "A800", "H100", "H800")
NVLS_GPU_TYPES = ("H100", "H800")
TOPOLOGIES = ("Spectrum-X", "AlibabaHPN", "DCN+")


class TopologyError(ConfigError):
    """A topology SimAI's generator cannot make (it would raise, or index past its lists)."""


@dataclass(frozen=True)
class Params:
    """The generator's parameters after its template defaults (``analysis_template``).

    Bandwidths and latencies are text, as the generator writes them (``400Gbps``,
    ``0.0005ms``); ``error_rate`` too (its default is the number 0, written ``0``).
    """

    topology: str | None = None
    rail_optimized: bool = True
    dual_tor: bool = False
    dual_plane: bool = False
    gpu: int = 32
    error_rate: str = "0"
    gpu_per_server: int = 8
    gpu_type: str = "H100"
    nv_switch_per_server: int = 1
    nvlink_bw: str = "2880Gbps"
    nv_latency: str = "0.000025ms"
    latency: str = "0.0005ms"
    bandwidth: str = "400Gbps"
    asw_switch_num: int = 8
    nics_per_aswitch: int = 64
    psw_switch_num: int = 64
    ap_bandwidth: str = "400Gbps"
    asw_per_psw: int = 64


OVERRIDABLE = tuple(f.name for f in dataclasses.fields(Params) if f.name not in
                    ("topology", "rail_optimized", "dual_tor", "dual_plane"))
# The generator's command-line flag of each parameter (for messages and the hand-run command).
FLAGS = {
    "gpu": "-g", "error_rate": "-er", "gpu_per_server": "-gps", "gpu_type": "-gt", "nv_switch_per_server": "-nsps",
    "nvlink_bw": "-nvbw", "nv_latency": "-nl", "latency": "-l", "bandwidth": "-bw", "asw_switch_num": "-asn",
    "nics_per_aswitch": "-npa", "psw_switch_num": "-psn", "ap_bandwidth": "-apbw", "asw_per_psw": "-app",
}


def resolve(topology: str | None = None, *, ro: bool = False, dt: bool = False, dp: bool = False,
            **overrides) -> Params:
    """The generator's parameters for ``-topo TOPOLOGY [--ro] [--dt] [--dp]`` and the given flags.

    As in SimAI's script, a named template fixes the structure (Spectrum-X: rail-optimised
    single ToR; AlibabaHPN: dual ToR, ``--dp`` dual plane; DCN+: not rail-optimised, ``--dt``
    dual ToR) and sets its own defaults; ``overrides`` (the names of :class:`Params`) win.
    """
    if topology is not None and topology not in TOPOLOGIES:
        raise TopologyError(f"unknown topology template {topology!r}; SimAI's generator has {', '.join(TOPOLOGIES)} "
                            "(or none, with --ro/--dt/--dp)", key="topology")
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise TopologyError(f"unknown topology parameter(s) {unknown}; known: {', '.join(OVERRIDABLE)}", key="topology")
    defaults = {f.name: f.default for f in dataclasses.fields(Params) if f.name in OVERRIDABLE}
    structure = dict(rail_optimized=bool(ro), dual_tor=bool(dt), dual_plane=bool(dp))
    if topology == "Spectrum-X":
        defaults.update(gpu=4096)
        structure = dict(rail_optimized=True, dual_tor=False, dual_plane=False)
    elif topology == "AlibabaHPN":
        defaults.update(gpu=15360, bandwidth="200Gbps", asw_switch_num=240, nics_per_aswitch=128,
                        psw_switch_num=120, asw_per_psw=240)
        structure = dict(rail_optimized=True, dual_tor=True, dual_plane=False)
        if dp:
            defaults.update(asw_per_psw=120)
            structure = dict(rail_optimized=True, dual_tor=True, dual_plane=True)
    elif topology == "DCN+":
        defaults.update(gpu=512, asw_switch_num=8, asw_per_psw=8, psw_switch_num=8)
        structure = dict(rail_optimized=False, dual_tor=False, dual_plane=False)
        if dt:
            defaults.update(bandwidth="200Gbps", nics_per_aswitch=128)
            structure = dict(rail_optimized=False, dual_tor=True, dual_plane=False)
    values = {**defaults, **{k: v for k, v in overrides.items() if v is not None}}
    for key in ("gpu", "gpu_per_server", "nv_switch_per_server", "asw_switch_num", "nics_per_aswitch",
                "psw_switch_num", "asw_per_psw"):
        if isinstance(values[key], bool) or not isinstance(values[key], int) or values[key] < 1:
            raise TopologyError(f"must be a whole number of at least 1, got {values[key]!r}", key=f"topology.{key}")
    for key in ("error_rate", "gpu_type", "nvlink_bw", "nv_latency", "latency", "bandwidth", "ap_bandwidth"):
        values[key] = str(values[key])
        if not values[key] or re.search(r"\s", values[key]):
            raise TopologyError(f"must be one word (SimAI reads the file word by word), got {values[key]!r}",
                                key=f"topology.{key}")
    return Params(topology=topology, **structure, **values)


# The templates by one name each (config ``simulator.ns3.topology.template``, ``--topology``):
# SimAI's generator's ``-topo NAME [--dp|--dt]``, or its bare ``--ro/--dt/--dp`` shapes.
TEMPLATES = {
    "Spectrum-X": ("Spectrum-X", {}),
    "AlibabaHPN": ("AlibabaHPN", {}),
    "AlibabaHPN-dual-plane": ("AlibabaHPN", {"dp": True}),
    "DCN+": ("DCN+", {}),
    "DCN+-dual-tor": ("DCN+", {"dt": True}),
    "rail-optimized": (None, {"ro": True}),
    "rail-optimized-dual-tor": (None, {"ro": True, "dt": True}),
    "rail-optimized-dual-plane": (None, {"ro": True, "dt": True, "dp": True}),
    "no-rail": (None, {}),
    "no-rail-dual-tor": (None, {"dt": True}),
}


def named(template: str, **params) -> Params:
    """:func:`resolve` for a template of :data:`TEMPLATES`."""
    if template not in TEMPLATES:
        raise TopologyError(f"unknown template {template!r}; known: {', '.join(TEMPLATES)}", key="topology.template")
    topology, flags = TEMPLATES[template]
    return resolve(topology, **flags, **params)


@dataclass(frozen=True)
class Topology:
    """A generated topology: SimAI's file name for it, its text, the generator's warnings."""

    file_name: str
    text: str
    notes: tuple[str, ...] = ()


def generate(p: Params) -> Topology:
    """The file SimAI's generator writes for these parameters (name, bytes, warnings)."""
    if p.gpu % p.gpu_per_server:
        raise TopologyError(f"{p.gpu} GPUs are not a whole number of servers of {p.gpu_per_server}: SimAI's "
                            "generator indexes past its NVSwitch list (IndexError)", key="topology.gpu")
    if not p.rail_optimized:
        if p.dual_plane:
            raise TopologyError("a non-rail-optimised structure has no dual plane (SimAI's generator refuses it)",
                                key="topology")
        return _no_rail(p, dual=p.dual_tor)
    if p.dual_tor:
        return _rail_dual(p, dual_plane=p.dual_plane)
    if p.dual_plane:
        raise TopologyError("a rail-optimised single-ToR structure has no dual plane (SimAI's generator refuses it)",
                            key="topology")
    return _rail_single(p)


def hand_command(p: Params) -> str:
    """The generator's command line that writes this topology (for the run record and docs)."""
    words = ["python3", "astra-sim-alibabacloud/inputs/topo/gen_Topo_Template.py"]
    if p.topology:
        words += ["-topo", p.topology]
    if p.dual_plane and p.topology == "AlibabaHPN":
        words.append("--dp")
    if p.dual_tor and p.topology == "DCN+":
        words.append("--dt")
    if p.topology is None:
        words += [flag for flag, on in (("--ro", p.rail_optimized), ("--dt", p.dual_tor), ("--dp", p.dual_plane)) if on]
    for name in OVERRIDABLE:
        words += [FLAGS[name], str(getattr(p, name))]
    return " ".join(words)


# -- the generator's five shapes ------------------------------------------------------


def _segments(p: Params, per_segment_divisor: float, asw_per_segment: float, notes: list[str]) -> tuple[int, int]:
    """Segments and the ToR count as the generator computes (and corrects) them."""
    span = p.nics_per_aswitch * per_segment_divisor
    segment_num = int(p.gpu / span) if p.gpu % span == 0 else int(p.gpu / span) + 1
    asw = p.asw_switch_num
    if segment_num != asw / asw_per_segment:
        asw = int(segment_num * asw_per_segment)
        notes.append(f"SimAI's generator corrects asw_switch_num from {p.asw_switch_num} to {asw} "
                     f"({segment_num} segment(s) for {p.gpu} GPUs)")
    return segment_num, asw


def _capacity(p: Params, segment_num: int, limit: float) -> None:
    if segment_num > int(limit):
        raise TopologyError(f"{p.gpu} GPUs need {segment_num} segments, more than one pod holds "
                            f"(asw_per_psw {p.asw_per_psw}): SimAI's generator refuses it "
                            "('Number of GPU exceeds the capacity')", key="topology.gpu")


def _header_and_switches(nodes: int, gps: int, nv: int, switch_nodes: int, links: float, gpu_type: str,
                         groups: list[int]) -> tuple[list[str], list[list[int]]]:
    lines = [f"{nodes} {gps} {nv} {switch_nodes - nv} {int(links)} {gpu_type}"]
    ids = range(nodes - switch_nodes, nodes)
    lines.append("".join(f"{i} " for i in ids))
    lists: list[list[int]] = [[] for _ in groups]
    for i in ids:
        for k, size in enumerate(groups):
            if len(lists[k]) < size:
                lists[k].append(i)
                break
    return lines, lists


def _link(a: int, b: int, rate: str, delay: str, error: str) -> str:
    return f"{a} {b} {rate} {delay} {error}"


def _nv_links(p: Params, nv_switch: list[int], i: int, ind_nv: int) -> list[str]:
    return [_link(i, nv_switch[ind_nv + j], p.nvlink_bw, p.nv_latency, p.error_rate)
            for j in range(p.nv_switch_per_server)]



def _rail_single(p: Params) -> Topology:
    notes: list[str] = []
    per_seg = p.gpu_per_server
    segment_num, asw = _segments(p, per_seg, per_seg, notes)
    _capacity(p, segment_num, p.asw_per_psw / per_seg)
    nv = int(p.gpu / p.gpu_per_server) * p.nv_switch_per_server
    nodes = int(p.gpu + asw + p.psw_switch_num + nv)
    servers = p.gpu / p.gpu_per_server
    switch_nodes = int(p.psw_switch_num + asw + nv)
    links = p.psw_switch_num / 1 * asw + servers * per_seg + servers * p.nv_switch_per_server * p.gpu_per_server
    suffix = f"{p.gpu}g_{p.gpu_per_server}gps_{p.bandwidth}_{p.gpu_type}"
    name = "Spectrum-X_" + suffix if p.topology == "Spectrum-X" else "Rail_Opti_SingleToR_" + suffix
    lines, (nv_switch, asw_switch, psw_switch) = _header_and_switches(
        nodes, p.gpu_per_server, nv, switch_nodes, links, p.gpu_type, [nv, asw, p.psw_switch_num])
    ind_asw = curr = group_num = group_account = ind_nv = 0
    for i in range(p.gpu):
        curr += 1
        if curr > p.gpu_per_server:
            curr = 1
            ind_nv += p.nv_switch_per_server
        lines += _nv_links(p, nv_switch, i, ind_nv)
        lines.append(_link(i, _pick(asw_switch, group_num * per_seg + ind_asw, p), p.bandwidth, p.latency, p.error_rate))
        ind_asw += 1
        group_account += 1
        if ind_asw == per_seg:
            ind_asw = 0
        if group_account == p.gpu_per_server * p.nics_per_aswitch:
            group_num += 1
            group_account = 0
    lines += [_link(a, b, p.ap_bandwidth, p.latency, p.error_rate) for a in asw_switch for b in psw_switch]
    return Topology(name, "".join(line + "\n" for line in lines), tuple(notes))


def _rail_dual(p: Params, *, dual_plane: bool) -> Topology:
    notes: list[str] = []
    per_seg = p.gpu_per_server * 2
    segment_num, asw = _segments(p, per_seg / 2, per_seg, notes)
    _capacity(p, segment_num, p.asw_per_psw / (per_seg / 2))
    nv = int(p.gpu / p.gpu_per_server) * p.nv_switch_per_server
    nodes = int(p.gpu + asw + p.psw_switch_num + nv)
    servers = p.gpu / p.gpu_per_server
    switch_nodes = int(p.psw_switch_num + asw + nv)
    psw_term = p.psw_switch_num / 1 / 2 * asw if dual_plane else p.psw_switch_num / 1 * asw
    links = psw_term + servers * per_seg + servers * p.nv_switch_per_server * p.gpu_per_server
    plane = "DualPlane" if dual_plane else "SinglePlane"
    suffix = f"{p.gpu}g_{p.gpu_per_server}gps_DualToR_{plane}_{p.bandwidth}_{p.gpu_type}"
    name = ("AlibabaHPN_" if p.topology == "AlibabaHPN" else "Rail_Opti_") + suffix
    if dual_plane:
        groups = [nv, asw / 2, asw / 2, p.psw_switch_num / 2, p.psw_switch_num / 2]
    else:
        groups = [nv, asw / 2, asw / 2, p.psw_switch_num]
    lines, lists = _header_and_switches(nodes, p.gpu_per_server, nv, switch_nodes, links, p.gpu_type, groups)
    nv_switch, asw_1, asw_2 = lists[0], lists[1], lists[2]
    psw_1, psw_2 = (lists[3], lists[4]) if dual_plane else (lists[3], lists[3])
    half = int(per_seg / 2)
    ind_asw = curr = group_num = group_account = ind_nv = 0
    for i in range(p.gpu):
        curr += 1
        if curr > p.gpu_per_server:
            curr = 1
            ind_nv += p.nv_switch_per_server
        lines += _nv_links(p, nv_switch, i, ind_nv)
        lines.append(_link(i, _pick(asw_1, group_num * half + ind_asw, p), p.bandwidth, p.latency, p.error_rate))
        lines.append(_link(i, _pick(asw_2, group_num * half + ind_asw, p), p.bandwidth, p.latency, p.error_rate))
        ind_asw += 1
        group_account += 1
        if ind_asw == half:
            ind_asw = 0
        if group_account == p.gpu_per_server * p.nics_per_aswitch:
            group_num += 1
            group_account = 0
    lines += [_link(a, b, p.ap_bandwidth, p.latency, p.error_rate) for a in asw_1 for b in psw_1]
    lines += [_link(a, b, p.ap_bandwidth, p.latency, p.error_rate) for a in asw_2 for b in psw_2]
    return Topology(name, "".join(line + "\n" for line in lines), tuple(notes))


def _no_rail(p: Params, *, dual: bool) -> Topology:
    notes: list[str] = []
    per_seg = 2 if dual else 1
    segment_num, asw = _segments(p, per_seg / 2 if dual else per_seg, per_seg, notes)
    _capacity(p, segment_num, p.asw_per_psw / per_seg)
    nv = int(p.gpu / p.gpu_per_server) * p.nv_switch_per_server
    nodes = int(p.gpu + asw + p.psw_switch_num + nv)
    servers = p.gpu / p.gpu_per_server
    switch_nodes = int(p.psw_switch_num + asw + nv)
    nic_links = servers * p.gpu_per_server * 2 if dual else servers * p.gpu_per_server
    links = p.psw_switch_num / 1 * asw + nic_links + servers * p.nv_switch_per_server * p.gpu_per_server
    tor = "DualToR" if dual else "SingleToR"
    if p.topology == "DCN+":
        name = f"DCN+{tor}_{p.gpu}g_{p.gpu_per_server}gps_{p.bandwidth}_{p.gpu_type}"
    else:
        name = f"No_Rail_Opti_{p.gpu}g_{p.gpu_per_server}gps_{tor}_{p.bandwidth}_{p.gpu_type}"
    groups = [nv, asw / 2, asw / 2, p.psw_switch_num] if dual else [nv, asw, p.psw_switch_num]
    lines, lists = _header_and_switches(nodes, p.gpu_per_server, nv, switch_nodes, links, p.gpu_type, groups)
    nv_switch = lists[0]
    tors = [lists[1], lists[2]] if dual else [lists[1]]
    psw_switch = lists[-1]
    stride = int(per_seg / 2) if dual else per_seg
    curr = group_num = group_account = ind_nv = 0
    for i in range(p.gpu):
        curr += 1
        if curr > p.gpu_per_server:
            curr = 1
            ind_nv += p.nv_switch_per_server
        lines += _nv_links(p, nv_switch, i, ind_nv)
        for tor_list in tors:
            lines.append(_link(i, _pick(tor_list, group_num * stride, p), p.bandwidth, p.latency, p.error_rate))
        group_account += 1
        if group_account == p.nics_per_aswitch:
            group_num += 1
            group_account = 0
    for tor_list in tors:
        lines += [_link(a, b, p.ap_bandwidth, p.latency, p.error_rate) for a in tor_list for b in psw_switch]
    return Topology(name, "".join(line + "\n" for line in lines), tuple(notes))


def _pick(switches: list[int], index: int, p: Params) -> int:
    if index >= len(switches):
        raise TopologyError(f"SimAI's generator indexes past its ToR list for {p.gpu} GPUs with "
                            f"{p.nics_per_aswitch} NICs per ToR (IndexError)", key="topology")
    return switches[index]


# -- reading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    src: int
    dst: int
    rate: str
    delay: str
    error_rate: str


@dataclass(frozen=True)
class TopologyFile:
    """A topology file as SimAI reads it."""

    nodes: int
    gpus_per_server: int
    nvswitches: int
    switches: int
    gpu_type: str
    switch_ids: tuple[int, ...]
    links: tuple[Link, ...]

    @property
    def gpus(self) -> int:
        """GPUs: the nodes that are neither NVSwitches nor switches (as SimAI's ``main`` counts them)."""
        return self.nodes - self.nvswitches - self.switches

    @property
    def known_gpu_type(self) -> bool:
        return self.gpu_type in KNOWN_GPU_TYPES


_RATE = re.compile(r"[0-9]+(\.[0-9]+)?(bps|Kbps|Mbps|Gbps|Tbps|Kb/s|Mb/s|Gb/s)")
_DELAY = re.compile(r"[0-9]+(\.[0-9]+)?(s|ms|us|ns|ps)")


def parse(text: str, *, source: str | Path = "<topology>") -> TopologyFile:
    """A topology file, strictly: what SimAI would misread (too few link lines, ids out of
    range, a GPU type over several words) is an error naming the line."""
    lines = text.split("\n")
    head = lines[0].split()
    if len(head) != 6:
        raise InputError(f"expected 6 fields (nodes, gpus per server, nvswitches, switches, links, gpu type), "
                         f"got {len(head)}", file=source, line=1)
    try:
        nodes, gps, nvs, sws, n_links = (int(v) for v in head[:5])
    except ValueError:
        raise InputError(f"expected whole numbers, got {' '.join(head[:5])!r}", file=source, line=1) from None
    if len(lines) < 2:
        raise InputError("no switch line", file=source, line=2)
    try:
        ids = tuple(int(v) for v in lines[1].split())
    except ValueError:
        raise InputError("expected switch ids", file=source, line=2) from None
    if len(ids) != nvs + sws:
        raise InputError(f"expected {nvs + sws} switch ids ({nvs} NVSwitches + {sws} switches), got {len(ids)}",
                         file=source, line=2)
    bad = [i for i in ids if not 0 <= i < nodes]
    if bad:
        raise InputError(f"switch id(s) outside 0..{nodes - 1}: {bad[:5]}", file=source, line=2)
    links = []
    body = [(n, line) for n, line in enumerate(lines[2:], start=3) if line.strip()]
    if len(body) < n_links:
        raise InputError(f"the header announces {n_links} links, the file has {len(body)} (SimAI would read "
                         "past the end)", file=source, line=len(lines))
    for n, line in body[:n_links]:
        cells = line.split()
        if len(cells) != 5:
            raise InputError(f"expected 5 fields (src dst rate delay error_rate), got {len(cells)}", file=source, line=n)
        try:
            a, b = int(cells[0]), int(cells[1])
            float(cells[4])
        except ValueError:
            raise InputError("expected node ids and an error rate", file=source, line=n) from None
        if not (0 <= a < nodes and 0 <= b < nodes):
            raise InputError(f"node id outside 0..{nodes - 1}", file=source, line=n)
        if not _RATE.fullmatch(cells[2]):
            raise InputError(f"expected a data rate like 400Gbps, got {cells[2]!r}", file=source, line=n, field="rate")
        if not _DELAY.fullmatch(cells[3]):
            raise InputError(f"expected a delay like 0.0005ms, got {cells[3]!r}", file=source, line=n, field="delay")
        links.append(Link(a, b, cells[2], cells[3], cells[4]))
    return TopologyFile(nodes, gps, nvs, sws, head[5], ids, tuple(links))


def read(path: str | Path) -> TopologyFile:
    return parse(read_text(path), source=path)
