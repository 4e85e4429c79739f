"""What is known to hang, crash or silently mislead ``SimAI_simulator`` (SimAI cef83f9d), checked before a run.

Each case is refused (:class:`RefusedError`, naming the rows or keys) or transformed (the
run gets a private copy of the workload, and a warning names every row changed):

========================================================  =========================================================
case                                                      what happens in SimAI's NS-3 path / what we do
========================================================  =========================================================
a forward or input-gradient collective of 0 bytes        ``Sys::generate_collective`` makes a DataSet that never
(``REDUCESCATTER 0``, not NONE)                           completes (``ceil(0 / 0)`` streams) and the layer waits
                                                          on it: the run hangs or ends with an empty EndToEnd.csv
                                                          (SimAI #225, #264; fixed after 1.7 by skipping it).
                                                          Transformed: written ``NONE 0``, what SimAI's fix does.
                                                          Weight-gradient ones (AICB's ``ALLGATHER_DP_EP 0``) are
                                                          not waited on and finish in 0 us: left as they are.
``pp`` above 1                                            the NCCL mock's group setup hard-codes ``PP_size = 1``,
                                                          so DP groups are wrong and collectives never all finish:
                                                          the run never ends (SimAI #270). Refused.
activation recomputation (``checkpoints:`` non-empty)      its ``Forward_In_BackPass`` state has no flow model
                                                          (undefined behaviour; fixed after 1.7). Refused.
the workload's ``all_gpus`` is not the topology's GPUs    SimAI sizes its groups from the topology; the
                                                          workload's DP is silently another. Refused.
a topology GPU type other than A100/A800/H100/H800        read as ``NONE``: no NVLS (a warning); with NVLS asked
                                                          for (``nvls``) it could not take effect: refused.
NVLS on and a collective of 2 GiB or more                 the NVLS flow models keep chunk sizes in an ``int``:
                                                          they wrap. Refused, naming the rows.
========================================================  =========================================================

What a sweep point's setup alone shows (``pp`` above 1) is also refused when the sweep is
checked, before any job (``setup_refusals``, which ``commsweep sweep --check`` and the workflow
read), so such a point is named, or skipped with ``skip_invalid``, with the other invalid ones.

Failures that only show after a run (an empty or cut EndToEnd.csv, totals that do not add
up, a run that stops making progress) are the runner's (``runner``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ...base.errors import CommsweepError
from ...workload import format as wformat
from .conf import Settings
from .topology import NVLS_GPU_TYPES, TopologyFile

INT_MAX = 2**31 - 1


class RefusedError(CommsweepError):
    """A workload, topology or setting SimAI's NS-3 path is known to hang or crash on."""


@dataclass
class Prepared:
    """The workload to run (a changed copy where a case was transformed) and what was done."""

    workload: wformat.Workload
    changed: bool = False
    warnings: list[str] = field(default_factory=list)


def _rows(items: list[str], limit: int = 10) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def setup_refusals(pp: int) -> list[str]:
    """Why SimAI_simulator would hang on a setup of pipeline-parallel size ``pp``, known before
    its workload is made (empty when it would not): checked on a sweep's packet-level points
    before any job, and on every run's workload (``prepare``)."""
    if pp > 1:
        return [f"pp {pp}: SimAI's NS-3 path hard-codes PP_size = 1 in its NCCL mock, so DP groups are wrong and "
                "the run never ends (SimAI #270); packet-level runs need pp 1"]
    return []


def prepare(workload: wformat.Workload, topo: TopologyFile, settings: Settings, *,
            source: str = "<workload>") -> Prepared:
    """Check one run's inputs; return the workload to run (transformed where documented)."""
    header = workload.header
    refusals = setup_refusals(header.pp)
    if header.checkpoints:
        refusals.append(f"checkpoints {list(header.checkpoints)}: activation recomputation (Forward_In_BackPass) has "
                        "no flow model in SimAI 1.7's NS-3 path (undefined behaviour)")
    if header.all_gpus != topo.gpus:
        refusals.append(f"all_gpus {header.all_gpus} but the topology has {topo.gpus} GPUs: SimAI sizes every group "
                        "from the topology")
    if settings.nvls and topo.gpu_type not in NVLS_GPU_TYPES:
        refusals.append(f"nvls is on but the topology's GPU type {topo.gpu_type!r} is not one SimAI enables NVLS for "
                        f"({', '.join(NVLS_GPU_TYPES)})")
    if settings.nvls:
        big = [f"row {i + 1} ({row.name} {phase} {size} bytes)" for i, row in enumerate(workload.rows)
               for phase in wformat.PHASES for comm, size in [row.comm(phase)] if comm != "NONE" and size > INT_MAX]
        if big:
            refusals.append(f"nvls is on and {len(big)} collective(s) reach 2 GiB, past the int chunk size of SimAI's "
                            f"NVLS flow models: {_rows(big)}")
    if refusals:
        raise RefusedError(f"{source}: SimAI_simulator is known to fail on this: " + "; ".join(refusals))
    out = Prepared(workload)
    if not topo.known_gpu_type:
        out.warnings.append(f"the topology's GPU type {topo.gpu_type!r} is not one SimAI's NS-3 front end knows "
                            "(A100, A800, H100, H800): it runs as NONE (no NVLS)")
    zero = []
    rows = list(workload.rows)
    for i, row in enumerate(rows):
        changes = {}
        for phase in ("fwd", "ig"):
            comm, size = row.comm(phase)
            if comm != "NONE" and size == 0:
                changes[f"{phase}_comm"] = "NONE"
                zero.append(f"row {i + 1} ({row.name} {phase} {comm} 0)")
        if changes:
            rows[i] = replace(row, **changes)
    if zero:
        out.workload = wformat.with_rows(workload, rows)
        out.changed = True
        out.warnings.append(f"{len(zero)} collective(s) of 0 bytes run as NONE (SimAI 1.7's NS-3 path stops at them: it "
                            f"exits 0 with an empty EndToEnd.csv, or hangs; SimAI #225 #264): {_rows(zero)}")
    return out
