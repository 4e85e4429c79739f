# Sweep points and the rules' input functions. Every path comes from commsweep.paths (the
# results layout), every check and record from the package: this file only connects them.

import os
import shlex

from snakemake.exceptions import WorkflowError

from commsweep import limits, paths, pipeline, status, sweep
from commsweep.analysis.causes import megatron_partners
from commsweep.arguments import to_commsweep_argv
from commsweep.errors import CommsweepError
from commsweep.trace.scale import pipeline_dp, trace_setups
from commsweep.workload import megatron

L = paths.Layout(paths.RESULTS)

try:
    pipeline.load_config(workflow, config)
except CommsweepError as err:
    raise WorkflowError(str(err)) from None

try:
    POINTS, INVALID = sweep.points_from_config(config)
except CommsweepError as err:
    raise WorkflowError(f"invalid sweep configuration: {err}") from None

POINT_BY_KEY = {p.point_key: p for p in POINTS}
POINT_BY_WORKLOAD = {p.workload_key: p for p in POINTS}
WORKLOADS = sorted(POINT_BY_WORKLOAD)
# Points with aiob on, by AIOB profile: points sharing a key share one profile.
POINT_BY_PROFILE = {p.profile_key: p for p in POINTS if p.aiob}
# The megatron-core release the megatron schedule and the audit follow.
MEGATRON_VERSION = sweep.megatron_version(config)
# Points the Megatron schedule can describe: they get an audit.
AUDITED = [p for p in POINTS if not megatron.unsupported(p.setup, MEGATRON_VERSION)]
HAS_MOE = any(p.setup.model.is_moe for p in POINTS)
# reference: measured traces real megatron-core once per model family, TP, PP and SP,
# and per release of megatron_core when it lists some (else the installed release).
TRACES = trace_setups([p.setup for p in POINTS]) if config["reference"] == "measured" else {}
RELEASES = config["megatron_core"] if TRACES else []


def trace_names():
    """Each trace's name below results/traces: <key>, or <release>/<key> per release."""
    keys = sorted(TRACES)
    return [f"{release}/{key}" for release in RELEASES for key in keys] if RELEASES else keys


# The run: external inputs checked (a missing one stops it here) and checksummed, its name,
# and the outputs of points not in this sweep (ignored, listed by the check).
try:
    RUN, IGNORED = pipeline.prepare(workflow, config, POINTS, L, traces=trace_names())
except CommsweepError as err:
    raise WorkflowError(str(err)) from None


wildcard_constraints:
    workload=r"[^/]+",
    point=r"[^/]+",
    profile=r"[^/]+",
    trace=r"([0-9]+(\.[0-9]+){1,3}/)?[^/.]+",


def final_outputs():
    """Everything `rule all` asks for (the check's inputs)."""
    return [L.run_record(), L.summary(), L.plot("volume_by_tp"), *audit_outputs(), *answer_outputs(),
            *trace_outputs(), *moe_outputs()]


def moe_outputs():
    """The MoE figure (moe.smk), for a sweep with an MoE point."""
    return [L.plot("volume_by_group")] if HAS_MOE else []


def step_statuses():
    """The status files of the sweep-wide steps (their outcome, read by the check)."""
    steps = ["summarize", "compare", "plot_volume_by_tp", "plot_tp_bytes_by_phase", "plot_exposed_by_group",
             "plot_audit_by_kind"]
    if AUDITED:
        steps.append("plot_timeline")
    steps += ["difference_by_cause", "plot_difference_by_cause", "plot_exposed_tp_by_overlap", "answer"]
    if HAS_MOE:
        steps.append("plot_volume_by_group")
    if TRACES:
        steps.append("trace_check")
    if RELEASES:
        steps.append("trace_versions")
    return [L.step_status(step) for step in steps]


# -- the points' input functions ---------------------------------------------------------


def point_of(wildcards):
    try:
        return POINT_BY_KEY[wildcards.point]
    except KeyError:
        raise WorkflowError(f"{wildcards.point} is not a point of this sweep") from None


def workload_point(wildcards):
    try:
        return POINT_BY_WORKLOAD[wildcards.workload]
    except KeyError:
        raise WorkflowError(f"{wildcards.workload} is not a workload of this sweep") from None


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


def generate_inputs(wildcards):
    """The profile of a point with aiob on; ``after``: status files the job waits on."""
    point = workload_point(wildcards)
    if point.aiob:
        backend = config["aiob"]["backend"]
        return {"profile": L.profile(backend, point.profile_key),
                "after": [L.profile_status(backend, point.profile_key)]}
    return {"after": []}


