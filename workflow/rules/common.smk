# Sweep points and input functions shared by the rules.

import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from commsweep import sweep
from commsweep.arguments import to_commsweep_argv
from commsweep.errors import CommsweepError
from commsweep.trace.scale import pipeline_dp, trace_setups

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
    trace=r"[^/.]+",


# reference: measured traces real megatron-core once per model family, TP, PP and SP.
TRACES = trace_setups([p.setup for p in POINTS]) if config["reference"] == "measured" else {}


def final_outputs():
    """Everything `rule all` asks for."""
    return [
        f"{RESULTS}/summary.csv",
        f"{RESULTS}/plots/volume_by_tp.png",
    ] + trace_outputs()


def trace_outputs():
    return [f"{RESULTS}/traces/{key}{suffix}" for key in sorted(TRACES) for suffix in (".csv", ".compare.csv")]


def trace_setup(wildcards):
    try:
        return TRACES[wildcards.trace]
    except KeyError:
        raise WorkflowError(f"{wildcards.trace} is not a trace of this sweep (reference: measured)") from None


def trace_args(wildcards):
    """`commsweep trace` arguments: one point of the family, scaled down by the command."""
    setup = trace_setup(wildcards)
    return shlex.join(to_commsweep_argv(setup) + ["--scaled", f"--scaled_dp={pipeline_dp(setup)}"])


def trace_processes(wildcards):
    setup = trace_setup(wildcards)
    return setup.tp * setup.pp * pipeline_dp(setup)


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
    if point.aiob:
        argv += ["--aiob_enable", f"--comp_filepath={profile_path(point)}"]
    return shlex.join(argv)


def all_volumes(wildcards):
    return [f"{RESULTS}/workloads/{w}/volumes.csv" for w in WORKLOADS]
