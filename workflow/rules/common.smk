# Sweep points and the rules' input functions. Every path comes from commsweep.base.paths (the
# results layout), every check and record from the package: this file only connects them.

import os
import shlex
from pathlib import Path

from snakemake.exceptions import WorkflowError

from commsweep.analysis import timeline
from commsweep.analysis.figures import names as figure_names
from commsweep.base import paths, status
from commsweep.base.errors import CommsweepError
from commsweep.orchestration import batch, exits, interrupts, pipeline, steps, storage, sweep
from commsweep.setup.arguments import to_commsweep_argv
from commsweep.simulate.astra import sweep as astra_sweep
from commsweep.trace.scale import pipeline_dp, trace_setups

# Ctrl-C: one line, no traceback, wherever it lands (commsweep.orchestration.interrupts): the
# jobs this process starts hold it back until their code can take it.
if workflow.is_main_process:
    interrupts.begin("commsweep: interrupted while Snakemake read the workflow; nothing was changed")

# This process ends without a last garbage collection over the objects of Snakemake's modules
# (commsweep.orchestration.exits: most of a second after the run, for nothing).
exits.quick()

# The conda environment of every rule, for --software-deployment-method conda (the container
# image is the Snakefile's): this package and its requirements, installed by pip from the
# workflow's folder (COMMSWEEP_SOURCE). See docs/cluster.md.
COMMSWEEP_ENV = "../envs/commsweep.yaml"
os.environ.setdefault("COMMSWEEP_SOURCE", str(Path(workflow.basedir)))
# Without a shared filesystem (a default storage provider: Kubernetes, a batch service), the
# folder that holds this node's copies of the storage's files (commsweep.orchestration.storage), else "".
# Every job runs from it; this process reads what it knows of earlier runs there (LOCAL).
try:
    JOB_ROOT = storage.job_root(workflow)
except ValueError as err:
    raise WorkflowError(str(err)) from None

# The sweep's config as commsweep reads it, and its results folder (the config's `results`,
# `--config results=DIR`): every path below it comes from the layout (L).
try:
    RESULTS = pipeline.load_config(workflow, config)
except CommsweepError as err:
    raise WorkflowError(str(err)) from None
L = paths.Layout(RESULTS)
LOCAL = paths.Layout(os.path.join(JOB_ROOT, RESULTS))

try:
    POINTS, INVALID = sweep.points_from_config(config)
except CommsweepError as err:
    raise WorkflowError(f"invalid sweep configuration: {err}") from None

POINT_BY_KEY = {p.point_key: p for p in POINTS}
# The megatron-core release the megatron schedule and the audit follow.
MEGATRON_VERSION = sweep.megatron_version(config)
# Points the Megatron schedule can describe: they get an audit (sweep.audited_points).
AUDITED = sweep.audited_points(POINTS, MEGATRON_VERSION)
# Those the timeline can draw: simulated analytically (SimAI_simulator's EndToEnd.csv is another layout).
TIMELINE_POINTS = [p for p in AUDITED if not p.packet]
HAS_MOE = any(p.setup.model.is_moe for p in POINTS)
# Points simulated by SimAI's packet-level simulator (the sweep's simulation axis).
PACKET_POINTS = [p for p in POINTS if p.packet]
# reference: measured traces real megatron-core once per model family, TP, PP and SP,
# and per release of megatron_core when it lists some (else the installed release).
TRACES = trace_setups([p.setup for p in POINTS]) if config["reference"] == "measured" else {}
RELEASES = config["megatron_core"] if TRACES else []
# ASTRA-sim beside SimAI (simulator.astra.root; workflow/rules/astra.smk).
ASTRA = astra_sweep.enabled(config)


def trace_names():
    """Each trace's name below results/traces: <key>, or <release>/<key> per release."""
    keys = sorted(TRACES)
    return [f"{release}/{key}" for release in RELEASES for key in keys] if RELEASES else keys


# The run: external inputs checked (a missing one stops it here) and checksummed, its name,
# and the outputs of points not in this sweep (ignored, listed by the check).
try:
    RUN, IGNORED = pipeline.prepare(workflow, config, POINTS, L, traces=trace_names(), root=JOB_ROOT)
except CommsweepError as err:
    raise WorkflowError(str(err)) from None

# The per-point work (AIOB profiles, workloads, volumes, simulations, audits), in batches of
# points: one job each (workflow/rules/batch.smk, commsweep.orchestration.batch).
BATCHES = batch.plan(POINTS, config, L, RUN, audited=AUDITED)
BATCH_OF_POINT = batch.batch_of_points(BATCHES)
pipeline.announce(workflow, POINTS, BATCHES)


wildcard_constraints:
    batch=r"[^/]+",
    trace=r"([0-9]+(\.[0-9]+){1,3}/)?[^/.]+",


def final_outputs():
    """Everything `rule all` asks for (the check's inputs)."""
    return [L.run_record(), L.summary(), *audit_outputs(), *answer_outputs(), *figure_outputs(), *trace_outputs(),
            *([L.packet_comparison()] if PACKET_POINTS else []),
            *([L.astra_vs_simai(), L.astra_difference()] if ASTRA else [])]


