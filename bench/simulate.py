"""Simulation speed: SimAI_analytical, the built-in engine and a whole `commsweep simulate`, per workload.

For every workload, after checking that the engine, a `commsweep simulate` process and each
SimAI build write the same EndToEnd.csv byte for byte (and the one SimAI recorded, where the
reference holds it), prints

* SimAI_analytical's wall time, for each SimAI build given, with how that build was compiled;
* the engine in-process (``simulate()`` and the tidy table, on a parsed workload);
* a whole ``commsweep simulate`` process (Python's start, imports, parsing, the two files);

each as the minimum and the median of several runs, and their ratios. Which ratio matters
depends on the use: one simulation from the command line pays the process; a sweep pays it
once per point; a program that imports the engine pays the in-process time.

SimAI's speed depends on how it was built: SimAI's own build script sets no CMake build type,
so its binary is unoptimised (-O0); a Release build writes the same bytes many times faster.
Every SimAI figure is labelled with its build, read from the build's CMake files (the
``CMakeCache.txt`` above the binary and the compiler flags CMake recorded); where there are
none (a copied binary), ``--simai-build LABEL`` must say it: the bench never guesses.

    .venv/bin/python bench/simulate.py                      # the engine against SimAI's recorded times
    SIMAI_ROOT=/path/to/SimAI .venv/bin/python bench/simulate.py
    .venv/bin/python bench/simulate.py --simai-root /opt/simai-O0 --simai-root /opt/simai-O2 --grid

Workloads: the clean reference runs of ``simai/endtoend/INDEX.csv`` (SimAI's two shipped
examples and AICB's workloads on networks A and B; the runs that hit SimAI bugs are left out),
or SimAI's own examples when the reference is absent; ``--grid`` adds 72 generated workloads
(GPT-7B, LLaMA-7B, LLaMA-70B with GQA; world 16, global batch 16; TP 2/4/8 x SP x AIOB x
both schedules; networks A and B: 144 runs, of which the 32 SimAI bug cases are skipped), which
need a SimAI build to check against (about 5 minutes with an -O0 and an -O2 build, 2 cores).
SimAI's timed runs send its stdout to /dev/null (its best case); commsweep simulate writes both files.

The process timing lets Python cache bytecode as a normal install does (this project's
sandbox sets PYTHONDONTWRITEBYTECODE, which makes every start recompile the sources).
Exit status 1 if any output differs, 2 on bad arguments (an unlabelled SimAI build).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference"))
ENDTOEND = REFERENCE / "simai" / "endtoend"
COMMSWEEP = Path(sys.executable).with_name("commsweep")
NETWORKS = {  # the reference runs' two networks (simai/endtoend/README.md)
    "A": {"gpus_per_server": 8, "nics_per_server": 8, "nvlink_gbps": "360", "nic_gbps": "48.5"},
    "B": {"gpus_per_server": 8, "nics_per_server": 4, "nvlink_gbps": "200", "nic_gbps": "25"},
}
RECORDED = "SimAI -O0, recorded"  # INDEX.csv's wall_s: commit cef83f9d built by its build script


# -- SimAI builds -----------------------------------------------------------------------------


@dataclass
class Build:
    """One SimAI checkout and how its SimAI_analytical was compiled."""

    root: Path
    binary: Path
    label: str  # "-O2 (Release)", "-O0 (no build type)", or the user's label
    detail: str  # where the label comes from


_CACHE_LINE = re.compile(r"(CMAKE_BUILD_TYPE|CMAKE_CXX_FLAGS(?:_[A-Z]+)?):[A-Z]+=(.*)")


def optimisation(flags: str) -> str:
    """The -O level a compiler command line ends up with (the last one wins; none is -O0)."""
    levels = re.findall(r"(?:^|\s)(-O[0-3sgz]?|-Ofast)(?=\s|$)", flags)
    level = levels[-1] if levels else "-O0"
    return "-O1" if level == "-O" else level


def detect_build(binary: Path) -> tuple[str, str] | None:
    """(label, detail) from the CMake build directory above the binary, or None without one.

    The compiler flags CMake wrote for each target (``flags.make``) are what the sources were
    really compiled with; the cache's build type and flag variables are the fallback (another
    generator than Makefiles).
    """
    real = binary.resolve()
    cache = next((d / "CMakeCache.txt" for d in real.parents if (d / "CMakeCache.txt").is_file()), None)
    if cache is None:
        return None
    values = {}
    for line in cache.read_text(errors="replace").splitlines():
        if m := _CACHE_LINE.fullmatch(line.strip()):
            values[m[1]] = m[2].strip()
    build_type = values.get("CMAKE_BUILD_TYPE", "")
    levels = set()
    for made in sorted(cache.parent.glob("**/CMakeFiles/*.dir/flags.make")):
        for line in made.read_text(errors="replace").splitlines():
            if line.startswith("CXX_FLAGS"):
                levels.add(optimisation(line.split("=", 1)[1]))
    source = f"{cache}"
    if not levels:
        levels = {optimisation(values.get("CMAKE_CXX_FLAGS", "") + " "
                               + values.get(f"CMAKE_CXX_FLAGS_{build_type.upper()}", "") if build_type else "")}
    else:
        source += " and its targets' flags.make"
    level = "/".join(sorted(levels))
    return f"{level} ({build_type or 'no build type'})", source


def make_build(root: Path, label: str | None) -> Build:
    binary = root / "bin" / "SimAI_analytical"
    if not os.access(binary, os.X_OK):
        print(f"bench/simulate.py: {binary} not found or not executable: point SIMAI_ROOT (or --simai-root) at "
              "a SimAI checkout built with './scripts/build.sh -c analytical'", file=sys.stderr)
        raise SystemExit(2)
    found = detect_build(binary)
    if label:
        detail = "given with --simai-build" + (f"; CMake says {found[0]} ({found[1]})" if found else "")
        return Build(root, binary, label, detail)
    if found is None:
        print(f"bench/simulate.py: cannot tell how {binary} was built (no CMakeCache.txt above "
              f"{binary.resolve()}): say it with --simai-build LABEL (for example -O0 or -O2)", file=sys.stderr)
        raise SystemExit(2)
    return Build(root, binary, found[0], f"from {found[1]}")


# -- workloads --------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    workload: Path
    network: object  # commsweep.setup.network.Network
    prefix: str
    expected: Path | None = None  # SimAI's recorded EndToEnd.csv
    recorded_s: float | None = None  # SimAI's recorded wall time (-O0)
    rows: int = 0
    results: dict[str, tuple[float, float]] = field(default_factory=dict)  # column: (min s, median s)
    cpu: dict[str, float] = field(default_factory=dict)  # column: least CPU s
    identical: bool = True
    notes: list[str] = field(default_factory=list)


def network(net: str, gpus: int):
    from commsweep.setup.network import Network

    return Network(gpus=gpus, **NETWORKS[net])


def reference_cases() -> list[Case]:
    """The clean runs of the reference INDEX.csv (flags as SimAI was run)."""
    from commsweep.setup.network import Network

    out = []
    with open(ENDTOEND / "INDEX.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["notes"]:
                continue  # a SimAI bug case: its output is nonsense, its time no yardstick
            argv = shlex.split(row["command"].split("&&", 1)[1])[1:]
            f = dict(zip(argv[::2], argv[1::2]))
            net = Network(gpus=int(f["-g"]), gpus_per_server=int(f["-g_p_s"]), nics_per_server=int(f["-n_p_s"]),
                          nvlink_gbps=f["-nv"], nic_gbps=f["-nic"])
            path = REFERENCE / row["workload_file"]
            out.append(Case(f"{path.stem} net{row['net']}", path, net, f["-r"],
                            ENDTOEND / Path(row["endtoend_csv"]).name, float(row["wall_s"])))
    return out


def example_cases(root: Path) -> list[Case]:
    """SimAI's own shipped examples, on network A (no reference material needed)."""
    from commsweep.workload import format as wf

    out = []
    for name in ("workload_analytical.txt", "microAllReduce.txt"):
        path = root / "example" / name
        if path.is_file():
            gpus = wf.read(path).header.all_gpus
            out.append(Case(f"{path.stem} netA", path, network("A", gpus), f"{path.stem}-"))
    return out


