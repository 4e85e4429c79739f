# AIOB compute-time profiles (`commsweep profile`), one job per profile key (points that
# share the rank's shard, batch and GPU share one profile). One rule per backend:
# `aiob.backend` in the config decides which one the generate rule's input asks for.

import shutil

# The torch backend runs on CUDA when the machine has an NVIDIA GPU: then its jobs ask for
# one (`gpu=1`, which a cluster executor such as Slurm's maps to a GPU request; locally,
# `--resources gpu=N` runs at most N of them at once).
TORCH_ON_GPU = shutil.which("nvidia-smi") is not None


rule profile_roofline:
    input:
        after=[],
    output:
        profile=L.profile("roofline"),
        table=L.profile_table("roofline"),
        status=L.profile_status("roofline"),
    params:
        provenance=provenance(),
        args=profile_args,
        attempt=attempt(L.profile_status("roofline")),
    log:
        L.log("profile_roofline", "{profile}"),
    benchmark:
        L.benchmark("profile_roofline", "{profile}")
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("profile --backend roofline {params.args} -o {output.profile} --csv {output.table}")


rule profile_torch:
    input:
        after=[],
    output:
        profile=L.profile("torch"),
        table=L.profile_table("torch"),
        status=L.profile_status("torch"),
    params:
        provenance=provenance(),
        args=profile_args,
        attempt=attempt(L.profile_status("torch")),
    log:
        L.log("profile_torch", "{profile}"),
    benchmark:
        L.benchmark("profile_torch", "{profile}")
    resources:
        mem_mb=16384,
        runtime=30,
        gpu=1 if TORCH_ON_GPU else 0,
    threads: 1 if TORCH_ON_GPU else 2
    shell:
        guarded("profile --backend torch --threads {threads} {params.args} -o {output.profile} --csv {output.table}")


rule profile_file:
    input:
        user=profile_user_file,
        after=[],
    output:
        profile=L.profile("file"),
        table=L.profile_table("file"),
        status=L.profile_status("file"),
    params:
        provenance=profile_file_provenance,
        args=profile_args,
        attempt=attempt(L.profile_status("file")),
    log:
        L.log("profile_file", "{profile}"),
    benchmark:
        L.benchmark("profile_file", "{profile}")
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("profile --backend file --file {input.user} {params.args} -o {output.profile} --csv {output.table}")
