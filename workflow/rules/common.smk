# Sweep points and input functions shared by the rules.

import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from commsweep import sweep
from commsweep.arguments import to_commsweep_argv
from commsweep.errors import CommsweepError

RESULTS = "results"

# Shell rules call `commsweep`: use the one installed beside the Python running Snakemake,
# also when its environment is not activated (e.g. `.venv/bin/snakemake`).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

try:
    POINTS, INVALID = sweep.points_from_config(config)
except CommsweepError as err:
    raise WorkflowError(f"invalid sweep configuration: {err}") from None

POINT_BY_KEY = {p.point_key: p for p in POINTS}
POINT_BY_WORKLOAD = {p.workload_key: p for p in POINTS}
WORKLOADS = sorted(POINT_BY_WORKLOAD)


wildcard_constraints:
    workload=r"[^/]+",
    point=r"[^/]+",
    profile=r"[^/]+",


def final_outputs():
    """Everything `rule all` asks for."""
    return [
        f"{RESULTS}/summary.csv",
        f"{RESULTS}/plots/volume_by_tp.png",
    ]


def workload_point(wildcards):
    try:
        return POINT_BY_WORKLOAD[wildcards.workload]
    except KeyError:
        raise WorkflowError(f"{wildcards.workload} is not a workload of this sweep") from None


def profile_path(point):
    """The AIOB profile of a point with aiob on (made by the aiob rule)."""
    return f"{RESULTS}/aiob/{config['aiob']['backend']}/{point.profile_key}.txt"


def workload_inputs(wildcards):
    point = workload_point(wildcards)
    return {"profile": profile_path(point)} if point.aiob else {}


def workload_args(wildcards):
    """The `commsweep generate` arguments of a workload: its setup, schedule and profile."""
    point = workload_point(wildcards)
    argv = to_commsweep_argv(point.setup) + ["--schedule", point.schedule]
    if point.schedule == "megatron":
        argv += ["--pp_stage", config["generator"]["megatron_pp_stage"]]
    if point.schedule == "aicb" and config["generator"].get("aicb_root"):
        # The user's AICB writes the file instead of the emulation (aicb_runner.py).
        argv += ["--aicb-root", config["generator"]["aicb_root"]]
    if point.aiob:
        argv += ["--aiob_enable", f"--comp_filepath={profile_path(point)}"]
    return shlex.join(argv)


def all_volumes(wildcards):
    return [f"{RESULTS}/workloads/{w}/volumes.csv" for w in WORKLOADS]
