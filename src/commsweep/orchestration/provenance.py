"""Which run made the results: commsweep's version, the sweep config, and the external inputs.

A sweep reads files from outside its results folder: the user's AIOB files
(``aiob.file``), a SimAI build (``simulator.root``), SimAI's ratio tables
(``simulator.ratio_dir``, or the SimAI root's) and an AICB checkout
(``generator.aicb_root``). Snakemake sees a file it cannot make as a source and never
asks whether it changed, or still exists, once the outputs made from it are there: a
moved or rebuilt input would leave the old numbers standing as current. So, before any
job runs:

* every external input the sweep uses must exist (``check_external`` names the config
  key and the path of a missing one);
* each is checksummed (``External.digest``), and the checksum goes into the parameters of
  exactly the jobs that read it (``Run.job_provenance``): a changed file reruns them,
  and only them, through Snakemake's params trigger.

The run itself is named by ``Run.id``, a digest of the config (as validated, defaults
filled in), commsweep's version and the inputs' checksums: ``results/run.json`` records
all of them, the summary's ``run`` column and ``status.txt`` name it, and every job's
status file records the version, the config digest and the checksums of the inputs it
read (``status.Status.provenance``). Folders of points that are not in the sweep
(``stale_outputs``) are never read, and are listed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..base.external import External, file_digest, files_digest, source_files  # noqa: F401 - provenance's names too



def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# Config keys that say how the work is cut into jobs, not what it computes: a run's name
# leaves them out (the same sweep in batches of another size is the same run).
EXECUTION_KEYS = ("batch", "results")
# Of those, the keys a run's record leaves out too: where its results go (the same sweep in two
# folders has the same record; the default folder's record reads as before the key existed).
PLACE_KEYS = ("results",)


# Sweep keys added after runs were recorded, with their defaults: at its default such a key
# is left out of the digest, so a sweep that does not set it keeps the digest it had.
QUIET_SWEEP_DEFAULTS = {"fsdp": ["none"], "fp8_param_gather": [False],
                        "overlap_grad_reduce": [False], "overlap_param_gather": [False], "ddp_bucket_size": None,
                        "vpp": [1], "pipeline_layout": None}


def config_digest(config: Mapping) -> str:
    """The digest of a validated config: equal configs, equal digests (key order,
    ``EXECUTION_KEYS`` and ``QUIET_SWEEP_DEFAULTS`` at their defaults aside)."""
    kept = {k: v for k, v in config.items() if k not in EXECUTION_KEYS}
    return sha256_text(canonical_json(without_quiet_defaults(kept)))


def without_quiet_defaults(config: dict) -> dict:
    """``config`` without the ``QUIET_SWEEP_DEFAULTS`` at their defaults."""
    if isinstance(config.get("sweep"), Mapping):
        config = {**config, "sweep": {k: v for k, v in config["sweep"].items()
                                      if not (k in QUIET_SWEEP_DEFAULTS and v == QUIET_SWEEP_DEFAULTS[k])}}
    return config


def check_external(config: Mapping, points: Iterable) -> dict[str, External | dict[str, External]]:
    """Every external input the sweep's ``points`` use, checked and checksummed: each stage's
    contract checks its own (``stages.check_external``).

    Returns config key -> External; for ``aiob.file`` (one file per AIOB profile), profile
    key -> External. Raises ConfigError naming the key and the path of the first missing
    input (all missing AIOB files at once), before any job runs.
    """
    from . import stages

    return stages.check_external(config, points)


@dataclass(frozen=True)
class Run:
    """One run of a sweep: what made its results (``results/run.json``)."""

    config: dict
    inputs: Mapping[str, External | Mapping[str, External]] = field(default_factory=dict)
    config_files: tuple[str, ...] = ()
    commsweep: str = __version__
    # The run's ``--config KEY=VALUE`` overrides, as given: the command that makes its
    # report needs them too (``report_command``).
    overrides: tuple[str, ...] = ()

    @property
    def config_digest(self) -> str:
        return config_digest(self.config)

    def _inputs_record(self) -> dict:
        out = {}
        for key, value in sorted(self.inputs.items()):
            if isinstance(value, External):
                out[key] = value.record()
            else:
                out[key] = {name: ext.record() for name, ext in sorted(value.items())}
        return out

    @property
    def id(self) -> str:
        """Short name of the run: equal for equal version, config and inputs' content."""
        digest = sha256_text(canonical_json(
            {"commsweep": self.commsweep, "config": self.config_digest, "inputs": self._inputs_record()}))
        return digest.removeprefix("sha256:")[:12]

    def record(self) -> str:
        """``results/run.json``: the run's name and everything it was made from."""
        return json.dumps({
            "run": self.id,
            "commsweep": self.commsweep,
            "config_digest": self.config_digest,
            "config_files": list(self.config_files),
            "config_overrides": list(self.overrides),
            "external_inputs": self._inputs_record(),
            "config": without_quiet_defaults({k: v for k, v in self.config.items() if k not in PLACE_KEYS}),
        }, indent=2, sort_keys=True, default=str) + "\n"

    def job_provenance(self, *keys: str, profile: str | None = None) -> list[str]:
        """A job's ``params.provenance``: commsweep's version and the checksums of the external
        inputs ``keys`` it reads (``aiob.file``: that of ``profile``), as KEY=VALUE words."""
        words = [f"commsweep={self.commsweep}"]
        for key in keys:
            value = self.inputs.get(key)
            if isinstance(value, Mapping):
                value = value.get(profile)
            if value is not None:
                words.append(f"{key}={value.digest}")
        return words