def generate_args(wildcards):
    """The `commsweep generate` arguments of a workload: its setup and schedule."""
    point = workload_point(wildcards)
    argv = to_commsweep_argv(point.setup) + ["--schedule", point.schedule]
    if point.schedule == "megatron":
        argv += ["--pp-stage", config["generator"]["megatron_pp_stage"], "--megatron-version", MEGATRON_VERSION]
    if point.schedule == "aicb" and config["generator"].get("aicb_root"):
        # The user's AICB writes the file instead of the emulation (aicb_runner.py).
        argv += ["--aicb-root", config["generator"]["aicb_root"]]
    return shlex.join(argv)


def generate_profile_args(wildcards, input):
    """`--aiob_enable --comp_filepath=PROFILE` with aiob on, the profile named by the job's
    input (a local copy where a storage plugin stands in for a shared filesystem)."""
    if not workload_point(wildcards).aiob:
        return ""
    return shlex.join(["--aiob_enable", f"--comp_filepath={input.profile}"])


def simulator_ratio_dir():
    """The ratio tables of the simulation (None: the engine's default)."""
    from commsweep.simulate.run import ratio_dir_for

    return ratio_dir_for(config["simulator"]["ratio_dir"], config["simulator"]["root"])


def after_workload(wildcards):
    """A per-point job's inputs: its workload, and the status of the job that made it."""
    workload = point_of(wildcards).workload_key
    return {"workload": L.workload(workload), "after": [L.workload_status("workload", workload)]}


def simulate_inputs(wildcards):
    inputs = after_workload(wildcards)
    ratio_dir = simulator_ratio_dir()
    if ratio_dir:
        inputs["ratios"] = [os.path.join(ratio_dir, f"{t}_ratio.csv") for t in ("nvlink", "nic", "ata")]
    return inputs


def job_memory_mb(wildcards):
    """What a per-workload or per-point job asks a cluster for: the estimate of its peak
    memory from its workload's rows (commsweep.limits), at least 512 MB."""
    point = point_of(wildcards) if "point" in wildcards.keys() else workload_point(wildcards)
    return max(512, limits.job_memory_mb(limits.workload_rows(point.setup)))


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
    argv += ["--simai-bugs", sim["simai_bugs"], "--backend", sim["backend"], "--strict"]
    if sim["root"]:
        argv += ["--simai-root", sim["root"]]
    ratio_dir = simulator_ratio_dir()
    if ratio_dir:
        argv += ["--ratio-dir", ratio_dir]
    return shlex.join(argv)


def network_args(point):
    """SimAI's network flags of a point, and the ratio tables the simulate rule uses."""
    argv = network_flags(point.net)
    if simulator_ratio_dir():
        argv += ["--ratio-dir", simulator_ratio_dir()]
    return argv


def point_args(point):
    """The point's setup as commsweep arguments, and the pipeline stage its workload holds."""
    return to_commsweep_argv(point.setup) + ["--pp-stage", config["generator"]["megatron_pp_stage"]]


def audit_args(wildcards):
    point = point_of(wildcards)
    return shlex.join(point_args(point) + ["--megatron-version", MEGATRON_VERSION] + network_args(point))


# -- what the sweep-wide steps read --------------------------------------------------------


def all_volumes(wildcards):
    return [L.volumes(w) for w in WORKLOADS]


def all_simulations(wildcards):
    """What the summary reads of each simulation: its times file (never the per-row files)."""
    return [L.times(p) for p in sorted(POINT_BY_KEY)]


def all_audits(wildcards):
    return [L.audit(p.point_key) for p in AUDITED]


def all_status(wildcards):
    """The status files of every per-point job the summary and the check read."""
    out = [L.workload_status(stage, w) for w in WORKLOADS for stage in ("workload", "volumes")]
    out += [L.point_status("simulate", p) for p in sorted(POINT_BY_KEY)]
    out += [L.point_status("audit", p.point_key) for p in AUDITED]
    return out


def audit_outputs():
    out = [L.findings(), L.comparison(), L.verdicts(), L.findings_by_kind(),
           L.plot("tp_bytes_by_phase"), L.plot("exposed_by_group"), L.plot("audit_by_kind")]
    if AUDITED:
        out.append(L.plot("timeline"))
    return out


def timeline_point():
    """The point the timeline draws: analysis.timeline_point, else an AICB point (AIOB path first) with TP > 1."""
    key = (config.get("analysis") or {}).get("timeline_point")
    if key is not None:
        if key not in POINT_BY_KEY:
            raise WorkflowError(f"analysis.timeline_point: {key!r} is not a point of this sweep "
                                f"(see the point column of {L.sweep_table()})")
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
        "workload": L.workload(point.workload_key),
        "simulation": L.endtoend(point.point_key),
        "audit": L.audit(point.point_key),
        "after": [L.workload_status("workload", point.workload_key), L.point_status("simulate", point.point_key),
                  L.point_status("audit", point.point_key)],
    }