# The sweep-wide steps of this sweep (commsweep.orchestration.steps: the one table of them).
STEPS = steps.of_sweep({"audited": bool(TIMELINE_POINTS), "moe": HAS_MOE, "packet": bool(PACKET_POINTS),
                        "traces": bool(TRACES), "releases": bool(RELEASES), "astra": ASTRA},
                       tp_overlap=config["simulator"]["overlap"]["tp"])


def step_statuses():
    """The status files of the sweep-wide steps (their outcome, read by the check)."""
    return [L.step_status(step) for step in STEPS]


# -- the batches' input functions ---------------------------------------------------------


def batch_of(wildcards):
    try:
        return BATCHES[wildcards.batch]
    except KeyError:
        raise WorkflowError(f"{wildcards.batch} is not a batch of this sweep") from None


def batch_attempt(wildcards):
    """`params.attempt` of a batch: grows after a failed task or with an output missing, so
    Snakemake reruns the batch, which redoes those tasks (commsweep.orchestration.batch.attempt)."""
    return batch.attempt(batch_of(wildcards), LOCAL.batch_manifest(wildcards.batch))


def batch_rule_name(name):
    """The rule of one batch, without a shared filesystem (workflow/rules/batch.smk)."""
    return f"batch_{name.replace('-', '_')}"


def batch_resources(name, batch_name=None):
    """A batch's resource `name` (Batch.resources: memory, run time, a GPU or threads for a torch
    profile). ``batch_name``: of that batch (its own rule), else of the job's ``{batch}``."""

    def resource(wildcards):
        b = BATCHES[batch_name] if batch_name is not None else batch_of(wildcards)
        return b.resources(config)[name]

    return resource


# -- what the sweep-wide steps read --------------------------------------------------------


def all_batches(wildcards):
    """Every batch's manifest: what the sweep-wide steps read (the points' files it lists)."""
    return [L.batch_manifest(name) for name in sorted(BATCHES)]


def point_inputs(*kinds):
    """The points' files of these kinds (``batch.FILE_KINDS``) that a sweep-wide step reads, as
    inputs named ``points_KIND``, in the manifests' order: declared only without a shared
    filesystem, where a job gets its declared inputs alone (with one, the manifests stand for
    them: Snakemake then tracks one file per batch, not ten per point)."""
    return storage_inputs(**{f"points_{kind}": [f for name in sorted(BATCHES) for f in BATCHES[name].files[kind]]
                             for kind in kinds})


def storage_inputs(**files):
    """Named inputs declared only without a shared filesystem: files a step reads that its
    other inputs stand for (a manifest, a status) when the filesystem is shared."""
    return files if JOB_ROOT else {}


def audit_outputs():
    return [L.findings(), L.comparison(), L.verdicts(), L.findings_by_kind()]


def timeline_point():
    """The point the timeline draws (sweep.timeline_point: analysis.timeline_point, else an AICB point with TP > 1)."""
    try:
        return sweep.timeline_point(POINTS, TIMELINE_POINTS, config, table=L.sweep_table())
    except CommsweepError as err:
        raise WorkflowError(str(err)) from None


def timeline_batch(wildcards):
    """The timeline point's batch manifest (none in a sweep without an audit: no timeline)."""
    return [L.batch_manifest(BATCH_OF_POINT[timeline_point().point_key])] if TIMELINE_POINTS else []


def timeline_files():
    """The timeline point's files (made by its batch, listed in its manifest) and the statuses
    of the tasks that made them (the figure comes after those)."""
    point = timeline_point()
    files = [L.workload(point.workload_key), L.endtoend(point.point_key), L.audit(point.point_key)]
    after = [L.workload_status("workload", point.workload_key), L.point_status("simulate", point.point_key),
             L.point_status("audit", point.point_key)]
    return files, after


def timeline_inputs():
    """Without a shared filesystem, the timeline point's files as inputs (see point_inputs)."""
    if not JOB_ROOT or not TIMELINE_POINTS:
        return {}
    files, after = timeline_files()
    return {"points": [*files, *after]}


# -- the answer first (workflow/rules/answer.smk) -------------------------------------------


def answer_outputs():
    """The difference by cause and the landing page."""
    return [L.difference_by_cause(), L.answer_page(), L.answer_rst()]


# -- the figures (workflow/rules/figures.smk) ----------------------------------------------


# The figures of this sweep by name (results/plots/NAME.png; step plot_NAME), from the table of steps.
FIGURES = {s.figure: s for s in STEPS.values() if s.figure}


def figure_outputs():
    return [L.plot(name) for name in FIGURES]


def timeline_command():
    """The timeline's command and the statuses it comes after."""
    point = timeline_point()
    (workload, simulation, audit), after = timeline_files()
    command = ["timeline", workload, simulation, *batch.point_argv(point, config), "--title", timeline.title(point),
               "--audit", audit]
    return command, after


