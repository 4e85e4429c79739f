"""What a point's simulations and volumes say, as the difference by cause reads them.

A finding's time is what its own collectives took in the two simulations (the AICB
point's and its Megatron point's): ``Simulated`` holds each collective's exposed time of
one simulation, analytical or packet-level, and the exposed total the causes add up to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...base import paths
from ...base.errors import InputError
from ...simulate import engine
from ...simulate import times as sim_times
from ...workload import format as wf


@dataclass
class Simulated:
    """What one point's simulation says, in whole ns: per collective, and in all.

    A collective's time depends only on its phase, type, group and size (within one
    point), so one lookup serves every row: ``by_collective[(phase, collective, group,
    bytes)]`` with the bytes SimAI times it with (``engine.effective_size``)."""

    by_collective: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    exposed: int = 0  # all collectives' exposed time, plus the exposed pipeline time
    pipeline: int = 0  # the exposed pipeline time
    # The bytes its simulator times a declared size with (phase, size -> bytes): the
    # analytical model's, or SimAI_simulator's for a packet-level point.
    sizing: Callable[[str, int], int] = engine.effective_size

    def exposed_of(self, phase: str, collective: str, group: str, size: int) -> int | None:
        return self.by_collective.get((phase, collective, group, self.sizing(phase, size)))


def read_simulated(files: paths.PointFiles, point: str, *, packet: bool = False) -> Simulated | None:
    """A point's collectives.csv and times.csv, or None when it has no (complete) simulation.
    ``packet``: a packet-level point's, whose collectives.csv holds the bytes SimAI_simulator
    moves (the forward bump to 4096 alone, not the analytical model's float32 scaling)."""
    from ...base.status import is_marker
    from ...simulate.collectives import read_exposed

    coll_path, times_path = files.collectives(point), files.times(point)
    if coll_path is None or times_path is None:
        return None
    if not coll_path.exists() or not times_path.exists() or is_marker(coll_path) or is_marker(times_path):
        return None
    times = sim_times.read(times_path)
    if ("exposed_us", "PP") not in times.iteration:
        return None  # SimAI's summary line is missing: the simulation was cut short
    sim = Simulated(sizing=wf.effective_size) if packet else Simulated()
    sim.pipeline = sim_times.ns(times.iteration[("exposed_us", "PP")])
    sim.exposed = sum(sim_times.ns(exposed) for _, exposed in times.collective.values()) + sim.pipeline
    # Thousands of rows repeat a few dozen collectives: parse each distinct one once.
    for key, exposed in read_exposed(coll_path).items():
        try:
            sim.by_collective[key] = sim_times.ns(exposed)
        except ValueError:
            raise InputError(f"expected a time in us, got {exposed!r}", file=coll_path) from None
    return sim


def payload_bytes(files: paths.PointFiles, workload: str) -> int:
    """A workload's payload bytes per iteration, all phases (its volumes.csv)."""
    from .. import volumes

    path = files.volumes(workload)
    if path is None:
        raise InputError(f"no volumes file given for workload {workload}")
    return sum(v.payload_bytes for v in volumes.read(path))
