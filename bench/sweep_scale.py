"""How the pipeline scales: sweeps of about 10, 100, 1,000 and 10,000 points, end to end.

For each size it writes a sweep config, runs the whole workflow from scratch with
``--cores 2`` in a temporary folder, then once more with nothing changed, and prints: the
DAG build time (a dry run), the wall time, the time per point, the CPU time of the whole
run, the peak RSS of any process of the run, the files written, the no-op rerun time and
the machine's load average (1 minute, before and after the run: the machine may be shared).

Then where a point's time goes, in CPU milliseconds per point:

* ``snakemake``: the Snakemake process itself (reading the Snakefile, the DAG, scheduling,
  each job's bookkeeping);
* ``processes``: starting each job's Python (the jobs run, times the CPU of a bare
  ``python -c pass``);
* ``imports``: what each job's Python imports before its work (the jobs run, times the CPU of
  ``python -c 'import commsweep.orchestration.cli, commsweep.base.status'``, with ``snakemake.script`` for a
  script job, less the bare start);
* ``work``: the rest, the jobs' own work (``tasks`` says how much of it the batches
  measured themselves, their points' tasks and difference by cause, from their logs).

    .venv/bin/python bench/sweep_scale.py --sizes 10 100       # some of them
    .venv/bin/python bench/sweep_scale.py --sizes 1024 --record
    .venv/bin/python bench/sweep_scale.py --sizes 1024 --repo /path/to/another/checkout
    .venv/bin/python bench/sweep_scale.py --sizes 1024 --identical-to /tmp/per-process

``--repo`` runs another checkout's Snakefile and package (``REPO/src`` first on the Python
path), e.g. main's, to compare, or a copy of a commit (``git archive``) while you edit this
one; with the commands of its venv, ``REPO/.venv/bin``, if it has one, else this one's. ``--record`` appends the rows to
``bench/sweep_scale.md``, which docs/scale.md quotes. ``--identical-to REPO`` also runs
REPO's workflow on each sweep (untimed) and checks that both leave the same results, e.g.
against the per-process pipeline the batches replaced (main before issue 17:
``git -C . archive 8b67405 | tar -x -C /tmp/per-process``).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

NETWORKS = """\
networks:
  netA: {gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 360, nic_gbps: 48.5}
  netB: {gpus_per_server: 8, nics_per_server: 4, nvlink_gbps: 200, nic_gbps: 25}
"""
SWEEPS = {
    10: """\
sweep:
  model: [gpt-7b, gpt-13b, gpt-22b, llama-7b, llama-13b]
  world_size: [16]
  tp: [4]
  sp: [false, true]
  aiob: [true]
  schedule: [aicb]
  global_batch: [16]
  network: [netA]
""",
    # The heaviest per point: a global batch of 1,024 gives up to 256 micro-batches, workloads
    # of up to 50,000 rows.
    100: """\
sweep:
  model: [gpt-7b, gpt-13b, gpt-22b, llama-7b, llama-13b]
  world_size: [32, 64, 128, 256, 512]
  tp: [1, 2, 4, 8]
  sp: [true]
  aiob: [true]
  schedule: [aicb]
  global_batch: [1024]
  network: [netA]
""",
    # Issue 17's sweep: 4 models (llama-70b has grouped-query attention) x 2 cluster sizes x
    # TP 1-8 x SP x AIOB x both schedules x 2 micro-batch sizes x 2 networks = 1,024 points.
    1024: """\
sweep:
  model: [gpt-7b, gpt-13b, llama-7b, llama-70b]
  world_size: [32, 64]
  tp: [1, 2, 4, 8]
  sp: [false, true]
  aiob: [false, true]
  schedule: [aicb, megatron]
  micro_batch: [1, 2]
  global_batch: [128]
  network: [netA, netB]
""",
    # 5 models x 2 cluster sizes x TP 1-8 x PP 1-2 x SP x AIOB x both schedules x 2 micro-batch
    # sizes x 2 global batches x 2 sequence lengths x 2 networks = 10,240 points.
    10000: """\
