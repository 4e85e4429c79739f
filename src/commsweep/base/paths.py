"""Where each output lives under a sweep's results folder: the one home of the layout.

The Snakemake rules and the package both take every path from here (``Layout``), so the
layout is spelled once. The folder is the config's ``results`` key (``results_folder``;
``results`` unless a sweep names another, so that two sweeps keep their answers side by
side); below, ``results/`` stands for it::

    results/sweep.csv                                   the points (and skipped combinations)
    results/run.json                                    the run: commsweep version, config, external inputs
    results/status.txt                                  the verdict of the last run (rule check)
    results/aiob/<backend>/<profile>.txt|.csv|.status   AIOB profiles, shared by points
    results/workloads/<workload>/workload.txt           SimAI workload, shared across networks
    results/workloads/<workload>/volumes.csv            its communication volumes
    results/points/<point>/EndToEnd.csv                 SimAI's summary and per-row times of the point
    results/points/<point>/collectives.csv              its simulated time per collective
    results/points/<point>/times.csv                    their sums and SimAI's summary line (the summary's input)
    results/points/<point>/audit.csv                    its workload's audit against Megatron's schedule
    results/summary.csv, results/plots/*.png, ...       the sweep's tables and figures
    results/steps/<rule>.status                         the outcome of each sweep-wide step
    results/batches/<batch>.json                        a finished batch of points: their files (commsweep.orchestration.batch)
    results/batches/<batch>.causes.csv                  the difference by cause of its AICB points
    results/traces/<trace>.csv|.compare.csv             measured megatron-core traces (reference: measured;
                                                        <trace>: <key>, or <release>/<key> per megatron_core release)
    results/trace_versions.csv|.txt                     the releases side by side, and their differences
    results/logs/<rule>/<key>.log                       each job's log (results/logs/<rule>.log: sweep-wide)
    results/benchmarks/<rule>/<key>.tsv                 each job's time and memory, likewise

Every per-point file sits in a folder named after its key (``<kind>/<key>/<file>``, see
``key_of``), and every job's outcome in a ``.status`` file beside its outputs
(``commsweep.base.status``). A path method called without a key returns the Snakemake pattern,
with the key as a wildcard (``{point}``, ``{workload}``, ...): what a rule declares.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
STATUS_SUFFIX = ".status"
# The config key that names the results folder.
RESULTS_KEY = "results"


def results_folder(config) -> str:
    """The results folder of a sweep config (its ``results`` key, else ``results``)."""
    return str(config.get(RESULTS_KEY) or RESULTS).rstrip("/")


class Layout:
    """The paths of one results directory (``root``), as strings."""

    def __init__(self, root: str | Path = RESULTS) -> None:
        self.root = str(root)

    def _at(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    # -- the sweep and its run ---------------------------------------------------------

    def sweep_table(self) -> str:
        return self._at("sweep.csv")

    def run_record(self) -> str:
        return self._at("run.json")

    def verdict(self) -> str:
        """``status.txt``: the last run's verdict, written by ``commsweep check``."""
        return self._at("status.txt")

    def report(self) -> str:
        return self._at("report.html")

    # -- AIOB profiles (one per profile key and backend) ---------------------------------

    def profile_dir(self, backend: str) -> str:
        return self._at(f"aiob/{backend}")

    def profile(self, backend: str, profile: str = "{profile}") -> str:
        return f"{self.profile_dir(backend)}/{profile}.txt"

    def profile_table(self, backend: str, profile: str = "{profile}") -> str:
        return f"{self.profile_dir(backend)}/{profile}.csv"

    def profile_status(self, backend: str, profile: str = "{profile}") -> str:
        return f"{self.profile_dir(backend)}/{profile}{STATUS_SUFFIX}"

    # -- workloads (one per workload key, shared by the networks of a setup) -------------

    def workloads_dir(self) -> str:
        return self._at("workloads")

    def workload_dir(self, workload: str = "{workload}") -> str:
        return f"{self.workloads_dir()}/{workload}"

    def workload(self, workload: str = "{workload}") -> str:
        return f"{self.workload_dir(workload)}/workload.txt"

    def volumes(self, workload: str = "{workload}") -> str:
        return f"{self.workload_dir(workload)}/volumes.csv"

    # -- points (one per point key) ------------------------------------------------------

    def points_dir(self) -> str:
        return self._at("points")

    def point_dir(self, point: str = "{point}") -> str:
        return f"{self.points_dir()}/{point}"

    def endtoend(self, point: str = "{point}") -> str:
        """The point's simulation in SimAI's EndToEnd.csv layout."""
        return f"{self.point_dir(point)}/EndToEnd.csv"

    def collectives(self, point: str = "{point}") -> str:
        """The point's simulated time per collective (``simulate.collectives`` columns)."""
        return f"{self.point_dir(point)}/collectives.csv"

    def times(self, point: str = "{point}") -> str:
        """The point's simulated times in brief (``simulate.times``): all the summary reads of a simulation."""
        return f"{self.point_dir(point)}/times.csv"

    def packet_record(self, point: str = "{point}") -> str:
        """A packet-level point's run record (``simulate.ns3.record``): settings, build, FCT, PFC, cost."""
        return f"{self.point_dir(point)}/ns3.csv"

    def astra_vs_simai(self) -> str:
        """Each analytical point's time in ASTRA-sim beside SimAI's (``analysis.astra_compare``)."""
        return self._at("astra_vs_simai.csv")

    def astra_difference(self) -> str:
        """Each AICB point minus its Megatron twin, in SimAI and in ASTRA-sim."""
        return self._at("astra_difference.csv")

    def astra_runs(self) -> str:
        """The folder of the ASTRA-sim runs, one per point, each with its command kept."""
        return self._at("astra")

    def packet_comparison(self) -> str:
        """Each packet-level point beside its analytical twin (``analysis.packet``)."""
        return self._at("packet_vs_analytical.csv")

    def packet_causes(self) -> str:
        """The difference by cause under packet-level simulation (``analysis.causes``)."""
        return self._at("packet_difference_by_cause.csv")

    def audit(self, point: str = "{point}") -> str:
        """The point's audit findings (``analysis.audit`` columns)."""
        return f"{self.point_dir(point)}/audit.csv"

    # -- the status of a job: ``<stage>.status`` in the folder of its outputs -------------

    def workload_status(self, stage: str, workload: str = "{workload}") -> str:
        """A per-workload stage's status (stage: workload or volumes)."""
        return f"{self.workload_dir(workload)}/{stage}{STATUS_SUFFIX}"

    def point_status(self, stage: str, point: str = "{point}") -> str:
        """A per-point stage's status (stage: simulate or audit)."""
        return f"{self.point_dir(point)}/{stage}{STATUS_SUFFIX}"

    def step_status(self, step: str) -> str:
        """A sweep-wide step's status (summarize, compare, a figure, trace-check)."""
        return self._at(f"steps/{step}{STATUS_SUFFIX}")

    # -- batches: the jobs that run the per-point stages (commsweep.orchestration.batch) -----------------

    def batches_dir(self) -> str:
        return self._at("batches")

    def batch_manifest(self, batch: str = "{batch}") -> str:
        """A finished batch's manifest: its points, their files, its failed tasks."""
        return f"{self.batches_dir()}/{batch}.json"

    def batch_causes(self, batch: str = "{batch}") -> str:
        """The difference by cause of a batch's AICB points (``analysis.causes.points_causes``)."""
        return f"{self.batches_dir()}/{batch}.causes.csv"

    # -- sweep-wide tables and figures -----------------------------------------------------

    def summary(self) -> str:
        return self._at("summary.csv")

    def findings(self) -> str:
        return self._at("findings.csv")

    def comparison(self) -> str:
        return self._at("comparison.csv")

    def verdicts(self) -> str:
        return self._at("verdicts.csv")

    def findings_by_kind(self) -> str:
        return self._at("findings_by_kind.csv")

    def plot(self, name: str) -> str:
        return self._at(f"plots/{name}.png")

    def difference_by_cause(self) -> str:
        return self._at("difference_by_cause.csv")

    def answer_page(self) -> str:
        """The landing page, in Markdown (its figures linked from plots/)."""
        return self._at("answer.md")

    def answer_rst(self) -> str:
        """The landing page in reStructuredText, figures embedded: the report's front page."""
        return self._at("answer.rst")

    # -- measured traces (reference: measured) ---------------------------------------------

    def trace(self, trace: str = "{trace}") -> str:
        return self._at(f"traces/{trace}.csv")

    def trace_compare(self, trace: str = "{trace}") -> str:
        return self._at(f"traces/{trace}.compare.csv")

    def trace_status(self, trace: str = "{trace}") -> str:
        return self._at(f"traces/{trace}{STATUS_SUFFIX}")

    def trace_check(self) -> str:
        return self._at("trace_check.csv")

    def trace_versions(self) -> str:
        """The megatron-core releases' traces side by side (``megatron_core`` lists them)."""
        return self._at("trace_versions.csv")

    def trace_versions_differences(self) -> str:
        """The differences between the releases' traces, in words."""
        return self._at("trace_versions.txt")

    # -- logs and benchmarks, by rule ------------------------------------------------------

    def log(self, rule: str, key: str | None = None) -> str:
        return self._at(f"logs/{rule}.log" if key is None else f"logs/{rule}/{key}.log")

    def benchmark(self, rule: str, key: str | None = None) -> str:
        return self._at(f"benchmarks/{rule}.tsv" if key is None else f"benchmarks/{rule}/{key}.tsv")


