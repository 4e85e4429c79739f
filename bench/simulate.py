"""Simulation speed: the built-in engine against SimAI_analytical on the same workloads.

For SimAI's shipped example (``simai/examples/workload_analytical.txt``) and the largest
AICB reference workload, prints the engine's time in-process (``simulate()`` plus the
tidy table, on a parsed workload; and with parsing) and as a whole ``commsweep simulate``
process, next to SimAI's wall time recorded in ``simai/endtoend/INDEX.csv`` (and SimAI's
live time when ``SIMAI_ROOT`` points to a built SimAI), as ratios. Every engine output is
checked byte for byte against SimAI's recorded EndToEnd.csv first.

Targets: >= 1000x in-process, >= 100x per process. Run with
``.venv/bin/python bench/simulate.py`` (or ``make bench``).

The process timing lets Python cache bytecode as a normal install does (this project's
sandbox sets PYTHONDONTWRITEBYTECODE, which makes every start recompile the sources).
"""

from __future__ import annotations

import csv
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference"))
ENDTOEND = REFERENCE / "simai" / "endtoend"
RATIO_DIR = REFERENCE / "simai" / "ratio"
COMMSWEEP = Path(sys.executable).with_name("commsweep")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def best_cpu(argv: list[str], env: dict, repeat: int) -> float:
    """The least CPU time (user + system) a child process took: steadier than wall time
    on a machine shared with other work."""
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, check=True, env=env, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(times)


def runs() -> list[dict]:
    with open(ENDTOEND / "INDEX.csv", newline="", encoding="utf-8") as fh:
        out = []
        for row in csv.DictReader(fh):
            argv = shlex.split(row["command"].split("&&", 1)[1])[1:]
            row["flags"] = dict(zip(argv[::2], argv[1::2]))
            out.append(row)
        return out


def pick(index: list[dict]) -> list[dict]:
    example = next(r for r in index if r["workload_file"].endswith("workload_analytical.txt"))
    aicb = [r for r in index if r["workload_file"].startswith("aicb/") and r["net"] == "A" and not r["notes"]]
    largest = max(aicb, key=lambda r: ((REFERENCE / r["workload_file"]).stat().st_size, float(r["wall_s"])))
    return [example, largest]


def bench(run: dict) -> None:
    from commsweep.simulate.engine import Network, load_ratios, simulate
    from commsweep.workload import format as wf

    f = run["flags"]
    path = REFERENCE / run["workload_file"]
    network = Network(int(f["-g"]), int(f["-g_p_s"]), int(f["-n_p_s"]), f["-nv"], f["-nic"])
    ratios = load_ratios(RATIO_DIR)
    workload = wf.read(path)
    result = simulate(workload, network, ratios, prefix=f["-r"])
    identical = result.endtoend == (ENDTOEND / Path(run["endtoend_csv"]).name).read_text()

    engine = best(lambda: simulate(workload, network, ratios, prefix=f["-r"]).collectives_csv(), 30)
    with_parse = best(lambda: simulate(wf.read(path), network, ratios, prefix=f["-r"]).collectives_csv(), 15)

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(COMMSWEEP), "simulate", "-w", str(path)]
        for flag in ("-g", "-g_p_s", "-n_p_s", "-nv", "-nic", "-r"):
            argv += [flag, f[flag]]
        argv += ["--ratio-dir", str(RATIO_DIR), "--out-dir", tmp]
        subprocess.run(argv, check=True, env=env, capture_output=True)  # warm-up: bytecode caches
        process = best(lambda: subprocess.run(argv, check=True, env=env, capture_output=True), 10)
        process_cpu = best_cpu(argv, env, 10)
        identical &= (Path(tmp) / f"{f['-r']}EndToEnd.csv").read_text() == result.endtoend

    simai_s = float(run["wall_s"])
    print(f"{path.name} ({len(workload.rows)} rows, net {run['net']}): output identical to SimAI's: "
          f"{'yes' if identical else 'NO'}")
    print(f"  SimAI_analytical, recorded:        {simai_s:8.2f} s")
    live = live_simai(path, network, f["-r"])
    if live is not None:
        print(f"  SimAI_analytical, live:            {live:8.2f} s")
    for label, seconds, target in (("engine in-process (simulate):", engine, 1000),
                                   ("engine in-process (parse+sim):", with_parse, None),
                                   ("commsweep simulate (process):", process, 100),
                                   ("  same, CPU time:", process_cpu, 100)):
        ratio = simai_s / seconds
        line = f"  {label:34s} {seconds * 1000:8.2f} ms  = {ratio:8.0f}x faster than recorded SimAI"
        if live is not None:
            line += f", {live / seconds:8.0f}x than live"
        if target and run["workload_file"].endswith("workload_analytical.txt"):
            line += f"  (target >= {target}x: {'met' if ratio >= target else 'NOT met'})"
        print(line)


def live_simai(path: Path, network, prefix: str) -> float | None:
    root = os.environ.get("SIMAI_ROOT")
    if not root:
        return None
    from commsweep.simulate import simai

    return simai.run(Path(root), path, network, prefix=prefix, ratio_dir=RATIO_DIR).wall_s


def main() -> None:
    if not (ENDTOEND / "INDEX.csv").exists():
        print(f"SimAI reference runs not found under {ENDTOEND}: nothing to compare with")
        return
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (times are best of several runs)")
    for run in pick(runs()):
        bench(run)


if __name__ == "__main__":
    main()