def read_record(path: str | Path) -> dict:
    """A ``results/run.json``, as written by ``Run.record``."""
    from ..base.errors import InputError

    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(f"not a run record ({err.msg})", file=path, line=err.lineno) from None
    if not isinstance(record, dict) or not isinstance(record.get("run"), str):
        raise InputError("not a run record (no run name)", file=path, line=1)
    return record


def report_command(config_files: Iterable[str], overrides: Iterable[str] = (), report: str = "results/report.html") -> str:
    """The command that makes the HTML report of a run of these config files and ``--config``
    overrides (a run record's ``config_files`` and ``config_overrides``): ``make report`` for
    one config file as it is; Snakemake's own command, which takes both, otherwise."""
    import shlex

    files, overrides = list(config_files), list(overrides)
    if len(files) == 1 and not overrides:
        return f"make report CONFIG={shlex.quote(files[0])}"
    words = [".venv/bin/snakemake", "--cores", "2"]
    if files:
        words += ["--configfile", *files]
    if overrides:
        words += ["--config", *overrides]
    return shlex.join([*words, "--report", report])


def relative_to_cwd(path: str | Path) -> str:
    """``path`` relative to the working directory when inside it (results move with their folder)."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def stale_outputs(layout, points: Iterable, *, backend: str | None = None, traces: Iterable[str] = ()) -> list[str]:
    """Folders and files of the results layout that belong to no point of this sweep.

    They are left from an earlier sweep: nothing of this run reads them (its steps read the
    declared files of its own points), and the check lists them so that nobody takes them
    for part of this run. ``backend``: the AIOB backend in use (profiles of another are stale).
    """
    points = list(points)
    keep = {
        layout.points_dir(): {p.point_key for p in points},
        layout.workloads_dir(): {p.workload_key for p in points},
    }
    found: list[str] = []
    for folder, wanted in keep.items():
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [f"{folder}/{name}" for name in names if name not in wanted and not name.startswith(".")]
    profiles = {p.profile_key for p in points if p.aiob}
    aiob_root = Path(layout.profile_dir("x")).parent
    if aiob_root.is_dir():
        for folder in sorted(aiob_root.iterdir()):
            if folder.name != backend:
                found.append(f"{folder}")
                continue
            stale = sorted({_stem(f.name) for f in folder.iterdir() if not f.name.startswith(".")} - profiles)
            found += [f"{folder}/{key}.*" for key in stale]
    traces_dir = Path(layout.trace("x")).parent
    if traces_dir.is_dir():
        # A trace is named <key>, or <release>/<key> (megatron_core): a release's folder
        # not traced by this sweep is stale whole.
        wanted_traces = set(traces)
        releases = {t.partition("/")[0] for t in wanted_traces if "/" in t}
        names: set[str] = set()
        for entry in sorted(traces_dir.iterdir()):
            if entry.name.startswith("."):
                continue
            if not entry.is_dir():
                names.add(_stem(entry.name))
            elif entry.name in releases:
                names |= {f"{entry.name}/{_stem(f.name)}" for f in entry.iterdir() if not f.name.startswith(".")}
            else:
                found.append(f"{entry}")
        found += [f"{traces_dir}/{key}.*" for key in sorted(names - wanted_traces)]
    return found


def _stem(name: str) -> str:
    """A profile's or trace's key from one of its file names (keys may hold dots)."""
    for suffix in (".compare.csv", ".csv", ".txt", ".status"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
