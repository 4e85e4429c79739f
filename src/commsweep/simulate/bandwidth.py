"""How SimAI's analytical model times one collective: groups, bandwidth, efficiency, formula.

All facts from SimAI 1.7 (aliyun/SimAI @ cef83f9d, under ``astra-sim-alibabacloud/astra-sim/``:
``workload/Layer.cc`` ``compute_time``/``cal_ratio``, ``system/calbusbw.cc``).

**Small messages.** A message of 1 < S < 1 MiB costs a fixed latency by group size n
(2: 10 us, 4: 12, 8: 15, 16: 66, 32: 135, 64: 200, 128: 320, any other n: 0), tested
before the group is resolved.

**Formula.** Otherwise ``t_ns = trunc(S / 2^30 / float32(ratio * busbw) * 1e9 * f)`` in
double, evaluated left to right, with f = 2(n-1)/n for all-reduce and (n-1)/n for the
others; the conversion to SimAI's ``uint64_t`` ticks keeps its x86 behaviour on NaN and
negatives (:func:`cfloat.u64`).

**Bus bandwidth** (``cal_busbw``, all in float32) from a node count N, GPUs per node G and
a NIC count k, with cap = nic * k: N = 1: nvlink; G = 1: cap; otherwise, if cap > nvlink,
min(nvlink * G/(G-1), cap), else cap. All-to-all across nodes: cap / G * (N*G-1) /
((N-1)*G). N * G = 1 gives 0 ("requires two GPUs"); k < 1 gives -1 (SimAI bugs).

**Arguments per group** (integer divisions floor):

* TP (size t): t <= g_p_s: N = 1, G = t, k = n_p_s; else N = t / g_p_s, G = g_p_s.
* DP (n > 1): always multi-node, N = n; t <= g_p_s: G = g_p_s / t, k = n_p_s / t;
  else G = 1, k = n_p_s / g_p_s.
* EP (n > 1): t*n <= g_p_s: N = 1, G = g_p_s / t, k = n_p_s; else N = t*n / g_p_s,
  G = max(g_p_s / t, 1), k = n_p_s / t (n_p_s / g_p_s when t > g_p_s).
* DP_EP (n > 1): t*ep <= g_p_s: N = n, G = g_p_s / (t*ep), k = n_p_s / (t*ep); else
  N = n, G = 1, k = n_p_s / g_p_s.
* Anything else (a group of 1 on DP/EP/DP_EP, an unknown suffix): no time.

**Efficiency ratio** (``cal_ratio``): TP all-gather/reduce-scatter: the nic table (nvlink
when the bandwidth step found NVLink to be the bottleneck), nodes = 1 if t < g_p_s else
t / g_p_s; TP all-to-all: the ata table, nodes = 1 if t <= g_p_s else t / g_p_s; EP
all-to-all: the ata table, nodes = 1 if t*n <= g_p_s, the "Multi 16" column if
t >= g_p_s, else t*n / g_p_s. Everything else: 1.
"""

from __future__ import annotations

from ..base.cfloat import div, f32, u64
from .ratio import MULTI_COLUMN_NODES, Ratios

SMALL_MESSAGE_MAX = 1048576  # exclusive upper bound of the fixed-latency range
SMALL_MESSAGE_LATENCY_NS = {2: 10000, 4: 12000, 8: 15000, 16: 66000, 32: 135000, 64: 200000, 128: 320000}
GIB = 1073741824

ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL = "allreduce", "allgather", "reducescatter", "alltoall"
# Problems SimAI's bandwidth step runs into (see engine.BUGS for what is done about them).
ONE_GPU = "one-gpu-group"
NO_NIC = "zero-nics"


# Plain classes rather than dataclasses: the per-point command imports this module, and
# a dataclass compiles code at import time.
class NetParams:
    """The network as SimAI holds it: integers, and float32 bandwidths in GB/s."""

    __slots__ = ("gpus_per_server", "nics_per_server", "nvlink", "nic")

    def __init__(self, gpus_per_server: int, nics_per_server: int, nvlink: float, nic: float) -> None:
        self.gpus_per_server = gpus_per_server
        self.nics_per_server = nics_per_server
        self.nvlink = nvlink  # float32
        self.nic = nic  # float32


class BusBw:
    """What SimAI's ``cal_busbw`` returns, with the arguments it was given."""

    __slots__ = ("busbw", "is_nvlink", "problem", "nodes", "gpus_per_node", "nics")

    def __init__(self, busbw: float, is_nvlink: bool, problem: str | None = None, nodes: int = 0,
                 gpus_per_node: int = 0, nics: float = 0.0) -> None:
        self.busbw = busbw  # float32 GB/s; 0 or -1 when SimAI's bandwidth step fails
        self.is_nvlink = is_nvlink  # NVLink found to be the bottleneck (selects the nvlink ratio table)
        self.problem = problem  # ONE_GPU or NO_NIC
        self.nodes = nodes
        self.gpus_per_node = gpus_per_node
        self.nics = nics