GRID_MODELS = ("gpt-7b", "llama-7b", "llama-70b")


def grid_cases(folder: Path) -> list[Case]:
    """Generated workloads of a small sweep: models x TP x SP x AIOB x schedule x network."""
    from commsweep.orchestration.cli import main as commsweep

    out = []
    for model in GRID_MODELS:
        for tp in (2, 4, 8):
            for sp in (False, True):
                setup = ["--model", model, "--world_size=16", f"--tensor_model_parallel_size={tp}",
                         "--global_batch=16", "--seq_length=2048"] + (["--enable_sequence_parallel"] if sp else [])
                profile = folder / f"{model}_tp{tp}_sp{int(sp)}.aiob"
                if commsweep(["profile", *setup, "--gpu", "H100-SXM", "-o", str(profile)]):
                    raise SystemExit(f"bench/simulate.py: commsweep profile {' '.join(setup)} failed")
                for aiob in (False, True):
                    for schedule in ("aicb", "megatron"):
                        stem = f"{model}_tp{tp}_sp{int(sp)}_{schedule}{'_aiob' if aiob else ''}"
                        path = folder / f"{stem}.txt"
                        argv = ["generate", *setup, "--schedule", schedule, "-o", str(path)]
                        if aiob:
                            argv += ["--aiob_enable", "--comp_filepath", str(profile)]
                        if commsweep(argv):
                            raise SystemExit(f"bench/simulate.py: commsweep {' '.join(argv)} failed")
                        for net in NETWORKS:
                            out.append(Case(f"{stem} net{net}", path, network(net, 16), f"{stem}_net{net}-"))
    return out


