# Sweep points and input functions shared by the rules.

import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from commsweep import status, sweep
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
# Points with aiob on, by AIOB profile: points sharing a key share one profile.
POINT_BY_PROFILE = {p.profile_key: p for p in POINTS if p.aiob}


wildcard_constraints:
    workload=r"[^/]+",
    point=r"[^/]+",
    profile=r"[^/]+",
    trace=r"([0-9]+(\.[0-9]+){1,3}/)?[^/.]+",


# reference: measured traces real megatron-core once per model family, TP, PP and SP,
# and per release of megatron_core when it lists some (else the installed release).
TRACES = trace_setups([p.setup for p in POINTS]) if config["reference"] == "measured" else {}
RELEASES = config["megatron_core"] if TRACES else []


def final_outputs():
    """Everything `rule all` asks for."""
    return [
        f"{RESULTS}/summary.csv",
        f"{RESULTS}/plots/volume_by_tp.png",
        *audit_outputs(),
        *answer_outputs(),
    ] + trace_outputs() + moe_outputs()


def moe_outputs():
    """The MoE figure (moe.smk), for a sweep with an MoE point."""
    return [f"{RESULTS}/plots/volume_by_group.png"] if any(p.setup.model.is_moe for p in POINTS) else []


def answer_outputs():
    """The answer first (workflow/rules/answer.smk): the difference by cause and the landing page."""
    return [
        f"{RESULTS}/difference_by_cause.csv",
        f"{RESULTS}/plots/difference_by_cause.png",
        f"{RESULTS}/plots/exposed_tp_by_overlap.png",
        f"{RESULTS}/answer.md",
        f"{RESULTS}/answer.rst",
    ]


def trace_outputs():
    if not TRACES:
        return []
    traces = [f"{RESULTS}/traces/{key}{suffix}" for key in trace_names() for suffix in (".csv", ".compare.csv")]
    versions = [f"{RESULTS}/trace_versions.csv", f"{RESULTS}/trace_versions.txt"] if RELEASES else []
    return traces + [f"{RESULTS}/trace_check.csv"] + versions


def trace_names():
    """Each trace's name below results/traces: <key>, or <release>/<key> per release."""
    keys = sorted(TRACES)
    return [f"{release}/{key}" for release in RELEASES for key in keys] if RELEASES else keys


def trace_setup(wildcards):
    try:
        return TRACES[wildcards.trace.rpartition("/")[2]]
    except KeyError:
        raise WorkflowError(f"{wildcards.trace} is not a trace of this sweep (reference: measured)") from None


def trace_args(wildcards):
    """`commsweep trace` arguments: one point of the family, scaled down by the command,
    run with the release the trace's name starts with (<release>/<key>), if any."""
    setup = trace_setup(wildcards)
    release = wildcards.trace.rpartition("/")[0]
    return shlex.join(to_commsweep_argv(setup) + ["--scaled", f"--scaled-dp={pipeline_dp(setup)}"]
                      + (["--megatron-core", release] if release else []))


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


def profile_status(point):
    return profile_path(point).removesuffix(".txt") + ".status"


def workload_inputs(wildcards):
    """The profile of a point with aiob on; ``after``: status files the job waits on."""
    point = workload_point(wildcards)
    if point.aiob:
        return {"profile": profile_path(point), "after": [profile_status(point)]}
    return {"after": []}


def workload_status(point):
    return f"{RESULTS}/workloads/{point.workload_key}/workload.status"


def workload_args(wildcards):
    """The `commsweep generate` arguments of a workload: its setup and schedule."""
    point = workload_point(wildcards)
    argv = to_commsweep_argv(point.setup) + ["--schedule", point.schedule]
    if point.schedule == "megatron":
        argv += ["--pp-stage", config["generator"]["megatron_pp_stage"]]
    if point.schedule == "aicb" and config["generator"].get("aicb_root"):
        # The user's AICB writes the file instead of the emulation (aicb_runner.py).
        argv += ["--aicb-root", config["generator"]["aicb_root"]]
    return shlex.join(argv)


