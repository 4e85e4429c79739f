# commsweep: sweep LLM-training communication through workload generation, SimAI's
# analytical model and an audit against Megatron's real schedule.
#
#   snakemake --cores 2                       # the default sweep (config/config.yaml)
#   snakemake --cores 2 --configfile my.yaml  # another sweep
#
# Rules are thin: each calls the `commsweep` command line (the per-point stages in batches
# of points, one process each: commsweep.orchestration.batch), whose logic lives in src/commsweep/ and is
# tested there. The settings of a run (keep-going, rerun-incomplete,
# ...) are in profiles/default, which Snakemake loads by itself.

import os

from snakemake.utils import min_version

min_version("9.27")


# The default sweep; a sweep given with --configfile replaces it (rather than being merged
# into it key by key), so the keys it leaves out take the schema's defaults, as
# `commsweep sweep` reads it.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# The image every rule runs in under --software-deployment-method apptainer: one built from
# workflow/envs/Dockerfile, as a local file or a registry's URI in COMMSWEEP_CONTAINER
# (docs/cluster.md). With conda, each rule's environment is workflow/envs/commsweep.yaml.
container: os.environ.get("COMMSWEEP_CONTAINER", "commsweep.sif")


# The report's front page: the sweep's answer (results/answer.rst, made by rule answer).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/batch.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/trace.smk"
include: "workflow/rules/answer.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/packet.smk"
include: "workflow/rules/astra.smk"


rule all:
    input:
        final_outputs(),
        L.verdict(),
    default_target: True


onstart:
    pipeline.on_start(workflow, LOCAL)


onsuccess:
    pipeline.on_success(LOCAL)


onerror:
    pipeline.on_error()