sweep:
  model: [gpt-7b, gpt-13b, gpt-22b, llama-7b, llama-70b]
  world_size: [32, 64]
  tp: [1, 2, 4, 8]
  pp: [1, 2]
  sp: [false, true]
  aiob: [false, true]
  schedule: [aicb, megatron]
  micro_batch: [1, 2]
  global_batch: [128, 256]
  seq_length: [2048, 4096]
  network: [netA, netB]
""",
}
# The 1,024-point sweep of the rows recorded before issue 17 (one cluster size, PP 1-2, no
# GQA model), to compare with them.
SWEEPS[1000] = """\
sweep:
  model: [gpt-7b, gpt-13b, llama-7b, llama-13b]
  world_size: [64]
  tp: [1, 2, 4, 8]
  pp: [1, 2]
  sp: [false, true]
  aiob: [false, true]
  schedule: [aicb, megatron]
  micro_batch: [1, 2]
  global_batch: [128]
  network: [netA, netB]
"""


class Watch:
    """The CPU seconds a process has used itself (not its children), sampled until it ends."""

    def __init__(self, pid: int) -> None:
        self.pid, self.cpu = pid, 0.0
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while True:
            try:
                fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return
            if fields[0] == "Z":
                return
            self.cpu = (int(fields[11]) + int(fields[12])) / tick
            time.sleep(0.05)

    def join(self) -> float:
        self._thread.join(timeout=5)
        return self.cpu


class Run:
    """One Snakemake run: its wall time, its CPU time (with every child), the Snakemake
    process's own CPU time, in seconds, and the peak RSS of any one process of it, in KiB."""

    def __init__(self, wall: float, cpu: float, own: float, peak_kib: int) -> None:
        self.wall, self.cpu, self.own, self.peak_kib = wall, cpu, own, peak_kib


def snakemake(repo: Path, workdir: Path, config: Path, *extra: str) -> Run:
    """Run the workflow (``Run``)."""
    bin_dir = repo / ".venv" / "bin" if (repo / ".venv" / "bin").is_dir() else Path(sys.executable).parent
    # That checkout's package, whatever the venv holds (e.g. a copy of a commit, so that
    # editing the working tree meanwhile does not change what runs).
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(repo / "src")}
    cmd = [str(bin_dir / "snakemake"), "-s", str(repo / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(config), "--cores", "2", "--quiet", "all", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = Watch(proc.pid)
    streams: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda name=name: streams.__setitem__(name, getattr(proc, name).read()))
               for name in ("stdout", "stderr")]
    for reader in readers:
        reader.start()
    # wait4: this run's own resource use (of Snakemake and every process under it, once
    # reaped), not the largest of every run this script has made so far (RUSAGE_CHILDREN).
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    for reader in readers:
        reader.join()
    own = watch.join()
    if proc.returncode != 0:
        out, err = (streams.get(n, b"").decode(errors="replace") for n in ("stdout", "stderr"))
        raise SystemExit(f"snakemake failed:\n{out[-3000:]}\n{err[-3000:]}")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, own, usage.ru_maxrss)


def startup_cpu(repo: Path, script: bool | None) -> float:
    """The CPU seconds of starting a job's Python with what it imports (best of 5); with
    ``script`` None, a bare interpreter's."""
    python = repo / ".venv" / "bin" / "python" if (repo / ".venv" / "bin").is_dir() else Path(sys.executable)
    code = "pass" if script is None else "import commsweep.orchestration.cli, commsweep.base.status" + (", snakemake.script" if script else "")
    best = float("inf")
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(python), "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(repo / "src")})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return best


def jobs_run(results: Path) -> tuple[int, int]:
    """The jobs of a run (one benchmark file each): all, and those run as Snakemake scripts."""
    scripts = ("batch", "summarize", "compare", "difference_by_cause", "check", "sweep_table", "run_record")
    bench = results / "benchmarks"
    files = list(bench.rglob("*.tsv")) if bench.exists() else []
    rule = [f.parent.name if f.parent != bench else f.stem for f in files]
    return len(files), sum(r in scripts for r in rule)


def task_cpu(results: Path) -> float:
    """The CPU seconds of work the batches measured themselves (their logs' last lines)."""
    total = 0.0
    for log in (results / "logs" / "batch").glob("*.log") if (results / "logs" / "batch").exists() else ():
        lines = [line for line in log.read_text().splitlines() if line.startswith("batch ") and " ran," in line]
        if lines:
            total += sum(float(x) for x in re.findall(r"\(([\d.]+) s CPU\)", lines[-1]))
    return total


