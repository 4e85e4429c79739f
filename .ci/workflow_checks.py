#!/usr/bin/env python3
"""CI's checks of the workflow itself, in seconds, before the test suite:

* `snakemake --lint`: every lint left must be one that docs/workflow.md explains (the
  "Lints left" list, one line each);
* a dry run of every shipped sweep (config/*.yaml) and every test sweep
  (tests/sweeps/*.yaml), each in its own temporary folder with the inputs it names (AIOB
  files placed, $REFERENCE filled in; a sweep that needs the reference folder is skipped,
  and said to be, without it). A bad-* test sweep must fail before any job instead.

    .venv/bin/python .ci/workflow_checks.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import sweeps  # noqa: E402  (tests/sweeps.py: the test sweeps and how to run them)

DOC = REPO / "docs" / "workflow.md"


def documented_lints() -> set[str]:
    """The lint titles docs/workflow.md explains: lines `- LINT: why` under "Lints left"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Lints left", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^- `([^`]+)`:", section, re.MULTILINE)}


def lint() -> list[str]:
    result = subprocess.run([str(sweeps.SNAKEMAKE), "--lint"], cwd=REPO, capture_output=True, text=True,
                            env=sweeps.env())
    found = set(re.findall(r"^    \* (.+?):$", result.stdout + result.stderr, re.MULTILINE))
    unexplained = sorted(found - documented_lints())
    return [f"snakemake --lint: not explained in {DOC.relative_to(REPO)}: {title}" for title in unexplained]


def dry_run(config_text: str, name: str, must_fail: bool, prepare: bool) -> str | None:
    with tempfile.TemporaryDirectory(prefix="commsweep-dry-") as tmp:
        workdir = Path(tmp)
        config = workdir / "sweep.yaml"
        config.write_text(config_text)
        if prepare and "backend: file" in config_text:
            sweeps.place_aiob_files(workdir, config)
        result = sweeps.run(workdir, "--configfile", str(config), "--dry-run", "--quiet", check=False)
        made = (workdir / "results").exists()
    if must_fail:
        if result.returncode == 0 or made:
            return f"{name}: expected to fail before any job, but the dry run passed"
        return None
    if result.returncode != 0:
        return f"{name}: dry run failed:\n{result.stdout[-1500:]}{result.stderr[-1500:]}"
    return None


def needs_simai_simulator(config_text: str) -> bool:
    """A sweep with packet-level points (sweep.simulation: packet) cannot be planned without a
    SimAI_simulator (simulator.ns3.root or $SIMAI_ROOT): the config check refuses it by design."""
    import yaml

    config = yaml.safe_load(config_text) or {}
    wanted = (config.get("sweep") or {}).get("simulation") or []
    root = ((config.get("simulator") or {}).get("ns3") or {}).get("root")
    return "packet" in wanted and not root and not os.environ.get("SIMAI_ROOT")


def astra_stand_in(config_text: str, folder: Path) -> dict[str, str]:
    """A sweep whose ASTRA-sim root reads $ASTRA_SIM_ROOT (config/astra-sim.yaml) is planned with
    the variable at a stand-in executable where it is unset: a dry run checksums the binary and
    never runs it. The environment to set (empty: none needed)."""
    import yaml

    config = yaml.safe_load(config_text) or {}
    root = str(((config.get("simulator") or {}).get("astra") or {}).get("root") or "")
    if "ASTRA_SIM_ROOT" not in root or os.environ.get("ASTRA_SIM_ROOT"):
        return {}
    stand_in = folder / "AstraSim_Analytical_Congestion_Unaware"
    stand_in.write_text("#!/bin/sh\nexit 1\n")
    stand_in.chmod(0o755)
    return {"ASTRA_SIM_ROOT": str(stand_in)}


def main() -> int:
    problems = lint()
    print(f"snakemake --lint: {'ok' if not problems else 'FAILED'}", flush=True)
    for path in sorted((REPO / "config").glob("*.yaml")):
        if needs_simai_simulator(path.read_text()):
            print(f"dry run config/{path.name}: skipped (packet-level points need SimAI_simulator: set SIMAI_ROOT)")
            continue
        with tempfile.TemporaryDirectory(prefix="commsweep-astra-") as tmp:
            stand_in = astra_stand_in(path.read_text(), Path(tmp))
            os.environ.update(stand_in)
            try:
                problem = dry_run(path.read_text(), f"config/{path.name}", must_fail=False, prepare=False)
            finally:
                for key in stand_in:
                    os.environ.pop(key)
        note = " (ASTRA-sim: a stand-in, never run; set ASTRA_SIM_ROOT to plan with yours)" if stand_in else ""
        print(f"dry run config/{path.name}: {'ok' if not problem else 'FAILED'}{note}", flush=True)
        problems += [problem] if problem else []
    for name in sweeps.names():
        if sweeps.needs_reference(name) and not sweeps.REFERENCE.exists():
            print(f"dry run tests/sweeps/{name}.yaml: skipped (needs the reference folder {sweeps.REFERENCE})")
            continue
        sweeps.covers(name)  # each starts with the line on what it covers
        problem = dry_run(sweeps.text(name), f"tests/sweeps/{name}.yaml", must_fail=name.startswith("bad-"),
                          prepare=True)
        print(f"dry run tests/sweeps/{name}.yaml: {'ok' if not problem else 'FAILED'}", flush=True)
        problems += [problem] if problem else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
