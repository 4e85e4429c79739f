# Sweep points and input functions shared by the rules.

import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from commsweep import status, sweep
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
    """The profile of a point with aiob on; ``after``: status files the job waits on."""
    point = workload_point(wildcards)
    # When the AIOB rule is guarded, add its status file to "after" (see guarded()).
    return {"profile": profile_path(point), "after": []} if point.aiob else {"after": []}


def workload_args(wildcards):
    """The `commsweep generate` arguments of a workload: its setup and schedule."""
    point = workload_point(wildcards)
    argv = to_commsweep_argv(point.setup) + ["--schedule", point.schedule]
    if point.schedule == "megatron":
        argv += ["--pp_stage", config["generator"]["megatron_pp_stage"]]
    return shlex.join(argv)


def workload_profile_args(wildcards, input):
    """`--aiob_enable --comp_filepath=PROFILE` with aiob on, the profile named by the job's
    input (a local copy where a storage plugin stands in for a shared filesystem)."""
    if not workload_point(wildcards).aiob:
        return ""
    return shlex.join(["--aiob_enable", f"--comp_filepath={input.profile}"])


def all_volumes(wildcards):
    return [f"{RESULTS}/workloads/{w}/volumes.csv" for w in WORKLOADS]


# -- one bad point never loses the others ------------------------------------------------
#
# Every per-point rule (one job per point, workload or profile) runs its command through
# guarded(): the job then always succeeds for Snakemake and writes `output.status` beside
# its outputs, saying ok or the error. A failed job leaves one-line markers in place of
# its outputs, and the jobs after it (those listing its status file in `input.after`)
# record the same failure without running. The summary lists failed points with their
# error; `rule check` runs last and fails the run if any point failed. `params.attempt`
# grows after a failure, so the next run retries exactly the failed jobs (Snakemake's
# params rerun trigger). The logic lives in commsweep.status.
#
# The pattern for a per-point rule (simulate, audit, AIOB profiling ...):
#
#     rule simulate:
#         input:
#             workload=f"{RESULTS}/workloads/{{workload}}/workload.txt",
#             after=f"{RESULTS}/workloads/{{workload}}/workload.status",   # upstream statuses
#         output:
#             times=f"{RESULTS}/points/{{point}}/times.csv",
#             status=f"{RESULTS}/points/{{point}}/simulate.status",        # <stage>.status
#         params:
#             attempt=attempt(f"{RESULTS}/points/{{point}}/simulate.status"),  # = output.status
#         log: ...
#         shell:
#             guarded("simulate {input.workload} ... -o {output.times}")
#
# Rules:
# * `input.after` lists the status files of the guarded jobs this one reads (a list,
#   possibly empty: `after=[]`);
# * `output.status` lives in the workload's folder (results/workloads/<workload>/) or the
#   point's (results/points/<point>/), where the summary and the check look; a per-profile
#   job keeps it beside the profile, and the workload rule lists it in `input.after`;
# * the leaf stages' status files are inputs of the summary: add them in all_status();
# * the command is a `commsweep` subcommand (guard runs it in-process); it must raise
#   (CommsweepError for bad input) rather than write partial outputs.
#
# Resources: every rule declares mem_mb, runtime (minutes) and threads; the cluster
# profiles turn them into the job's request (workflow/profiles/slurm). A rule that needs
# a GPU declares `gpu` only when it will use one, e.g. for torch AIOB profiling:
#
#         resources:
#             mem_mb=16000,
#             runtime=30,
#             gpu=lambda wildcards: 1 if <the AIOB backend runs on CUDA> else 0,
#
# (Slurm: --gpus=1, gpu_model via the profile's set-resources; Kubernetes: nvidia.com/gpu
# with gpu_manufacturer=nvidia; a local run ignores it unless --resources gpu=N is given.)


def guarded(command):
    """The shell command of a per-point rule: `commsweep COMMAND` run by `commsweep guard`."""
    return (
        "commsweep guard --status {output.status} --outputs {output} --after {input.after}"
        " --attempt {params.attempt} -- " + command + " > {log} 2>&1"
    )


def attempt(status_file):
    """`params.attempt` of a guarded rule whose `output.status` is `status_file`.

    One more than the job's last failed run, so Snakemake's params trigger reruns it. (A
    function of the wildcards alone: Snakemake ignores params derived from the outputs.)
    """
    return lambda wildcards: status.next_attempt(status_file.format(**dict(wildcards.items())))


def all_status(wildcards):
    """The status files of every per-point job the summary must wait for (and read)."""
    return [f"{RESULTS}/workloads/{w}/{stage}.status" for w in WORKLOADS for stage in ("workload", "volumes")]