def load() -> float:
    return os.getloadavg()[0]


def steps(results: Path) -> str:
    """The sweep-wide steps of a run: seconds and CPU seconds each (their benchmark files; the
    CPU is Snakemake's sample of the job's processes)."""
    out = []
    for tsv in sorted((results / "benchmarks").glob("*.tsv")):
        fields = tsv.read_text().splitlines()[1].split("\t")
        out.append(f"{tsv.stem} {float(fields[0]):.1f} s ({float(fields[9]):.1f} s CPU)")
    return ", ".join(out)


def result_differences(mine: Path, theirs: Path) -> tuple[int, list[str]]:
    """Compare two runs' results/ (``--identical-to``): every file but the logs, benchmarks
    and batch manifests (a per-process run has none) byte for byte, but the status files and
    run.json as JSON without what only a batched run records (a task's ``job`` digest, the
    ``batch`` key of the config). Returns the files compared and the differences."""
    import json

    skip = ("logs", "benchmarks", "batches")

    def files(root: Path) -> dict[str, Path]:
        return {str(p.relative_to(root)): p for p in root.rglob("*")
                if p.is_file() and p.relative_to(root).parts[0] not in skip}

    def content(path: Path, rel: str):
        if path.suffix == ".status":
            record = json.loads(path.read_text())
            record.pop("job", None)
            return record
        if rel == "run.json":
            record = json.loads(path.read_text())
            record.get("config", {}).pop("batch", None)
            return record
        return path.read_bytes()

    a, b = files(mine), files(theirs)
    out = [f"only in this run: {p}" for p in sorted(a.keys() - b.keys())]
    out += [f"only in theirs: {p}" for p in sorted(b.keys() - a.keys())]
    out += [f"differs: {p}" for p in sorted(a.keys() & b.keys()) if content(a[p], p) != content(b[p], p)]
    return len(a.keys() & b.keys()), out


def measure(size: int, repo: Path, keep: Path | None = None, other: Path | None = None) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="commsweep-scale-") as tmp:
        base = Path(tmp) if keep is None else keep
        workdir = base / str(size)
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "sweep.yaml"
        config.write_text(SWEEPS[size] + NETWORKS)
        dag = snakemake(repo, workdir, config, "--dry-run").wall
        load_before = load()
        run = snakemake(repo, workdir, config)
        wall, cpu, own, peak_kib = run.wall, run.cpu, run.own, run.peak_kib
        load_after = load()
        results = workdir / "results"
        points = sum(1 for _ in open(results / "sweep.csv")) - 1
        files = sum(len(f) for _, _, f in os.walk(results))
        jobs, scripts = jobs_run(results)
        tasks = task_cpu(results)
        sweep_wide = steps(results)
        rerun = snakemake(repo, workdir, config).wall
        identical = ""
        if other is not None:
            theirs = base / f"{size}-theirs"
            theirs.mkdir(exist_ok=True)
            (theirs / config.name).write_text(config.read_text())  # run.json names the config as found
            snakemake(other, theirs, theirs / config.name)
            compared, differences = result_differences(results, theirs / "results")
            identical = (f"identical to {other}'s results: {compared} files" if not differences else
                         f"NOT identical to {other}'s results: {len(differences)} of {compared} files: "
                         + "; ".join(differences[:10]))
    bare, shell_start, script_start = startup_cpu(repo, None), startup_cpu(repo, False), startup_cpu(repo, True)
    processes = jobs * bare
    imports = (jobs - scripts) * max(0.0, shell_start - bare) + scripts * max(0.0, script_start - bare)
    return {"points": points, "dag_s": dag, "wall_s": wall, "per_point_ms": 1000 * wall / points, "cpu_s": cpu,
            "peak_rss_mib": peak_kib / 1024, "files": files, "rerun_s": rerun, "load_before": load_before,
            "load_after": load_after, "jobs": jobs, "snakemake_ms": 1000 * own / points,
            "processes_ms": 1000 * processes / points, "imports_ms": 1000 * imports / points,
            "work_ms": 1000 * (cpu - own - processes - imports) / points,
            "tasks_ms": 1000 * tasks / points, "steps": sweep_wide, "identical": identical}