def guarded_step(step, command, outputs, after, status_output):
    """One step's guarded command in a rule that runs several (`params.commands`, run one after
    the other in the job's process by workflow/scripts/commsweep.py): its own status, outputs,
    the statuses it comes after and its attempt, which is among its words: one more after the
    step failed, so the next run redoes it."""
    attempt_ = status.next_attempt(LOCAL.step_status(step))
    return ["guard", "--status", status_output, "--outputs", *outputs, "--after", *after,
            "--attempt", str(attempt_), "--provenance", "<params.provenance>", "--", *command]


def figure_commands(wildcards):
    """The figures rule's `params.commands`: each figure's guarded command."""
    commands = []
    for name, fig in FIGURES.items():
        command, after = list(fig.command), [L.step_status(step) for step in fig.after]
        if name == figure_names.TIMELINE:
            command, after = timeline_command()
        commands.append(guarded_step(fig.name, [*command, "-o", f"<output.{name}>"], [f"<output.{name}>"], after,
                                     f"<output.{name}_status>"))
    return commands


# The steps the tables job runs (a step's rule, in commsweep.orchestration.steps), in the table's order.
TABLES = [name for name, s in STEPS.items() if s.rule == "tables"]


def table_commands(**commands):
    """The tables rule's `params.commands`: for each of its steps, `commands[step]` (its command
    and the names of its outputs) guarded, after the steps the table says it reads (made
    earlier in the same job), its status `output.<step>_status`."""
    missing = set(TABLES) ^ set(commands)
    if missing:
        raise WorkflowError(f"the tables job's commands of {', '.join(sorted(missing))} do not match the table of steps")

    def params(wildcards):
        return [guarded_step(name, commands[name][0], [f"<output.{o}>" for o in commands[name][1]],
                             [L.step_status(step) for step in STEPS[name].after], f"<output.{name}_status>")
                for name in TABLES]

    return params


# -- ASTRA-sim beside SimAI (workflow/rules/astra.smk) ------------------------------------


def astra_arguments():
    """astra-compare's arguments from simulator.astra (commsweep.simulate.astra.sweep)."""
    return astra_sweep.arguments(config, RESULTS, "<output.table>", "<output.pairs>", L.astra_runs()) if ASTRA else []


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
# Every sweep-wide step but the sweep table, the run record and the check runs its command
# through guarded(): the job then always succeeds for Snakemake and writes `output.status`
# (results/steps/<rule>.status), saying ok or the error. A failed step leaves one-line
# markers in place of its outputs, and the steps after it (those listing its status file in
# `input.after`) are not run, and record that, naming the failed step (status.NOT_RUN). The batches guard each point's
# tasks the same way, in-process (commsweep.orchestration.batch). The summary lists failed points with
# their error; the check runs last, whatever failed, and fails the run if anything did.
# `params.attempt` grows after a failure, so the next run retries exactly the failed steps
# (Snakemake's params rerun trigger); a batch's attempt grows when one of its tasks failed.
# The logic lives in commsweep.base.status; docs/workflow.md shows the pattern of a guarded rule:
#
# * `input.after` lists the status files of the guarded jobs this one reads (a list,
#   possibly empty: `after=[]`);
# * `output.status` is the path of commsweep.base.paths for the step, a row of the table of
#   steps (commsweep.orchestration.steps), which step_statuses() and the cluster groups read;
# * the command is a `commsweep` subcommand (guard runs it in-process); it must raise
#   (CommsweepError for bad input) rather than write partial outputs.
#
# Resources: every rule declares mem_mb, runtime (minutes) and threads, a sweep-wide step's
# from the table of steps (steps.resources); the cluster profiles turn them into the job's
# request (profiles/slurm). A batch asks for a GPU only when it will use one (a torch AIOB
# profile on CUDA, Batch.resources).


def guarded(command, after="{input.after}"):
    """The shell command of a guarded rule: `commsweep COMMAND` run by `commsweep guard`."""
    return (
        f"commsweep guard --status {{output.status}} --outputs {{output}} --after {after}"
        f" --attempt {{params.attempt}} --provenance {{params.provenance}} -- {command} > {{log}} 2>&1"
    )


def guarded_argv(*command):
    """The `params.command` of a guarded rule run by workflow/scripts/commsweep.py (see
    commsweep.orchestration.pipeline.run_rule): for commands whose file lists are too long for a shell."""
    return ["guard", "--status", "<output.status>", "--outputs", "<output>", "--after", "<input.after>",
            "--attempt", "<params.attempt>", "--provenance", "<params.provenance>", "--", *command]


def provenance(*keys):
    """`params.provenance` of a guarded rule: commsweep's version and the checksums of the
    external inputs `keys` its jobs read (a changed one reruns exactly those jobs)."""
    return RUN.job_provenance(*keys)


def attempt(status_file):
    """`params.attempt` of a guarded rule whose `output.status` is `status_file`.

    One more than the job's last failed run, so Snakemake's params trigger reruns it. (A
    function of the wildcards alone: Snakemake ignores params derived from the outputs.)
    """
    return lambda wildcards: status.next_attempt(os.path.join(JOB_ROOT, status_file.format(**dict(wildcards.items()))))
