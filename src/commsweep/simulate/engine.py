"""SimAI_analytical's model in closed form: a workload and SimAI's flags in, EndToEnd.csv out.

SimAI's analytical backend advances a clock one nanosecond at a time, yet what it reports
does not depend on that clock: each row's three collectives get a time from a formula
(``bandwidth.py``), the overlap ratios turn them into exposed times, and a handful of
sums make the summary. This module computes exactly those numbers, with SimAI's types
and order of operations (``cfloat.py``), so its EndToEnd.csv is byte-identical to
SimAI's. Facts: SimAI 1.7 (aliyun/SimAI @ cef83f9d), ``astra-sim-alibabacloud/astra-sim/``
``workload/Workload.cc``, ``workload/Layer.cc``, ``system/calbusbw.cc``.

**One iteration** (``Workload.cc``). Forward: rows 0..N-1, each its fwd compute then its
fwd collective. Backward: rows N-1..0, each ig compute, ig collective, wg compute, wg
collective. Every collective runs once. With a checkpoint layer c and an initiator
layer i > c in the header (only the first listed of each is read), rows c..i-1 run
their forward compute a second time (not their communication).

**Per row** (``Layer::report``): comm times before overlap for fwd, wg, ig; exposed =
trunc(float32(t) * float32(1 - overlap)), with the TP overlap for fwd and ig (the EP one
when the row's FWD collective is on EP) and the DP overlap for wg. Sums in doubles of
unrounded us: DP (or DP_EP when the wg type ends in ``_DP_EP``) += wg exposed; TP (or
EP) += fwd + ig exposed; compute and exposed += fwd, wg, ig each. Bubble: for every row
not named ``embedding_layer``, fwd compute (all runs) + fwd comm + wg compute + ig compute
+ ig comm (before overlap), times (pp - 1) / (ga * vpp) at the end. PP comm =
trunc(2 * vpp * ga * pp_comm / 2^30 / pp_o * 1e9 / 1000) * float32(1 - pp_o), truncated.
Total = compute + exposed + bubble + PP.

**SimAI's bugs** (all exit 0 in SimAI) and what ``simai_bugs`` does about them:

=================  ===========================================  ============================================
kind               SimAI                                        ``fix`` (the default; warns naming each row)
=================  ===========================================  ============================================
one-gpu-group      a collective on a group of one GPU (TP 1)    0 us: one GPU has nothing to exchange
                   gets bandwidth 0: NaN -> 9223372036854776 us  (algbw prints ``inf``, busbw ``0.00``)
zero-nics          a NIC share ``n_p_s / t`` floors to 0: the   the exact fractional share (e.g. 4 NICs for
                   bandwidth is -1, the time wraps to ~1.8e16   8 GPUs: 0.5 NIC per GPU) in the bandwidth
                   us, its exposed value to 0                   formula
ratio-range        a message beyond the ratio table's last row  the last row's efficiency (the table is
                   (16 GiB) on a ratio collective: exception,   flat there)
                   EndToEnd.csv cut before that row (EMPTY
                   when it is row 0)
pp-overlap-zero    ``-pp_o 0``: the PP formula divides by 0:    PP comm 0 us (what SimAI prints when pp_comm
                   0 us, or 2^63 us if pp_comm = 0              > 0), with the warning
=================  ===========================================  ============================================

``reproduce`` gives SimAI's output exactly; ``error`` raises :class:`SimaiBugError`
listing every affected row.

Public API (used by the audit): :class:`Ratios`, :func:`load_ratios`, :func:`comm_time_ns`
(one collective) and :func:`simulate` (a whole workload), on a ``setup.network.Network``
with its GPU count and overlap ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.cfloat import U64_MASK, div, f32, f32_of_int, fixed, u64
from ..base.errors import CommsweepError, ConfigError, InputError
from ..setup.network import Network
from ..workload import format as wformat
from ..workload.format import Header, Workload
from . import endtoend
from .bandwidth import (
    ALLGATHER, ALLREDUCE, ALLTOALL, GIB, NO_NIC, ONE_GPU, REDUCESCATTER, NetParams, bus_bandwidth, efficiency,
    formula_ns, group_arguments, ratio_case, reported_bandwidths, small_message_ns,
)
from .collectives import COLUMNS, csv_field, ns_text
from .ratio import Ratios, RatioOutOfRange, load_ratios

__all__ = [
    "BUG_MODES", "Ratios", "Simulation", "SimaiBugError", "comm_time_ns", "load_ratios", "simulate",
]

BUG_MODES = ("fix", "reproduce", "error")
RATIO_RANGE = "ratio-range"
PP_OVERLAP_ZERO = "pp-overlap-zero"
PP_COMM_RANGE = "pp-comm-range"
BUG_TEXT = {
    ONE_GPU: "a collective on a group of one GPU: SimAI's bandwidth is 0 and the time 9223372036854776 us",
    NO_NIC: "the NIC share floors to 0 NICs: SimAI's bandwidth is -1 and the time wraps around 2^64 ns",
    RATIO_RANGE: "a message beyond the ratio table's last row: SimAI throws and cuts EndToEnd.csv before this row",
    PP_OVERLAP_ZERO: "-pp_o 0: SimAI's PP formula divides by the PP overlap ratio",
    PP_COMM_RANGE: "pp_comm does not fit SimAI's std::stoi: SimAI aborts",
}
FIX_TEXT = {
    ONE_GPU: "fixed: 0 us",
    NO_NIC: "fixed: the fractional NIC share",
    RATIO_RANGE: "fixed: the last row's efficiency",
    PP_OVERLAP_ZERO: "fixed: PP comm 0 us",
    PP_COMM_RANGE: "fixed: the header's value",
}
_PREFIXES = (("ALLREDUCE", ALLREDUCE), ("ALLTOALL", ALLTOALL), ("ALLGATHER", ALLGATHER),
             ("REDUCESCATTER", REDUCESCATTER))
_SUFFIX_GROUP = {"_EP": "EP", "_DP_EP": "DP_EP"}
_F32_EXACT = 1 << 24
_INT_MAX = (1 << 31) - 1


class SimaiBugError(CommsweepError):
    """A workload and network on which SimAI prints nonsense (``--simai-bugs error``)."""


def _int32(n: int) -> int:
    """C ``int`` arithmetic wraps (on x86, in practice) modulo 2^32."""
    return ((n + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


# -- inputs -------------------------------------------------------------------------------


def _params(network: Network) -> NetParams:
    return NetParams(network.gpus_per_server, network.nics_per_server, *network.bandwidths)


def _gpus(network: Network) -> int:
    """SimAI's ``-g``: a simulation's network gives it (a sweep's named network does not)."""
    if network.gpus is None:
        raise ConfigError("the simulation's network needs its GPU count (-g)", key="gpus")
    return network.gpus


def check_mode(simai_bugs: str) -> None:
    if simai_bugs not in BUG_MODES:
        raise ConfigError(f"must be one of {', '.join(BUG_MODES)}, got {simai_bugs!r}", key="simai_bugs")


# -- one collective -------------------------------------------------------------------------


def parse_comm_type(comm_type: str, phase: str) -> tuple[str | None, str]:
    """(collective, group) as SimAI reads a comm type in a phase (prefix match, exact suffix).

    No collective (None) for NONE, BROADCAST or any unknown name; group NONE for an
    unknown suffix (so ``ALLREDUCEALLTOALL`` is an all-reduce on no group).
    """
    for prefix, coll in _PREFIXES:
        if comm_type.startswith(prefix):
            rest = comm_type[len(prefix):]
            if rest == "":
                return coll, ("DP" if phase == "wg" else "TP")
            return coll, _SUFFIX_GROUP.get(rest, "NONE")
    return None, "NONE"


def scaled(value: int) -> int:
    """A size (bytes) or compute time (ns) as SimAI holds it: through its float32 scale factor 1.0."""
    return value if value < _F32_EXACT else u64(f32_of_int(value))


def effective_size(phase: str, size: int) -> int:
    """The bytes SimAI uses: ``scaled``, then forward 1..4095 -> 4096 (``format.effective_size``)."""
    return wformat.effective_size(phase, scaled(size))


class _Phase:
    """One (comm type, phase, size) of a workload, evaluated once and shared by its rows."""

    __slots__ = ("coll", "group", "nranks", "size", "ticks", "problems", "text", "exposed", "exposed_text", "_tidy")

    def __init__(self, coll, group, nranks, size, ticks, problems, text, exposed, exposed_text):
        self.coll: str | None = coll
        self.group: str = group
        self.nranks: int = nranks
        self.size: int = size
        self.ticks: int | None = ticks  # None: SimAI throws here (reproduce mode)
        self.problems: tuple[str, ...] = problems
        self.text: str = text  # "total comm,algbw,busbw" as printed
        self.exposed: tuple[int, int, int] = exposed  # under the TP, EP and DP overlap
        self.exposed_text: tuple[str, str, str] = exposed_text
        self._tidy: list[str | None] = [None, None, None]

    def tidy(self, phase: str, which: int) -> str:
        """The collectives.csv fields from ``phase`` on, with the exposure ``which`` (TP, EP, DP)."""
        text = self._tidy[which]
        if text is None:
            text = self._tidy[which] = (f"{phase},{self.coll},{self.group},{self.nranks},{self.size},"
                                        f"{ns_text(self.ticks)},{ns_text(self.exposed[which])}")
        return text


def _phase_ticks(coll: str | None, group: str, nranks: int, size: int, tp: int, ep: int,
                 net: NetParams, ratios: Ratios, fix: bool) -> tuple[int | None, tuple[str, ...]]:
    """SimAI's ``compute_time`` for one phase: (ticks, problems met)."""
    if coll is None:
        return 0, ()
    latency = small_message_ns(size, nranks)
    if latency is not None:
        return latency, ()
    args = group_arguments(group, nranks, tp, ep, net, fix_nics=fix)
    if args is None:
        return 0, ()
    nodes, gpn, nics, fractional = args
    bw = bus_bandwidth(coll, nodes, gpn, nics, net, integer_nics=not fractional)
    problems = (NO_NIC,) if fractional else ()
    if bw.problem:
        problems += (bw.problem,)
    case = ratio_case(coll, group, nranks, tp, net.gpus_per_server, bw.is_nvlink)
    try:
        ratio = efficiency(case, size, ratios)
    except RatioOutOfRange:
        problems += (RATIO_RANGE,)
        if not fix:
            return None, problems
        ratio = efficiency(case, size, ratios, clamp=True)
    if fix and bw.problem == ONE_GPU:
        return 0, problems
    return formula_ns(coll, size, nranks, ratio, bw.busbw), problems


def _nranks(phase: str, group: str, sizes: dict[str, int]) -> int:
    """The ranks SimAI times a collective on; ``sizes`` from ``format.group_sizes``."""
    if phase == "wg":
        return sizes["DP_EP" if group == "DP_EP" else "DP"]
    return sizes["EP" if group == "EP" else "TP"]


def collective_rows(workload: Workload, sizes: dict[str, int], rows, text_of, bytes_of=effective_size) -> list:
    """The per-collective table of a SimAI run's EndToEnd.csv rows (``collectives.CollectiveTime``):
    each workload collective with the row's times, one row per phase that communicates.

    Both SimAI backends (SimAI_analytical and SimAI_simulator) build it so; only how a time
    is read from a parsed row, ``text_of(row, field)`` (the time text of a field such as
    ``fwd_comm``), and the bytes a row's size stands for, ``bytes_of(phase, size)``: the
    analytical model's ``effective_size`` by default. ``sizes`` from ``format.group_sizes``."""
    from .collectives import CollectiveTime

    out = []
    for index, (row, times) in enumerate(zip(workload.rows, rows)):
        for phase in ("fwd", "ig", "wg"):
            comm_type, size = row.comm(phase)
            coll, group = parse_comm_type(comm_type, phase)
            if coll is None:
                continue
            out.append(CollectiveTime(
                row=index, layer=row.name, phase=phase, collective=coll, group=group,
                group_size=_nranks(phase, group, sizes), bytes=bytes_of(phase, size),
                time_us=text_of(times, f"{phase}_comm"), exposed_us=text_of(times, f"{phase}_exposed"),
            ))
    return out


def comm_time_ns(comm_type: str, phase: str, size: int, header: Header, network: Network,
                 ratios: Ratios | None = None, *, simai_bugs: str = "fix") -> int:
    """The time (ns, before overlap) SimAI gives one collective of a workload row.

    ``comm_type`` as written in the workload (``ALLREDUCE``, ``ALLGATHER_DP_EP``,
    ``NONE`` -> 0 ...), ``phase`` fwd / ig / wg, ``size`` the declared bytes (the forward
    bump to 4096 and the small-message latencies apply, as in SimAI). Group sizes come
    from ``header`` (TP, EP, PP) and ``network.gpus`` (DP = gpus / (tp * pp)).

    ``simai_bugs``: ``fix`` (default) returns the fixed time on SimAI's bug cases (see the
    module docstring), ``reproduce`` SimAI's own number (and raises :class:`SimaiBugError`
    where SimAI throws), ``error`` raises on every bug case.
    """
    check_mode(simai_bugs)
    if phase not in ("fwd", "ig", "wg"):
        raise ConfigError(f"must be fwd, ig or wg, got {phase!r}", key="phase")
    ratios = ratios if ratios is not None else Ratios()
    coll, group = parse_comm_type(comm_type, phase)
    nranks = _nranks(phase, group, wformat.group_sizes(header, _gpus(network)))
    ticks, problems = _phase_ticks(coll, group, nranks, effective_size(phase, size), header.tp, header.ep,
                                   _params(network), ratios, simai_bugs == "fix")
    if problems and simai_bugs == "error" or ticks is None:
        what = "; ".join(BUG_TEXT[p] for p in problems)
        raise SimaiBugError(f"{comm_type} ({phase}, {size} bytes, group of {nranks}): {what}")
    return ticks


# -- a whole workload ------------------------------------------------------------------------


@dataclass(frozen=True)
class BugHit:
    """One row (or the header) where SimAI's output would be nonsense."""

    kind: str
    row: int | None
    layer: str | None = None
    phase: str | None = None

    def where(self) -> str:
        if self.row is None:
            return "header"
        return f"row {self.row} ({self.layer} {self.phase})"


class Simulation:
    """The result of :func:`simulate`."""

    def __init__(self, endtoend: str, components: dict[str, float] | None, total_us: float | None,
                 bugs: list[BugHit], simai_bugs: str, ratios_source: str, truncated_at: int | None,
                 raw: list[tuple]) -> None:
        self.endtoend = endtoend  # the EndToEnd.csv text
        self.components = components  # endtoend.COMPONENTS -> us (unrounded); None if cut short
        self.total_us = total_us
        self.bugs = bugs
        self.simai_bugs = simai_bugs
        self.ratios_source = ratios_source
        self.truncated_at = truncated_at  # reproduce mode: the row where SimAI throws
        self._raw = raw

    @property
    def collectives(self) -> list:
        """The tidy per-collective table: ``collectives.CollectiveTime`` records."""
        from .collectives import CollectiveTime

        return [
            CollectiveTime(index, name, phase, ph.coll, ph.group, ph.nranks, ph.size, ns_text(ph.ticks),
                           ns_text(ph.exposed[which]))
            for index, name, phase, ph, which in self._raw
        ]

    def collectives_csv(self) -> str:
        """The tidy table as CSV text (same as ``collectives.to_csv(self.collectives)``, faster)."""
        out = [",".join(COLUMNS)]
        add = out.append
        quoted: dict[str, str] = {}
        for index, name, phase, ph, which in self._raw:
            q = quoted.get(name)
            if q is None:
                q = quoted[name] = csv_field(name)
            add(f"{index},{q},{ph._tidy[which] or ph.tidy(phase, which)}")
        return "\n".join(out) + "\n"

    def warnings(self) -> list[str]:
        """One line per bug kind met, naming every affected row and what was done."""
        out = []
        kinds: dict[str, list[BugHit]] = {}
        for hit in self.bugs:
            kinds.setdefault(hit.kind, []).append(hit)
        for kind, hits in kinds.items():
            done = {"fix": FIX_TEXT[kind], "reproduce": "reproduced as SimAI prints it", "error": "error"}[self.simai_bugs]
            rows = ", ".join(h.where() for h in hits)
            out.append(f"SimAI bug {kind!r}: {BUG_TEXT[kind]}; {done}: {len(hits)} place(s): {rows}")
        if self.truncated_at is not None:
            out.append(f"EndToEnd.csv cut before row {self.truncated_at} as SimAI leaves it"
                       + (" (EMPTY)" if self.truncated_at == 0 else ""))
        return out


def recompute_rows(header: Header, rows: int) -> range:
    """Rows whose forward compute SimAI runs twice (checkpoint c up to initiator i, excluded)."""
    if not header.checkpoint_initiates:
        return range(0)
    initiator = header.checkpoint_initiates[0]  # SimAI reads only the first listed
    if initiator >= rows:
        return range(0)
    checkpoint = header.checkpoints[0] if header.checkpoints else None
    if checkpoint is None or checkpoint >= initiator:
        raise InputError(
            f"checkpoint_initiates {initiator} needs a checkpoint layer before it "
            f"(checkpoints: {list(header.checkpoints)}); SimAI would run off its layer array",
            line=1, field="checkpoints",
        )
    return range(checkpoint, initiator)


def simulate(workload: Workload, network: Network, ratios: Ratios | None = None, *,
             prefix: str = "", simai_bugs: str = "fix") -> Simulation:
    """Simulate one iteration as SimAI_analytical does; see the module docstring.

    ``prefix`` is SimAI's ``-r`` (its part after the last ``/`` is the summary's file
    name). Raises :class:`SimaiBugError` in ``error`` mode when any bug case is met.
    """
    check_mode(simai_bugs)
    ratios = ratios if ratios is not None else Ratios()
    header = workload.header
    rows = workload.rows
    if not rows:
        raise InputError("the workload has no rows; SimAI aborts on it", line=2, field="row_count")
    table = _PhaseTable(header, network, ratios, simai_bugs == "fix")
    walk = _walk_rows(rows, table, recompute_rows(header, len(rows)))
    if walk.truncated_at is None:
        text, named, total = _summary(walk, header, network, prefix, simai_bugs)
    else:
        text = endtoend.render(prefix, walk.lines, None, None)
        named, total = None, None
    result = Simulation(text, named, total, walk.bugs, simai_bugs, ratios.source, walk.truncated_at, walk.raw)
    if simai_bugs == "error" and walk.bugs:
        raise SimaiBugError("SimAI would print nonsense for this workload and network:\n  "
                            + "\n  ".join(result.warnings()))
    return result


class _PhaseTable:
    """Each (comm type, phase, size) of a workload evaluated once, and tick counts as printed us.

    Rows share few distinct collectives, so ``phases`` keeps them (:meth:`add`); ``us`` caches the
    "%.0f" text of tick counts, which the row loop prints three times per row.
    """

    def __init__(self, header: Header, network: Network, ratios: Ratios, fix: bool):
        self.tp, self.ep = header.tp, header.ep
        self.sizes = wformat.group_sizes(header, _gpus(network))
        self.net = _params(network)
        self.keep = (network.keep("tp"), network.keep("ep"), network.keep("dp"))
        self.ratios = ratios
        self.fix = fix
        self.phases: dict[tuple[str, str, int], _Phase] = {}
        self.us_text: dict[int, str] = {}

    def us(self, ticks: int) -> str:
        """Ticks (ns) as SimAI prints microseconds, ``%.0f``."""
        text = self.us_text.get(ticks)
        if text is None:
            text = self.us_text[ticks] = f"{float(ticks) / 1000.0:.0f}"
        return text

    def add(self, key: tuple[str, str, int]) -> _Phase:
        """Evaluate the phase ``key`` (comm type, phase, size) and keep it in ``phases``."""
        phase = self.phases[key] = self.evaluate(*key)
        return phase

    def evaluate(self, comm_type: str, phase: str, size: int) -> _Phase:
        """One collective's time, bandwidths and exposed times, as printed."""
        coll, group = parse_comm_type(comm_type, phase)
        nranks = _nranks(phase, group, self.sizes)
        eff = effective_size(phase, size)
        ticks, problems = _phase_ticks(coll, group, nranks, eff, self.tp, self.ep, self.net, self.ratios, self.fix)
        if ticks is None:
            return _Phase(coll, group, nranks, eff, None, problems, "", (0, 0, 0), ("", "", ""))
        algbw, busbw = reported_bandwidths(coll, nranks, eff, ticks)
        if self.fix and ONE_GPU in problems:
            busbw = 0.0
        us = self.us
        text = f"{us(ticks)},{fixed(algbw, 2)},{fixed(busbw, 2)}"
        exp = tuple(_exposed(ticks, keep) for keep in self.keep)
        return _Phase(coll, group, nranks, eff, ticks, problems, text, exp, tuple(us(e) for e in exp))


def _exposed(ticks: int, keep: float) -> int:
    """``ticks`` after an overlap ratio, as SimAI rounds it (float32, truncated)."""
    if ticks == 0 or (keep == 1.0 and ticks < _F32_EXACT):
        return ticks
    return u64(f32(f32_of_int(ticks) * keep))


@dataclass
class _Walk:
    """What the row loop gathers: the per-row lines and sums the summary is made of."""

    lines: list[str]
    raw: list[tuple]
    bugs: list[BugHit]
    truncated_at: int | None
    # DP, DP_EP, TP and EP comm, compute, exposed comm, bubble before scaling (us)
    sums: tuple[float, ...] = ()


def _walk_rows(rows: list, table: _PhaseTable, rerun: range) -> _Walk:
    """Every row's EndToEnd.csv line and its share of the sums, in SimAI's order of additions.

    Stops at the first row whose collective SimAI throws on (``truncated_at``). The hot path:
    sums in locals, no call per row but on a new collective or a bug (a call costs ~10%).
    """
    dp_comm = dp_ep_comm = tp_comm = ep_comm = 0.0
    comp = total_exposed = bubble = 0.0
    walk = _Walk([], [], [], None)
    add_line, add_raw, us, us_get = walk.lines.append, walk.raw.append, table.us, table.us_text.get
    get_phase, add_phase = table.phases.get, table.add
    for index, row in enumerate(rows):
        key = (row.fwd_comm, "fwd", row.fwd_size)
        fwd = get_phase(key) or add_phase(key)
        key = (row.wg_comm, "wg", row.wg_size)
        wg = get_phase(key) or add_phase(key)
        key = (row.ig_comm, "ig", row.ig_size)
        ig = get_phase(key) or add_phase(key)
        if fwd.problems or wg.problems or ig.problems:
            if _note_problems(walk.bugs, index, row.name, fwd, wg, ig):
                walk.truncated_at = index
                break
        fc, wgc, igc = row.fwd_compute, row.wg_compute, row.ig_compute
        if fc >= _F32_EXACT or wgc >= _F32_EXACT or igc >= _F32_EXACT:
            fc, wgc, igc = scaled(fc), scaled(wgc), scaled(igc)
        if index in rerun:  # its forward compute runs twice
            fc = (2 * fc) & U64_MASK
        # Exposure: fwd and ig under the EP overlap when the row's FWD collective is on EP.
        on_ep = 1 if fwd.group == "EP" else 0
        fwd_exp = fwd.exposed[on_ep]
        ig_exp = ig.exposed[on_ep]
        wg_exp = wg.exposed[2]
        if wg.group == "DP_EP":
            dp_ep_comm += float(wg_exp) / 1000.0
        else:
            dp_comm += float(wg_exp) / 1000.0
        if on_ep:
            ep_comm += float((fwd_exp + ig_exp) & U64_MASK) / 1000.0
        else:
            tp_comm += float((fwd_exp + ig_exp) & U64_MASK) / 1000.0
        comp += float(fc) / 1000.0
        comp += float(wgc) / 1000.0
        comp += float(igc) / 1000.0
        total_exposed += float(fwd_exp) / 1000.0
        total_exposed += float(wg_exp) / 1000.0
        total_exposed += float(ig_exp) / 1000.0
        name = row.name
        if name != "embedding_layer":
            bubble += float((fwd.ticks + fc + wgc + igc + ig.ticks) & U64_MASK) / 1000.0
        add_line(f"{name},Analytical_test,{us_get(fc) or us(fc)},{us_get(wgc) or us(wgc)},{us_get(igc) or us(igc)},"
                 f"{fwd.exposed_text[on_ep]},{wg.exposed_text[2]},{ig.exposed_text[on_ep]},"
                 f"{fwd.text},{wg.text},{ig.text}")
        if fwd.coll:
            add_raw((index, name, "fwd", fwd, on_ep))
        if ig.coll:
            add_raw((index, name, "ig", ig, on_ep))
        if wg.coll:
            add_raw((index, name, "wg", wg, 2))
    walk.sums = (dp_comm, dp_ep_comm, tp_comm, ep_comm, comp, total_exposed, bubble)
    return walk


def _note_problems(bugs: list[BugHit], index: int, name: str, fwd: _Phase, wg: _Phase, ig: _Phase) -> bool:
    """Record a row's bug cases (in SimAI's fwd, ig, wg order); True when SimAI stops at this row."""
    for ph, phase in ((fwd, "fwd"), (ig, "ig"), (wg, "wg")):
        for problem in ph.problems:
            bugs.append(BugHit(problem, index, name, phase))
    return fwd.ticks is None or wg.ticks is None or ig.ticks is None


def _summary(walk: _Walk, header: Header, network: Network, prefix: str,
             simai_bugs: str) -> tuple[str, dict[str, float], float]:
    """EndToEnd.csv with its summary: the bubble scaled by the schedule, PP comm, the total."""
    dp_comm, dp_ep_comm, tp_comm, ep_comm, comp, total_exposed, bubble = walk.sums
    pp_ticks = _pp_ticks(header, network, walk.bugs, simai_bugs)
    bubble *= div(float(header.pp - 1), float(_int32(header.ga * header.vpp)))
    total = comp + total_exposed + bubble + float(pp_ticks)
    components = (dp_comm, dp_ep_comm, tp_comm, ep_comm, float(pp_ticks), bubble, comp, total_exposed)
    text = endtoend.render(prefix, walk.lines, components, total)
    return text, dict(zip(endtoend.COMPONENTS, components)), total


def _pp_ticks(header: Header, network: Network, bugs: list[BugHit], simai_bugs: str) -> int:
    """Exposed PP comm as SimAI computes it (``Layer::report``), in ticks."""
    if header.pp_comm > _INT_MAX:
        bugs.append(BugHit(PP_COMM_RANGE, None))
        if simai_bugs == "reproduce":
            raise SimaiBugError(f"pp_comm {header.pp_comm}: {BUG_TEXT[PP_COMM_RANGE]} (std::out_of_range)")
    pp_o = network.number("pp_overlap")
    if pp_o == 0:
        bugs.append(BugHit(PP_OVERLAP_ZERO, None))
        if simai_bugs == "fix":
            return 0
    inner = div(float(header.pp_comm) * 1.0 / GIB, pp_o) * 1e9
    ticks = u64(_int32(2 * header.vpp * header.ga) * inner / 1000.0)
    return u64(f32(f32_of_int(ticks) * network.keep("pp")))
