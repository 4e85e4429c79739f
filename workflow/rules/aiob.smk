# AIOB compute-time profiles, one job per profile key (points that share the rank's
# shard, batch and GPU share one profile). One rule per backend: `aiob.backend` in the
# config decides which one the workload rule's input path (common.smk: profile_path) asks for.

import shutil

# The torch backend runs on CUDA when the machine has an NVIDIA GPU: then its jobs ask for
# one (`gpu=1`, which a cluster executor such as Slurm's maps to a GPU request; locally,
# `--resources gpu=N` runs at most N of them at once).
TORCH_ON_GPU = shutil.which("nvidia-smi") is not None


rule aiob_roofline:
    output:
        profile=f"{RESULTS}/aiob/roofline/{{profile}}.txt",
        table=f"{RESULTS}/aiob/roofline/{{profile}}.csv",
    params:
        args=profile_args,
    log:
        f"{RESULTS}/logs/aiob/roofline/{{profile}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aiob/roofline/{{profile}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep profile --backend roofline {params.args} -o {output.profile} --csv {output.table} > {log} 2>&1"


rule aiob_torch:
    output:
        profile=f"{RESULTS}/aiob/torch/{{profile}}.txt",
        table=f"{RESULTS}/aiob/torch/{{profile}}.csv",
    params:
        args=profile_args,
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
        "commsweep profile --backend torch --threads {threads} {params.args}"
        " -o {output.profile} --csv {output.table} > {log} 2>&1"


rule aiob_file:
    input:
        profile_user_file,
    output:
        profile=f"{RESULTS}/aiob/file/{{profile}}.txt",
        table=f"{RESULTS}/aiob/file/{{profile}}.csv",
    params:
        args=profile_args,
    log:
        f"{RESULTS}/logs/aiob/file/{{profile}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/aiob/file/{{profile}}.tsv"
    resources:
        mem_mb=512,
        runtime=5,
    threads: 1
    shell:
        "commsweep profile --backend file --file {input} {params.args} -o {output.profile} --csv {output.table} > {log} 2>&1"