# -- timing -----------------------------------------------------------------------------------


def timed_runs(argv: list[str], repeat: int, **kwargs) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of ``repeat`` runs of a child process."""
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def in_process(fn, budget_s: float = 0.3, least: int = 5, most: int = 200) -> list[float]:
    times = []
    while len(times) < least or (sum(times) < budget_s and len(times) < most):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def summary(times: list[float]) -> tuple[float, float]:
    return min(times), statistics.median(times)


def measure(case: Case, builds: list[Build], ratio_dir: Path, repeat: int) -> None:
    from commsweep.simulate.engine import load_ratios, simulate
    from commsweep.simulate.simai import prepare_workdir
    from commsweep.workload import format as wf

    ratios = load_ratios(ratio_dir)
    workload = wf.read(case.workload)
    case.rows = len(workload.rows)
    result = simulate(workload, case.network, ratios, prefix=case.prefix)
    if result.bugs:
        case.notes.append("skipped: a SimAI bug case (" + ", ".join(sorted({b.kind for b in result.bugs})) + ")")
        return
    if case.expected is not None and result.endtoend != case.expected.read_text():
        case.identical = False
        case.notes.append("engine differs from SimAI's recorded EndToEnd.csv")
    if case.recorded_s:  # 0.00 in INDEX.csv: below its 10 ms resolution, no yardstick
        case.results[RECORDED] = (case.recorded_s, case.recorded_s)

    for build in builds:
        workdir = prepare_workdir(ratio_dir)
        try:
            argv = [str(build.binary.resolve()), "-w", str(case.workload.resolve()), *case.network.flags(),
                    "-r", case.prefix]
            start = time.perf_counter()
            proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, errors="replace")
            first = time.perf_counter() - start
            out = workdir / "results" / f"{case.prefix}EndToEnd.csv"
            if proc.returncode != 0 or not out.is_file() or out.read_text() != result.endtoend:
                case.identical = False
                case.notes.append(f"SimAI {build.label} differs from the engine (exit {proc.returncode})")
                continue  # no time for a run that does not give the same result
            # fewer runs where one takes seconds (SimAI -O0 on a big workload)
            walls, cpus = timed_runs(argv, repeat if first < 2 else min(repeat, 3), cwd=workdir)
            case.results[f"SimAI {build.label}"] = summary(walls)
            case.cpu[f"SimAI {build.label}"] = min(cpus)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    case.results["engine in-process"] = summary(
        in_process(lambda: simulate(workload, case.network, ratios, prefix=case.prefix).collectives_csv()))

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(COMMSWEEP), "simulate", "-w", str(case.workload), *case.network.flags(), "-r", case.prefix,
                "--ratio-dir", str(ratio_dir), "--out-dir", tmp]
        subprocess.run(argv, check=True, env=env, capture_output=True)  # warm-up: bytecode caches
        if (Path(tmp) / f"{case.prefix}EndToEnd.csv").read_text() != result.endtoend:
            case.identical = False
            case.notes.append("commsweep simulate differs from the engine in-process")
        walls, cpus = timed_runs(argv, repeat, env=env)
        case.results["commsweep simulate"] = summary(walls)
        case.cpu["commsweep simulate"] = min(cpus)


# -- report -----------------------------------------------------------------------------------


def ratio_text(simai_s: float, ours_s: float) -> str:
    """SimAI's time over ours: "40x" (ours faster), or "1/2.6" (ours 2.6 times slower)."""
    r = simai_s / ours_s
    if r >= 1:
        return f"{r:.0f}x" if r >= 10 else f"{r:.1f}x"
    return f"1/{1 / r:.1f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g}" if seconds < 0.1 else f"{seconds * 1000:.0f}"


