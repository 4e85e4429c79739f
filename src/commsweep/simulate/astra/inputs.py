"""ASTRA-sim's three input files besides the traces: network (YAML), system and remote memory (JSON).

The network is the sweep's (``setup.network.Network``) in two dimensions, as ASTRA-sim's
analytical backends read them (astra-sim/astra-network-analytical's ``NetworkParser``): the
GPUs of a server over NVLink, then the servers over their NICs. Units are ASTRA-sim's: a
bandwidth in GB/s means 2^30 bytes per second (SimAI's -nv and -nic mean the same, so they are
written unchanged), a latency in nanoseconds. Dimension 2's bandwidth is one GPU's share of its
server's NICs, nics_per_server * nic / gpus_per_server, the share SimAI's model gives it.

SimAI's analytical model has no per-message latency; ASTRA-sim charges one per message and
dimension. The defaults (``DEFAULT_LATENCY_NS``) are ASTRA-sim's own validated HGX-H100 NVLink
figure and a NIC hop of 2 us; ``Settings`` sets them, the topology of each dimension, and any
key of the system file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...base.errors import ConfigError
from ...setup.network import Network

TOPOLOGIES = ("Switch", "FullyConnected", "Ring")
# NVLink: ASTRA-sim's examples/network/analytical/HGX-H100-validated.yml; NIC: one switch hop.
DEFAULT_LATENCY_NS = (936.25, 2000.0)
DEFAULT_TOPOLOGY = ("Switch", "Switch")
# The system file (astra-sim/system/Sys.cc's keys): ring collectives on both dimensions, the
# scheduling of ASTRA-sim's validated HGX-H100 example, H100's 3350 GB/s of HBM for local
# reductions. Compute nodes are replayed from their durations (no roofline).
DEFAULT_SYSTEM = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring", "ring"],
    "all-gather-implementation": ["ring", "ring"],
    "reduce-scatter-implementation": ["ring", "ring"],
    "all-to-all-implementation": ["ring", "ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 3350,
    "boost-mode": 0,
}
MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


@dataclass(frozen=True)
class Settings:
    """What a run of ASTRA-sim takes beside the network: latencies, topologies, system keys."""

    latency_ns: tuple[float, float] = DEFAULT_LATENCY_NS
    topology: tuple[str, str] = DEFAULT_TOPOLOGY
    system: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, value in enumerate(self.latency_ns):
            if not value >= 0:
                raise ConfigError(f"a latency must be a number of ns >= 0, got {value!r}", key=f"astra.latency_ns[{i}]")
        delay = self.system.get("endpoint-delay", 1)
        if not isinstance(delay, (int, float)) or delay < 1:
            # ASTRA-sim's analytical event queue asserts that no event falls on the current tick.
            raise ConfigError(f"must be at least 1 ns (ASTRA-sim aborts at 0), got {delay!r}",
                              key="astra.system.endpoint-delay")
        for i, topo in enumerate(self.topology):
            if topo not in TOPOLOGIES:
                raise ConfigError(f"unknown topology {topo!r}; expected one of {', '.join(TOPOLOGIES)}",
                                  key=f"astra.topology[{i}]")


def dimensions(net: Network, gpus: int) -> list[tuple[int, float]]:
    """(NPUs, GB/s per NPU) of each dimension; one dimension when the job fits one server."""
    g = net.gpus_per_server
    if gpus <= g:
        return [(gpus, net.number("nvlink_gbps"))]
    if gpus % g:
        raise ConfigError(f"{gpus} GPUs do not fill whole servers of {g}", key="gpus_per_server")
    nic = net.number("nic_gbps") * net.nics_per_server / g
    return [(g, net.number("nvlink_gbps")), (gpus // g, nic)]


def network_yaml(net: Network, gpus: int, settings: Settings = Settings()) -> str:
    """The network file (YAML lists, one entry per dimension)."""
    dims = dimensions(net, gpus)
    n = len(dims)

    def listed(values) -> str:
        return "[ " + ", ".join(str(v) for v in values) + " ]"

    return "\n".join([
        f"topology: {listed(settings.topology[:n])}",
        f"npus_count: {listed(d[0] for d in dims)}",
        f"bandwidth: {listed(repr(float(d[1])) for d in dims)}  # GB/s (2^30 B/s)",
        f"latency: {listed(repr(float(x)) for x in settings.latency_ns[:n])}  # ns",
    ]) + "\n"


def system_json(settings: Settings = Settings(), dims: int = 2) -> str:
    """The system file: the defaults, the settings' keys over them, one implementation per dimension."""
    system = {**DEFAULT_SYSTEM, **settings.system}
    for key in [k for k in system if k.endswith("-implementation")]:
        if key not in settings.system:
            system[key] = system[key][:dims]
    return json.dumps(system, indent=2) + "\n"


def memory_json() -> str:
    return json.dumps(MEMORY, indent=2) + "\n"
