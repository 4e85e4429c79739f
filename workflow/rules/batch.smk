# The per-point work, in batches of points (commsweep.orchestration.batch): one job per batch runs every
# stage of each of its points in-process (AIOB profile, workload, volumes, simulation,
# audit), each task guarded as `commsweep guard -- COMMAND` would run it, and skips the
# tasks whose outputs are current. Its manifest, written last, lists its points' files:
# the sweep-wide steps read those (the points' files are not declared one by one).


rule batch:
    input:
        # Files from outside results/ its tasks read: the user's AIOB files, ratio tables.
        external=lambda wildcards: batch_of(wildcards).inputs,
    output:
        manifest=L.batch_manifest(),
    params:
        # Of every task's command and inputs: a changed point (or membership) reruns the
        # batch, which redoes only the tasks that changed.
        digest=lambda wildcards: batch_of(wildcards).digest,
        attempt=batch_attempt,
        # The tasks themselves (an object: not a rerun trigger of its own, the digest is).
        plan=batch_of,
    log:
        L.log("batch", "{batch}"),
    benchmark:
        L.benchmark("batch", "{batch}")
    resources:
        mem_mb=batch_resources("mem_mb"),
        runtime=batch_resources("runtime"),
        gpu=batch_resources("gpu"),
    threads: batch_resources("threads")
    script:
        "../scripts/batch.py"
