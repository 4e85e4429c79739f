# The per-point work, in batches of points (commsweep.orchestration.batch): one job per batch runs every
# stage of each of its points in-process (AIOB profile, workload, volumes, simulation,
# audit), each task guarded as `commsweep guard -- COMMAND` would run it, and skips the
# tasks whose outputs are current. Its manifest, written last, lists its points' files:
# the sweep-wide steps read those.
#
# With a shared filesystem, the manifest is the job's only declared output (rule batch, one
# job per {batch}): Snakemake then tracks one file per batch, not ten per point, and leaves
# the points' files of a batch that reruns in place for it to skip the current ones. Without
# one (a default storage provider), the storage carries a job's declared files alone, so
# each batch is a rule of its own (batch_<batch>) that declares every file it writes
# (Batch.outputs); Snakemake removes those before the job, which then redoes all its points.


if not JOB_ROOT:

    rule batch:
        input:
            # Files from outside results/ its tasks read: the user's AIOB files, ratio tables.
            external=lambda wildcards: batch_of(wildcards).inputs,
            # The batches whose outputs it reads (a packet-level point's: its workload's batch).
            upstream=lambda wildcards: [L.batch_manifest(name) for name in batch_of(wildcards).after],
        output:
            manifest=L.batch_manifest(),
        params:
            # Of every task's command and inputs: a changed point (or membership) reruns the
            # batch, which redoes only the tasks that changed.
            digest=lambda wildcards: batch_of(wildcards).digest,
            attempt=batch_attempt,
            # The tasks themselves (an object: not a rerun trigger of its own, the digest is).
            plan=batch_of,
        conda:
            COMMSWEEP_ENV
        log:
            L.log("batch", "{batch}"),
        benchmark:
            L.benchmark("batch", "{batch}")
        resources:
            mem_mb=batch_resources("mem_mb"),
            runtime=batch_resources("runtime"),
            gpu=batch_resources("gpu"),
        threads: batch_resources("threads")
        # Before the sweep-wide jobs ready at the start (the sweep table, then the run record): the
        # batches are the longest road to the tables and figures, and those two fit beside them.
        priority: 2
        script:
            "../scripts/batch.py"

else:
    for _name, _batch in BATCHES.items():

        rule:
            name:
                batch_rule_name(_name)
            input:
                # Read on the node (absolute paths in the image), not from the storage.
                external=[local(f) for f in _batch.inputs],
                # What it reads from other batches (a packet-level point's workload), and their manifests.
                reads=list(_batch.reads),
                upstream=[L.batch_manifest(name) for name in _batch.after],
            output:
                manifest=L.batch_manifest(_name),
                points=_batch.outputs(),
            params:
                digest=_batch.digest,
                attempt=batch.attempt(_batch, LOCAL.batch_manifest(_name), outputs_here=False),
                plan=_batch,
            conda:
                COMMSWEEP_ENV
            log:
                L.log("batch", _name),
            benchmark:
                L.benchmark("batch", _name)
            resources:
                mem_mb=batch_resources("mem_mb", _name),
                runtime=batch_resources("runtime", _name),
                gpu=batch_resources("gpu", _name),
            threads: batch_resources("threads", _name)
            # Before the sweep-wide jobs ready at the start (rule batch above).
            priority: 2
            script:
                "../scripts/batch.py"