def timeline_args(wildcards):
    point = timeline_point()
    return shlex.join(point_args(point) + ["--title", point.point_key])


# -- the answer first (workflow/rules/answer.smk) -------------------------------------------


def answer_outputs():
    """The difference by cause and the landing page."""
    return [L.difference_by_cause(), L.plot("difference_by_cause"), L.plot("exposed_tp_by_overlap"),
            L.answer_page(), L.answer_rst()]


def cause_points():
    """The audited AICB points, and the Megatron point each is compared with."""
    rows = {p.point_key: {k: str(v) for k, v in p.row().items()} for p in POINTS}
    audited = {p.point_key for p in AUDITED}
    partners = megatron_partners(list(rows.values()))
    return {p: partners.get(p) for p in sorted(audited) if rows[p]["schedule"] == "aicb"}


def cause_inputs(wildcards):
    """What `commsweep causes` reads: the AICB points' audits, both sides' simulations."""
    pairs = cause_points()
    simulated = sorted(set(pairs) | {m for m in pairs.values() if m})
    return {"audits": [L.audit(p) for p in pairs], "collectives": [L.collectives(p) for p in simulated],
            "times": [L.times(p) for p in simulated]}


# -- measured traces (workflow/rules/trace.smk) --------------------------------------------


def trace_outputs():
    if not TRACES:
        return []
    versions = [L.trace_versions(), L.trace_versions_differences()] if RELEASES else []
    return [L.trace_check(), *versions]


def all_traces(wildcards):
    return [L.trace(name) for name in trace_names()]


def all_trace_comparisons(wildcards):
    return [L.trace_compare(name) for name in trace_names()]


def all_trace_statuses(wildcards):
    return [L.trace_status(name) for name in trace_names()]


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


# -- one bad point (or step) never loses the others ----------------------------------------
#
# Every job but the sweep table, the run record and the check runs its command through
# guarded(): the job then always succeeds for Snakemake and writes `output.status` beside
# its outputs (a sweep-wide step: results/steps/<rule>.status), saying ok or the error. A
# failed job leaves one-line markers in place of its outputs, and the jobs after it (those
# listing its status file in `input.after`) record the same failure without running. The
# summary lists failed points with their error; the check runs last, whatever failed, and
# fails the run if anything did. `params.attempt` grows after a failure, so the next run
# retries exactly the failed jobs (Snakemake's params rerun trigger). The logic lives in
# commsweep.status; docs/workflow.md shows the pattern of a guarded rule:
#
# * `input.after` lists the status files of the guarded jobs this one reads (a list,
#   possibly empty: `after=[]`);
# * `output.status` is the path of commsweep.paths for the stage; the leaf stages' status
#   files are inputs of the summary and the check: add them in all_status();
# * the command is a `commsweep` subcommand (guard runs it in-process); it must raise
#   (CommsweepError for bad input) rather than write partial outputs.
#
# Resources: every rule declares mem_mb, runtime (minutes) and threads; the cluster
# profiles turn them into the job's request (profiles/slurm). A rule that needs a GPU
# declares `gpu` only when it will use one (the torch AIOB rule, see aiob.smk).


def guarded(command):
    """The shell command of a guarded rule: `commsweep COMMAND` run by `commsweep guard`."""
    return (
        "commsweep guard --status {output.status} --outputs {output} --after {input.after}"
        f" --attempt {{params.attempt}} --provenance {{params.provenance}} -- {command} > {{log}} 2>&1"
    )


def guarded_argv(*command):
    """The `params.command` of a guarded rule run by workflow/scripts/commsweep.py (see
    commsweep.pipeline.run_rule): for commands whose file lists are too long for a shell."""
    return ["guard", "--status", "<output.status>", "--outputs", "<output>", "--after", "<input.after>",
            "--attempt", "<params.attempt>", "--provenance", "<params.provenance>", "--", *command]


def provenance(*keys):
    """`params.provenance` of a guarded rule: commsweep's version and the checksums of the
    external inputs `keys` its jobs read (a changed one reruns exactly those jobs)."""
    return RUN.job_provenance(*keys)


def profile_file_provenance(wildcards):
    return RUN.job_provenance("aiob.file", profile=wildcards.profile)


def generate_provenance(wildcards):
    """The user's AICB writes the aicb schedule's workloads when generator.aicb_root is set."""
    return RUN.job_provenance(*(["generator.aicb_root"] if workload_point(wildcards).schedule == "aicb" else []))


def attempt(status_file):
    """`params.attempt` of a guarded rule whose `output.status` is `status_file`.

    One more than the job's last failed run, so Snakemake's params trigger reruns it. (A
    function of the wildcards alone: Snakemake ignores params derived from the outputs.)
    """
    return lambda wildcards: status.next_attempt(status_file.format(**dict(wildcards.items())))