HEAD = (f"{'points':>6} {'DAG s':>6} {'wall s':>7} {'ms/point':>8} {'CPU s':>7} {'peak RSS MiB':>12} {'files':>7} "
        f"{'rerun s':>7} {'load':>9}")
WHERE = (f"{'points':>6} {'jobs':>6} {'CPU ms/point:':>14} {'snakemake':>9} {'processes':>9} {'imports':>7} {'work':>6} "
         f"{'(tasks)':>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1024, 10000], choices=sorted(SWEEPS))
    parser.add_argument("--repo", type=Path, default=HERE, help="the checkout whose workflow runs (default: this one)")
    parser.add_argument("--record", action="store_true", help="append the results to bench/sweep_scale.md")
    parser.add_argument("--identical-to", type=Path, metavar="REPO",
                        help="run REPO's workflow on each sweep too (untimed, e.g. a snapshot of the per-process "
                             "pipeline) and check that it leaves the same results")
    parser.add_argument("--label", help="what ran, for the record's heading (default: the checkout's folder and "
                                         "commit), e.g. 'per-process pipeline (main at 8b67405)'")
    parser.add_argument("--keep", type=Path, help="run each sweep in KEEP/<size> and leave it there (default: a "
                                                  "temporary folder, removed)")
    args = parser.parse_args()
    repo = args.repo.resolve()
    python = repo / ".venv" / "bin" / "python" if (repo / ".venv" / "bin").is_dir() else Path(sys.executable)
    # As `make run` does: the package's modules byte-compiled once, not in every job.
    subprocess.run([str(python), "-m", "compileall", "-q", str(repo / "src")], check=True)
    commit = subprocess.run(["git", "-C", str(repo), "describe", "--always"], capture_output=True,
                            text=True).stdout.strip() or "?"
    # Dirty: changed besides the record itself (which an earlier --record appended to).
    changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", ".",
                              ":(exclude)bench/sweep_scale.md"], capture_output=True, text=True).stdout.strip()
    commit += "-dirty" if changed else ""
    rows, where, identical = [HEAD], [WHERE], []
    print(f"{repo} ({commit}), {os.cpu_count()} CPUs, --cores 2", flush=True)
    print(HEAD, flush=True)
    for size in args.sizes:
        r = measure(size, repo, args.keep.resolve() if args.keep else None,
                    args.identical_to.resolve() if args.identical_to else None)
        line = (f"{r['points']:>6} {r['dag_s']:>6.1f} {r['wall_s']:>7.1f} {r['per_point_ms']:>8.0f} {r['cpu_s']:>7.1f} "
                f"{r['peak_rss_mib']:>12.0f} {r['files']:>7} {r['rerun_s']:>7.1f} "
                f"{r['load_before']:>4.1f}-{r['load_after']:<4.1f}")
        rows.append(line)
        where.append(f"{r['points']:>6} {r['jobs']:>6} {'':>14} {r['snakemake_ms']:>9.1f} {r['processes_ms']:>9.1f} "
                     f"{r['imports_ms']:>7.1f} {r['work_ms']:>6.1f} {r['tasks_ms']:>8.1f}")
        print(line, flush=True)
        print(f"       sweep-wide steps: {r['steps']}", flush=True)
        if r["identical"]:
            print(f"       {r['identical']}", flush=True)
            identical.append(f"{r['points']:>6} points: {r['identical']}")
    print("\nwhere a point's time goes (CPU ms per point):")
    print("\n".join(where))
    if args.record:
        cpu = platform.processor() or platform.machine()
        with open(HERE / "bench" / "sweep_scale.md", "a", encoding="utf-8") as fh:
            label = args.label or f"{repo.name} at {commit}"
            fh.write(f"\n## {date.today().isoformat()}, {label}, {os.cpu_count()} CPUs ({cpu}), "
                     "`--cores 2`\n\n```\n" + "\n".join(rows) + "\n\n" + "\n".join(where)
                     + "".join(f"\n{line}" for line in ([""] + identical if identical else [])) + "\n```\n")


if __name__ == "__main__":
    main()