def key_of(path: str | Path) -> str:
    """The key (workload or point) of a per-workload or per-point file: its folder's name."""
    return Path(path).parent.name


# -- Layout's per-key paths as Path objects (kept for the package's readers and the tests) ------


def _as_path(method: str):
    """``Layout(results).METHOD(key)`` as a Path: the same spelling, not a second one."""

    def path(results: str | Path, key: str) -> Path:
        return Path(getattr(Layout(results), method)(key))

    path.__name__ = path.__qualname__ = f"{method}_path"
    path.__doc__ = f"``Layout(results).{method}(key)`` as a Path."
    return path


workload_dir = _as_path("workload_dir")
workload_file = _as_path("workload")
volumes_file = _as_path("volumes")
point_dir = _as_path("point_dir")
endtoend_file = _as_path("endtoend")
collectives_file = _as_path("collectives")
times_file = _as_path("times")
audit_file = _as_path("audit")


# -- the per-point files a sweep-wide step reads ---------------------------------------------


class PointFiles:
    """Each point's files as a sweep-wide step reads them: given as lists, or found by the layout.

    The pipeline gives the summary, the comparison and the check exactly the files its rules
    declare (``given``), so they read nothing else: not a point of an earlier sweep left in
    the folder, and nothing a storage plugin did not fetch. By hand, ``under(results)``
    finds each point's files under a results folder by this layout. A given file is known by
    its folder's name (``key_of``): where it came from does not matter.
    """

    def __init__(self, results: str | Path | None = None) -> None:
        self.results = Path(results) if results is not None else None
        self._layout = Layout(results) if results is not None else None
        self._status: dict[str, list[Path]] = {}
        self._volumes: dict[str, Path] = {}
        self._times: dict[str, Path] = {}
        self._collectives: dict[str, Path] = {}
        self._audits: dict[str, Path] = {}

    @classmethod
    def under(cls, results: str | Path) -> PointFiles:
        return cls(results)

    @classmethod
    def given(cls, *, status=(), volumes=(), times=(), collectives=(), audits=()) -> PointFiles:
        files = cls()
        for path in map(Path, status):
            files._status.setdefault(key_of(path), []).append(path)
        files._volumes = {key_of(p): Path(p) for p in volumes}
        files._times = {key_of(p): Path(p) for p in times}
        files._collectives = {key_of(p): Path(p) for p in collectives}
        files._audits = {key_of(p): Path(p) for p in audits}
        return files

    def statuses(self, workload: str, point: str) -> list[Path]:
        """Every status file of one point: its workload's stages and its own."""
        if self.results is None:
            return sorted(self._status.get(workload, [])) + sorted(self._status.get(point, []))
        found: list[Path] = []
        for folder in map(Path, (self._layout.workload_dir(workload), self._layout.point_dir(point))):
            if folder.is_dir():
                found += sorted(folder.glob(f"*{STATUS_SUFFIX}"))
        return found

    def _found(self, method: str, key: str, given: dict[str, Path]) -> Path | None:
        return Path(getattr(self._layout, method)(key)) if self._layout is not None else given.get(key)

    def volumes(self, workload: str) -> Path | None:
        return self._found("volumes", workload, self._volumes)

    def times(self, point: str) -> Path | None:
        return self._found("times", point, self._times)

    def collectives(self, point: str) -> Path | None:
        return self._found("collectives", point, self._collectives)

    def audit(self, point: str) -> Path | None:
        return self._found("audit", point, self._audits)
