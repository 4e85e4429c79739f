"""SimAI's reference runs (../shared/reference/simai/endtoend/INDEX.csv) as test parameters."""

from __future__ import annotations

import csv
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REFERENCE

ENDTOEND = REFERENCE / "simai" / "endtoend"
RATIO_DIR = REFERENCE / "simai" / "ratio"


@dataclass(frozen=True)
class Run:
    """One SimAI_analytical run: its workload, flags, outputs and the index's note."""

    workload: Path
    flags: dict[str, str]
    endtoend: Path
    log: Path
    stderr: Path
    collectives: Path
    notes: str
    wall_s: float

    @property
    def prefix(self) -> str:
        return self.flags["-r"]

    @property
    def name(self) -> str:
        return self.log.stem

    def network(self, **overlap):
        from commsweep.setup.network import Network

        f = self.flags
        return Network(gpus=int(f["-g"]), gpus_per_server=int(f["-g_p_s"]), nics_per_server=int(f["-n_p_s"]),
                       nvlink_gbps=f["-nv"], nic_gbps=f["-nic"], **overlap)

    def simulate_argv(self, *extra: str) -> list[str]:
        """``commsweep simulate`` on this run's workload with its SimAI flags (-g ... -r), then ``extra``."""
        argv = ["simulate", "-w", str(self.workload)]
        for flag in ("-g", "-g_p_s", "-n_p_s", "-nv", "-nic", "-r"):
            argv += [flag, self.flags[flag]]
        return argv + list(extra)


def load_runs() -> list[Run]:
    index = ENDTOEND / "INDEX.csv"
    if not index.exists():
        return []
    runs = []
    with open(index, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            argv = shlex.split(row["command"].split("&&", 1)[1])[1:]
            flags = dict(zip(argv[::2], argv[1::2]))
            log = ENDTOEND / row["log"]
            runs.append(Run(
                workload=REFERENCE / row["workload_file"], flags=flags,
                endtoend=ENDTOEND / Path(row["endtoend_csv"]).name, log=log,
                stderr=log.with_suffix(".stderr"), collectives=ENDTOEND / row["collectives_csv"],
                notes=row["notes"], wall_s=float(row["wall_s"]),
            ))
    return runs


def params(which: str = "all") -> list:
    """Runs as pytest params: 'clean' (no note), 'noted' (a SimAI bug), or 'all'."""
    runs = load_runs()
    if which == "clean":
        runs = [r for r in runs if not r.notes]
    elif which == "noted":
        runs = [r for r in runs if r.notes]
    if not runs:
        reason = f"SimAI reference runs not found at {ENDTOEND} (set COMMSWEEP_REFERENCE to its folder)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-reference")]
    return [pytest.param(r, id=f"{r.name}") for r in runs]