def workload_profile_args(wildcards, input):
    """`--aiob_enable --comp_filepath=PROFILE` with aiob on, the profile named by the job's
    input (a local copy where a storage plugin stands in for a shared filesystem)."""
    if not workload_point(wildcards).aiob:
        return ""
    return shlex.join(["--aiob_enable", f"--comp_filepath={input.profile}"])


def all_volumes(wildcards):
    return [f"{RESULTS}/workloads/{w}/volumes.csv" for w in WORKLOADS]


def profile_point(wildcards):
    try:
        return POINT_BY_PROFILE[wildcards.profile]
    except KeyError:
        raise WorkflowError(f"{wildcards.profile} is not an AIOB profile of this sweep") from None


def profile_args(wildcards):
    """The `commsweep profile` arguments of a profile: the shard of its points and the GPU."""
    from commsweep.aiob.backends import profile_setup

    point = profile_point(wildcards)
    return shlex.join(to_commsweep_argv(profile_setup(point.setup)) + ["--gpu", point.gpu])


def profile_user_file(wildcards):
    """The file backend's input: `aiob.file`, with `{profile}` replaced by the profile key."""
    from commsweep.aiob.backends import user_file

    return user_file(config["aiob"]["file"], profile_point(wildcards).profile_key)

def point_of(wildcards):
    try:
        return POINT_BY_KEY[wildcards.point]
    except KeyError:
        raise WorkflowError(f"{wildcards.point} is not a point of this sweep") from None


def simulator_ratio_dir():
    """The ratio tables the simulate rule uses (None: the engine's default)."""
    from commsweep.simulate.run import ratio_dir_for

    return ratio_dir_for(config["simulator"]["ratio_dir"], config["simulator"]["root"])


def simulate_inputs(wildcards):
    point = point_of(wildcards)
    inputs = {"workload": f"{RESULTS}/workloads/{point.workload_key}/workload.txt", "after": [workload_status(point)]}
    ratio_dir = simulator_ratio_dir()
    if ratio_dir:
        inputs["ratios"] = [os.path.join(ratio_dir, f"{t}_ratio.csv") for t in ("nvlink", "nic", "ata")]
    return inputs


def network_flags(net):
    """SimAI's four network flags of a network."""
    return ["-g_p_s", str(net.gpus_per_server), "-n_p_s", str(net.nics_per_server),
            "-nv", str(net.nvlink_gbps), "-nic", str(net.nic_gbps)]


def simulate_args(wildcards):
    """`commsweep simulate` flags of a point: SimAI's network flags and the simulator config."""
    point = point_of(wildcards)
    sim = config["simulator"]
    argv = ["-g", str(point.world_size), *network_flags(point.net), "-r", f"{point.point_key}-"]
    for name, value in sim["overlap"].items():
        if name == "tp" and point.tp_overlap is not None:  # the sweep's tp_overlap axis
            value = point.tp_overlap
        argv += [f"-{name}_o", str(value)]
    argv += ["--simai-bugs", sim["simai_bugs"], "--backend", sim["backend"]]
    if sim["root"]:
        argv += ["--simai-root", sim["root"]]
    ratio_dir = simulator_ratio_dir()
    if ratio_dir:
        argv += ["--ratio-dir", ratio_dir]
    return shlex.join(argv)


def all_simulations(wildcards):
    """What the summary reads of each simulation: its times file (never the per-row files)."""
    return [f"{RESULTS}/points/{p}/times.csv" for p in sorted(POINT_BY_KEY)]


# -- audit and comparison (workflow/rules/audit.smk) -------------------------------------

from commsweep.analysis.causes import megatron_partners as _megatron_partners
from commsweep.workload import megatron as _megatron

# Points the Megatron schedule can describe (dense models): they get an audit.
AUDITED = [p for p in POINTS if not _megatron.unsupported(p.setup)]