def cell(case: Case, col: str) -> str:
    if col not in case.results:
        return "-"
    lo, mid = case.results[col]
    return ms(lo) if lo == mid else f"{ms(lo)}/{ms(mid)}"


def report(cases: list[Case], columns: list[str], csv_path: Path | None) -> None:
    ours = ("engine in-process", "commsweep simulate")
    done = [c for c in cases if ours[0] in c.results]
    columns = [col for col in columns if any(col in c.results for c in done)]
    simai_cols = [c for c in columns if c.startswith("SimAI")]
    width = max([len(c.name) for c in cases] + [8])
    widths = [max(len(col), 13) for col in columns]

    print("\ntimes in ms, min/median of the runs")
    print(f"{'workload':{width}} {'rows':>5} | " + " | ".join(f"{c:>{w}}" for c, w in zip(columns, widths)))
    for c in cases:
        if c not in done:
            print(f"{c.name:{width}} {c.rows:5} | {'; '.join(c.notes)}")
            continue
        print(f"{c.name:{width}} {c.rows:5} | " + " | ".join(f"{cell(c, col):>{w}}" for col, w in zip(columns, widths))
              + ("" if c.identical else "   OUTPUT DIFFERS: " + "; ".join(c.notes)))

    pairs = [(s, o) for o in ours for s in simai_cols]
    heads = [f"{s.removeprefix('SimAI ')} / {'engine' if o == ours[0] else 'process'}" for s, o in pairs]
    print("\nratios: SimAI's min / ours (40x: ours 40 times faster; 1/2.6: ours 2.6 times slower)")
    print(f"{'workload':{width}} | " + " | ".join(heads))
    for c in done:
        cells = [ratio_text(c.results[s][0], c.results[o][0]) if s in c.results else "-" for s, o in pairs]
        print(f"{c.name:{width}} | " + " | ".join(f"{x:>{len(h)}}" for x, h in zip(cells, heads)))

    if done:
        print(f"\nover the {len(done)} workloads: the median of each workload's min, and the median of the ratios")
        for col in columns:
            have = [c for c in done if col in c.results]
            line = f"  {col:{max(widths)}} {ms(statistics.median(c.results[col][0] for c in have)):>7} ms"
            cpu = [c.cpu[col] for c in have if col in c.cpu]
            line += f" (CPU {ms(statistics.median(cpu))} ms)" if cpu else ""
            if col not in ours:
                line += f" ({len(have)} workloads)" if len(have) != len(done) else ""
                for o in ours:
                    r = statistics.median(c.results[col][0] / c.results[o][0] for c in have)
                    line += f"; {o}: {ratio_text(r, 1)}"
            print(line)
        largest = max(done, key=lambda c: c.rows)
        print(f"largest workload, {largest.name} ({largest.rows} rows): " + "; ".join(
            f"{col} {ms(largest.results[col][0])} ms" for col in columns if col in largest.results))

    if csv_path:
        slug = {col: re.sub(r"[^a-z0-9]+", "_", col.lower()).strip("_") for col in columns}
        cpu_cols = [col for col in columns if any(col in c.cpu for c in done)]
        with open(csv_path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["workload", "rows", "identical",
                        *(f"{slug[c]}_{k}_ms" for c in columns for k in ("min", "median")),
                        *(f"{slug[c]}_cpu_min_ms" for c in cpu_cols), "notes"])
            for c in cases:
                cells = []
                for col in columns:
                    lo, mid = c.results.get(col, (None, None))
                    cells += ["" if lo is None else f"{lo * 1000:.3f}", "" if mid is None else f"{mid * 1000:.3f}"]
                cells += [f"{c.cpu[col] * 1000:.3f}" if col in c.cpu else "" for col in cpu_cols]
                w.writerow([c.name, c.rows, "yes" if c.identical else "no", *cells, "; ".join(c.notes)])
        print(f"per-workload table written to {csv_path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--simai-root", action="append", type=Path, default=[],
                    help="a SimAI checkout with bin/SimAI_analytical (repeat for several builds; default: $SIMAI_ROOT)")
    ap.add_argument("--simai-build", action="append", default=[],
                    help="how the n-th --simai-root was built (e.g. -O2), where its CMake files do not say")
    ap.add_argument("--grid", action="store_true", help="also 72 generated workloads on 2 networks (144 runs; minutes)")
    ap.add_argument("--only", action="append", default=[], help="keep the workloads whose name contains this")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each process per workload (default 5)")
    ap.add_argument("--csv", type=Path, help="also write the per-workload table here")
    given, argv = iter(sys.argv[1:] if argv is None else argv), []
    for arg in given:  # a label such as -O2 is no option: let "--simai-build -O2" mean what it says
        argv.append(f"--simai-build={next(given, '')}" if arg == "--simai-build" else arg)
    ns = ap.parse_args(argv)
    if "" in ns.simai_build:
        ap.error("--simai-build needs a label (for example -O2)")
    roots = ns.simai_root or ([Path(os.environ["SIMAI_ROOT"])] if os.environ.get("SIMAI_ROOT") else [])
    if len(ns.simai_build) > len(roots):
        ap.error(f"{len(ns.simai_build)} --simai-build label(s) for {len(roots)} SimAI root(s)")
    labels = ns.simai_build + [None] * (len(roots) - len(ns.simai_build))
    builds = [make_build(root, label) for root, label in zip(roots, labels)]

    have_reference = (ENDTOEND / "INDEX.csv").is_file()
    ratio_dir = REFERENCE / "simai" / "ratio" if have_reference else None
    if have_reference:
        cases = reference_cases()
    elif builds:
        cases = example_cases(builds[0].root)
        ratio_dir = builds[0].root / "astra-sim-alibabacloud" / "inputs" / "ratio"
    else:
        print(f"SimAI reference runs not found under {ENDTOEND} and no SimAI build given (SIMAI_ROOT): "
              "nothing to compare with")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-simulate-"))
    try:
        if ns.grid:
            if not builds:
                ap.error("--grid needs a SimAI build (SIMAI_ROOT or --simai-root) to check the engine against")
            cases += grid_cases(tmp)
        if ns.only:
            cases = [c for c in cases if any(s in c.name for s in ns.only)]

        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
              f"Python {sys.version.split()[0]}; {ns.repeat} runs per process, the engine in-process >= 5 runs")
        for build in builds:
            print(f"SimAI {build.label}: {build.binary} ({build.detail})")
        if have_reference:
            print(f"{RECORDED}: wall_s of {ENDTOEND / 'INDEX.csv'} (SimAI cef83f9d as its build script makes it, "
                  "no build type, one run on the machine that recorded the reference)")
        if not builds:
            print("no SimAI build given (SIMAI_ROOT or --simai-root): the only SimAI times are the recorded -O0 "
                  "ones; an optimised (-O2) SimAI is much faster: see docs/simulate.md")
        for i, case in enumerate(cases, 1):
            print(f"  [{i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
            measure(case, builds, ratio_dir, ns.repeat)
        columns = ([RECORDED] if have_reference else []) + [f"SimAI {b.label}" for b in builds] + [
            "engine in-process", "commsweep simulate"]
        report(cases, columns, ns.csv)
        print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    differs = [c for c in cases if not c.identical]
    if differs:
        print(f"OUTPUT DIFFERS on {len(differs)} workload(s): the times above compare different results")
        return 1
    print("every output compared is byte-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