def bus_bandwidth(coll: str, nodes: int, gpus_per_node: int, nics: float, net: NetParams,
                  *, integer_nics: bool = True) -> BusBw:
    """SimAI's ``cal_busbw`` (ring algorithm) for one collective type, in float32.

    ``integer_nics=False`` lets a fractional NIC share through (the ``fix`` of the
    zero-NIC bug); SimAI itself truncates the count and fails below 1.
    """
    if gpus_per_node * nodes == 1 or nodes < 1:
        return BusBw(0.0, False, ONE_GPU, nodes, gpus_per_node, nics)
    nvlink, nic = net.nvlink, net.nic
    if nvlink <= 0 or nic <= 0 or gpus_per_node < 1 or (int(nics) < 1 if integer_nics else nics <= 0):
        return BusBw(-1.0, False, NO_NIC, nodes, gpus_per_node, nics)
    cap = f32(nic * nics)
    is_nvlink = False
    if nodes == 1:
        bw = nvlink
    elif gpus_per_node == 1:
        bw = cap
    elif cap > nvlink:  # SimAI's "cross_nic" case
        scaled = f32(f32(nvlink * gpus_per_node) / (gpus_per_node - 1))
        if scaled < cap:
            bw, is_nvlink = scaled, True
        else:
            bw = cap
    else:
        bw = cap
    if coll == ALLTOALL:
        if nodes == 1:
            return BusBw(nvlink, True, None, nodes, gpus_per_node, nics)
        ranks = nodes * gpus_per_node
        bw = f32(f32(f32(cap / gpus_per_node) * (ranks - 1)) / ((nodes - 1) * gpus_per_node))
    return BusBw(bw, is_nvlink, None, nodes, gpus_per_node, nics)


def group_arguments(group: str, nranks: int, tp: int, ep: int, net: NetParams,
                    *, fix_nics: bool = False) -> tuple[int, int, float, bool] | None:
    """(nodes, GPUs per node, NIC count, NIC count is fractional) SimAI passes to ``cal_busbw``.

    None when SimAI gives the collective no time (groups of 1 outside TP, unknown groups).
    With ``fix_nics`` a NIC count that floors to 0 is kept as the exact share instead.
    """
    gps, nps = net.gpus_per_server, net.nics_per_server

    def share(divisor: int) -> tuple[float, bool]:
        k = nps // divisor
        if k == 0 and fix_nics:
            return f32(nps / divisor), True
        return float(k), False

    if group == "TP":
        if tp <= gps:
            return 1, tp, float(nps), False
        return tp // gps, gps, float(nps), False
    if nranks <= 1:
        return None
    if group == "EP":
        if tp * nranks <= gps:
            return 1, gps // tp, float(nps), False
        gpn = gps // tp if gps // tp > 1 else 1
        k, frac = share(gps if tp > gps else tp)
        return (tp * nranks) // gps, gpn, k, frac
    if group == "DP":
        if tp <= gps:
            k, frac = share(tp)
            return nranks, gps // tp, k, frac
        k, frac = share(gps)
        return nranks, 1, k, frac
    if group == "DP_EP":
        if tp * ep <= gps:
            k, frac = share(tp * ep)
            return nranks, gps // (tp * ep), k, frac
        k, frac = share(gps)
        return nranks, 1, k, frac
    return None


def ratio_case(coll: str, group: str, nranks: int, tp: int, gps: int, is_nvlink: bool) -> tuple[str, int] | None:
    """(table, node count) SimAI looks the efficiency up in, or None for ratio 1."""
    if group == "TP":
        if coll in (ALLGATHER, REDUCESCATTER):
            return ("nvlink" if is_nvlink else "nic"), (1 if tp < gps else tp // gps)
        if coll == ALLTOALL:
            return "ata", (1 if tp <= gps else tp // gps)
    elif group == "EP" and coll == ALLTOALL:
        if tp * nranks <= gps:
            return "ata", 1
        if tp >= gps:
            return "ata", MULTI_COLUMN_NODES
        return "ata", (tp * nranks) // gps
    return None


def efficiency(case: tuple[str, int] | None, size: int, ratios: Ratios, *, clamp: bool = False) -> float:
    """The float32 efficiency of a collective (1.0 without a case or without tables).

    Raises ``ratio.RatioOutOfRange`` beyond the table unless ``clamp``.
    """
    if case is None:
        return 1.0
    table = ratios.table(case[0])
    if table is None:
        return 1.0
    return table.clamped_value(size, case[1]) if clamp else table.value(size, case[1])


def formula_ns(coll: str, size: int, nranks: int, ratio: float, busbw: float) -> int:
    """``compute_time``'s formula, evaluated in SimAI's order and types, as uint64 ticks."""
    x = div(size * 1.0 / GIB, f32(ratio * busbw)) * 1e9
    if coll == ALLREDUCE:
        x = x * 2
    return u64(div(x * (nranks - 1), nranks / 1.0))


def small_message_ns(size: int, nranks: int) -> int | None:
    """The fixed latency of a message of 1 < S < 1 MiB, or None when the formula applies."""
    if 1 < size < SMALL_MESSAGE_MAX:
        return SMALL_MESSAGE_LATENCY_NS.get(nranks, 0)
    return None


def reported_bandwidths(coll: str | None, nranks: int, size: int, ticks: int) -> tuple[float, float]:
    """(algbw, busbw) as SimAI prints them (``compute_busbw``): float32 GiB/s.

    algbw = bytes / (ticks / 1000) * 1e6 / 2^30; busbw = algbw * 2(n-1)/n for all-reduce,
    * (n-1)/n for the other collectives, exactly 0 for no collective. 0 ticks gives inf,
    0 bytes NaN, and a group of 1 inf * 0 = NaN, as in SimAI.
    """
    algbw = f32(div(float(size), float(ticks) / 1000.0) * 1000000 * 1.0 / GIB)
    if coll == ALLREDUCE:
        busbw = f32(div(f32(f32(algbw * 2) * (nranks - 1)), nranks / 1.0))
    elif coll:
        busbw = f32(div(f32(algbw * (nranks - 1)), nranks / 1.0))
    else:
        busbw = 0.0
    return algbw, busbw