def audit_outputs():
    out = [
        f"{RESULTS}/findings.csv",
        f"{RESULTS}/comparison.csv",
        f"{RESULTS}/verdicts.csv",
        f"{RESULTS}/findings_by_kind.csv",
        f"{RESULTS}/plots/tp_bytes_by_phase.png",
        f"{RESULTS}/plots/exposed_by_group.png",
        f"{RESULTS}/plots/audit_by_kind.png",
    ]
    if AUDITED:
        out.append(f"{RESULTS}/plots/timeline.png")
    return out


def cause_points():
    """The audited AICB points, and the Megatron point each is compared with."""
    rows = {p.point_key: {k: str(v) for k, v in p.row().items()} for p in POINTS}
    audited = {p.point_key for p in AUDITED}
    partners = _megatron_partners(list(rows.values()))
    return {p: partners.get(p) for p in sorted(audited) if rows[p]["schedule"] == "aicb"}


def cause_inputs(wildcards):
    """What `commsweep causes` reads: the AICB points' audits, both sides' simulations."""
    pairs = cause_points()
    audits = [f"{RESULTS}/points/{p}/audit.csv" for p in pairs]
    simulated = sorted(set(pairs) | {m for m in pairs.values() if m})
    simulations = [f"{RESULTS}/points/{p}/{name}" for p in simulated for name in ("collectives.csv", "times.csv")]
    return {"audits": audits, "simulations": simulations}


def network_args(point):
    """SimAI's network flags of a point, and the ratio tables the simulate rule uses."""
    argv = network_flags(point.net)
    if simulator_ratio_dir():
        argv += ["--ratio-dir", simulator_ratio_dir()]
    return argv


def point_args(point):
    """The point's setup as commsweep arguments, and the pipeline stage its workload holds."""
    return to_commsweep_argv(point.setup) + ["--pp-stage", config["generator"]["megatron_pp_stage"]]


def audit_inputs(wildcards):
    point = point_of(wildcards)
    return {"workload": f"{RESULTS}/workloads/{point.workload_key}/workload.txt", "after": [workload_status(point)]}


def audit_args(wildcards):
    point = point_of(wildcards)
    return shlex.join(point_args(point) + network_args(point))


def all_audits(wildcards):
    return [f"{RESULTS}/points/{p.point_key}/audit.csv" for p in AUDITED]


def timeline_point():
    """The point the timeline draws: analysis.timeline_point, else an AICB point (AIOB path first) with TP > 1."""
    key = (config.get("analysis") or {}).get("timeline_point")
    if key is not None:
        if key not in POINT_BY_KEY:
            raise WorkflowError(f"analysis.timeline_point: {key!r} is not a point of this sweep "
                                f"(see the point column of {RESULTS}/sweep.csv)")
        point = POINT_BY_KEY[key]
        if point not in AUDITED:
            raise WorkflowError(f"analysis.timeline_point: {key!r} has no audit (the Megatron schedule "
                                "covers dense models only)")
        return point
    # An AICB point with compute times shows the audit beside a realistic iteration.
    for wanted in (lambda p: p.schedule == "aicb" and p.aiob and p.tp > 1, lambda p: p.schedule == "aicb" and p.tp > 1,
                   lambda p: p.tp > 1, lambda p: True):
        chosen = [p for p in AUDITED if wanted(p)]
        if chosen:
            return chosen[0]


def timeline_inputs(wildcards):
    point = timeline_point()
    return {
        "workload": f"{RESULTS}/workloads/{point.workload_key}/workload.txt",
        "simulation": f"{RESULTS}/points/{point.point_key}/EndToEnd.csv",
        "audit": f"{RESULTS}/points/{point.point_key}/audit.csv",
    }


def timeline_args(wildcards):
    point = timeline_point()
    return shlex.join(point_args(point) + ["--title", point.point_key])


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
    out = [f"{RESULTS}/workloads/{w}/{stage}.status" for w in WORKLOADS for stage in ("workload", "volumes")]
    out += [f"{RESULTS}/points/{p}/simulate.status" for p in sorted(POINT_BY_KEY)]
    out += [f"{RESULTS}/points/{p.point_key}/audit.status" for p in AUDITED]
    return out
