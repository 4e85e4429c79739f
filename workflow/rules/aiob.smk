# AIOB compute-time profiles, one job per profile key (points that share the rank's
# shard, batch and GPU share one profile). One rule per backend: `aiob.backend` in the
# config decides which one the workload rule's input path (common.smk: profile_path) asks for.

import shutil

# The torch backend runs on CUDA when the machine has an NVIDIA GPU: then its jobs ask for
# one (`gpu=1`, which a cluster executor such as Slurm's maps to a GPU request; locally,
# `--resources gpu=N` runs at most N of them at once).
TORCH_ON_GPU = shutil.which("nvidia-smi") is not None


rule aiob_roofline:
    input:
        after=[],
    output:
        profile=f"{RESULTS}/aiob/roofline/{{profile}}.txt",
        table=f"{RESULTS}/aiob/roofline/{{profile}}.csv",
        status=f"{RESULTS}/aiob/roofline/{{profile}}.status",
    params:
        args=profile_args,
        attempt=attempt(f"{RESULTS}/aiob/roofline/{{profile}}.status"),
    log:
        f"{RESULTS}/logs/aiob/roofline/{{profile}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aiob/roofline/{{profile}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("profile --backend roofline {params.args} -o {output.profile} --csv {output.table}")


rule aiob_torch:
    input:
        after=[],
    output:
        profile=f"{RESULTS}/aiob/torch/{{profile}}.txt",
        table=f"{RESULTS}/aiob/torch/{{profile}}.csv",
        status=f"{RESULTS}/aiob/torch/{{profile}}.status",
    params:
        args=profile_args,
        attempt=attempt(f"{RESULTS}/aiob/torch/{{profile}}.status"),
    log:
        f"{RESULTS}/logs/aiob/torch/{{profile}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aiob/torch/{{profile}}.tsv"
    resources:
        mem_mb=16384,
        runtime=30,
        gpu=1 if TORCH_ON_GPU else 0,
    threads: 1 if TORCH_ON_GPU else 2
    shell:
        guarded("profile --backend torch --threads {threads} {params.args} -o {output.profile} --csv {output.table}")


rule aiob_file:
    input:
        user=profile_user_file,
        after=[],
    output:
        profile=f"{RESULTS}/aiob/file/{{profile}}.txt",
        table=f"{RESULTS}/aiob/file/{{profile}}.csv",
        status=f"{RESULTS}/aiob/file/{{profile}}.status",
    params:
        args=profile_args,
        attempt=attempt(f"{RESULTS}/aiob/file/{{profile}}.status"),
    log:
        f"{RESULTS}/logs/aiob/file/{{profile}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aiob/file/{{profile}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        guarded("profile --backend file --file {input.user} {params.args} -o {output.profile} --csv {output.table}")
