"""``commsweep validate``: predicted iteration times against measured ones.

A runs file is a CSV with one measured training run per line, in these columns (any
order): ``RUN_COLUMNS``, and optionally ``OPTIONAL_COLUMNS`` (absent: their defaults).
Lines starting with ``#`` before the header are comments (the published tables shipped in ``commsweep/data/validation/`` carry their citation
there). ``recompute`` is ``none``, ``selective`` or ``full``; ``sequence_parallel``
``true`` or ``false``; ``cp`` (optional) the context-parallel size, GPUs being
tp x cp x pp x dp, and ``cp_comm_type`` how the attention exchanges the sequence;
``virtual_pipeline`` the interleaved schedule's model chunks per
stage (1: not interleaved); ``gpu`` a name of ``commsweep profile --list_gpus``; the four
network columns GPUs and NICs per server and the NVLink and NIC GB/s; ``measured_s``
the measured seconds per iteration (empty: predict only).

The model is a dense decoder: GPT-style (learned position embedding, LayerNorm, GeLU MLP
with biases, tied embeddings), the architecture of the published Megatron-LM runs, or
Llama-style (``architecture`` llama). The four network columns are the datasheets' figures;
``predict.Cluster.simai_gbps`` turns the bandwidths into SimAI's flags. Each
run is predicted by ``analysis.predict`` under one Megatron-LM version
(``aiob.megatron_kernels.SOFTWARE``) and, where its ``recipe`` column names one, the
settings of that training recipe (``recipes.csv`` beside the tables: dropout, the cross
entropy's kernels, deferred embedding weight gradients, the gradients' precision, vboost, each
recipe with the repository and tag it was read from). The output is the runs with ``predicted_s``,
``error_pct`` (predicted over measured, minus 1, in percent), the breakdown
(``predict.BREAKDOWN``: they sum to ``predicted_s``) and the memory per GPU with its
verdict (``memory.py``).
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..aiob import gpus
from ..aiob import megatron_kernels as mk
from ..base.errors import CommsweepError, ConfigError, InputError
from ..base.files import read_text
from ..setup import memory
from ..setup.models import ModelSpec
from ..setup.training import TrainingSetup
from ..workload.megatron import local_parameters
from .predict import BREAKDOWN, Cluster, Prediction, predict

RUN_COLUMNS = (
    "name", "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "vocab_size",
    "tp", "pp", "dp", "micro_batch", "global_batch", "recompute", "sequence_parallel", "virtual_pipeline", "gpu",
    "gpus_per_server", "nics_per_server", "nvlink_gbps", "nic_gbps", "measured_s",
)
# Columns a runs file may leave out, and the value they then take: the model's architecture
# (``gpt``: learned position embedding, LayerNorm, GeLU MLP with biases, tied embeddings, as
# the 2021-2022 Megatron-LM runs; ``llama``: RoPE, RMSNorm, SwiGLU, no biases, untied
# embeddings), its key/value groups (empty: one per head) and the GEMMs' precision
# (``bf16``, or ``fp8``: Transformer Engine's FP8 GEMMs, as NVIDIA's published H100 runs).
# ``recipe``: a training recipe of ``RECIPES`` (empty: the Megatron-LM version's own settings).
# ``cp``, ``cp_comm_type``: context parallelism (megatron's --context-parallel-size and
# --cp-comm-type; GPUs = tp x cp x pp x dp), 1 and p2p when absent.
OPTIONAL_COLUMNS = {"architecture": "gpt", "num_query_groups": "", "precision": "bf16", "recipe": "",
                    "cp": "1", "cp_comm_type": "p2p"}
ARCHITECTURES = ("gpt", "llama")
PRECISIONS = ("bf16", "fp8")
# a2a+p2p needs the hierarchical group sizes, which a runs file does not give.
RUN_CP_COMM_TYPES = ("p2p", "all_gather", "a2a")
RESULT_COLUMNS = ("predicted_s", "error_pct", *BREAKDOWN, "memory_gib", "fits")
_INTS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "seq_length", "vocab_size",
         "tp", "pp", "dp", "micro_batch", "global_batch", "virtual_pipeline", "gpus_per_server", "nics_per_server",
         "cp")
_FLOATS = ("nvlink_gbps", "nic_gbps")
RECOMPUTE = ("none", "selective", "full")
# The published tables shipped with the package, and the Megatron-LM each was measured with.
DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
# What NVIDIA's recipes set beyond the runs file's columns, per release, with their sources
# (the file's comment header): ``recipes()``.
RECIPES = DATA / "recipes.csv"
PUBLISHED = {"korthikanti2022_table5.csv": "2022", "narayanan2021_table1.csv": "2021",
             "nemo2407_h100.csv": "nemo", "nemo2407_vboost_h100.csv": "nemo", "nemo2409_h100.csv": "nemo",
             "nemo_later_h100.csv": "nemo", "nemo_cp_h100.csv": "nemo"}


@dataclass(frozen=True)
class Run:
    """One line of a runs file: its setup, GPU, network and measurement."""

    line: int
    values: dict[str, str]  # the line as written
    setup: TrainingSetup
    gpu: gpus.GpuSpec
    cluster: Cluster
    measured_s: float | None
    fp8: bool = False  # the precision column: FP8 GEMMs
    recipe: dict[str, object] | None = None  # the recipe column's settings (Software fields)

    @property
    def name(self) -> str:
        return self.values["name"]


def read_runs(path: str | Path) -> list[Run]:
    """Every run of a runs file, checked; an InputError names the file, line and column."""
    text = read_text(path)
    lines = text.splitlines(keepends=True)
    skip = 0
    while skip < len(lines) and (lines[skip].startswith("#") or not lines[skip].strip()):
        skip += 1
    if skip == len(lines):
        raise InputError("no header line (expected the columns " + ", ".join(RUN_COLUMNS) + ")", file=path)
    reader = csv.reader(io.StringIO("".join(lines[skip:])))
    try:
        header = [h.strip() for h in next(reader)]
    except csv.Error as err:
        raise InputError(f"not CSV: {err}", file=path, line=skip + 1) from None
    unknown = [h for h in header if h not in RUN_COLUMNS and h not in OPTIONAL_COLUMNS]
    missing = [c for c in RUN_COLUMNS if c not in header]
    duplicate = sorted({h for h in header if header.count(h) > 1})
    for problem, cols in (("unknown column", unknown), ("missing column", missing), ("repeated column", duplicate)):
        if cols:
            raise InputError(f"{problem}{'s' if len(cols) > 1 else ''} {', '.join(map(repr, cols))}; a runs file has "
                             f"the columns {', '.join(RUN_COLUMNS)} "
                             f"(and optionally {', '.join(OPTIONAL_COLUMNS)})", file=path, line=skip + 1,
                             field=cols[0])
    runs = []
    try:
        for cells in reader:
            line = skip + reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise InputError(f"{len(cells)} fields, the header has {len(header)}", file=path, line=line)
            values = {**OPTIONAL_COLUMNS, **dict(zip(header, (c.strip() for c in cells)))}
            runs.append(_run(values, path, line))
    except csv.Error as err:
        raise InputError(f"not CSV: {err}", file=path, line=skip + reader.line_num) from None
    if not runs:
        raise InputError("no runs after the header", file=path, line=skip + 1)
    return runs


def _run(values: dict[str, str], path: str | Path, line: int) -> Run:
    """One checked run from its CSV row; the first bad field is reported (in column order)."""
    def bad(column: str, expected: str) -> InputError:
        return InputError(f"expected {expected}, got {values[column]!r}", file=path, line=line, field=column)

    ints = _positive_ints(values, bad)
    floats = _positive_floats(values, bad)
    known = _check_choices(values, ints, bad)
    try:
        gpu = gpus.gpu(values["gpu"])
    except ConfigError as err:
        raise InputError(err.message, file=path, line=line, field="gpu") from None
    if values["precision"] == "fp8" and not gpu.fp8_tflops:
        raise InputError(f"the {gpu.name} has no FP8 tensor cores", file=path, line=line, field="precision")
    setup = _setup(values, ints)
    problems = setup.problems()
    if problems:
        raise InputError("; ".join(problems), file=path, line=line)
    cluster = Cluster(gpus_per_server=ints["gpus_per_server"], nics_per_server=ints["nics_per_server"],
                      nvlink_gbps=floats["nvlink_gbps"], nic_gbps=floats["nic_gbps"])
    return Run(line=line, values=values, setup=setup, gpu=gpu, cluster=cluster, measured_s=floats.get("measured_s"),
               fp8=values["precision"] == "fp8", recipe=known.get(values["recipe"]))


def _positive_ints(values: dict[str, str], bad) -> dict[str, int]:
    """The integer columns, each checked positive."""
    ints: dict[str, int] = {}
    for column in _INTS:
        text = values[column]
        if not text.isdigit() or int(text) < 1:
            raise bad(column, "a positive integer")
        ints[column] = int(text)
    return ints


def _positive_floats(values: dict[str, str], bad) -> dict[str, float]:
    """The number columns, each checked positive and finite (``measured_s`` may be empty)."""
    floats: dict[str, float] = {}
    for column in (*_FLOATS, "measured_s"):
        text = values[column]
        if column == "measured_s" and text == "":
            continue
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (number > 0 and math.isfinite(number)):
            raise bad(column, "a positive number")
        floats[column] = number
    return floats


def _check_choices(values: dict[str, str], ints: dict[str, int], bad) -> dict[str, dict[str, object]]:
    """The text columns: a name, and each choice column one of its choices; returns the recipes."""
    if not values["name"]:
        raise bad("name", "a name")
    if values["recompute"] not in RECOMPUTE:
        raise bad("recompute", " or ".join(RECOMPUTE))
    if values["sequence_parallel"] not in ("true", "false"):
        raise bad("sequence_parallel", "true or false")
    if values["architecture"] not in ARCHITECTURES:
        raise bad("architecture", " or ".join(ARCHITECTURES))
    if values["precision"] not in PRECISIONS:
        raise bad("precision", " or ".join(PRECISIONS))
    if values["cp_comm_type"] not in RUN_CP_COMM_TYPES:
        raise bad("cp_comm_type", " or ".join(RUN_CP_COMM_TYPES))
    known = recipes()
    if values["recipe"] and values["recipe"] not in known:
        raise bad("recipe", "empty or one of " + ", ".join(known))
    groups = values["num_query_groups"]
    if groups and (not groups.isdigit() or int(groups) < 1 or ints["num_attention_heads"] % int(groups)):
        raise bad("num_query_groups", "empty or a positive divisor of num_attention_heads")
    return known


def _setup(values: dict[str, str], ints: dict[str, int]) -> TrainingSetup:
    """The run's model (GPT or LLaMA architecture) and parallel setup, from checked columns."""
    llama = values["architecture"] == "llama"
    groups = values["num_query_groups"]
    model = ModelSpec(
        name=values["name"], num_layers=ints["num_layers"], hidden_size=ints["hidden_size"],
        num_attention_heads=ints["num_attention_heads"], ffn_hidden_size=ints["ffn_hidden_size"],
        vocab_size=ints["vocab_size"], max_position_embeddings=ints["seq_length"],
        num_query_groups=int(groups) if groups else None, swiglu=llama,
        position_embedding="rope" if llama else "learned", normalization="rmsnorm" if llama else "layernorm",
        add_bias_linear=not llama, tie_embeddings=not llama,
    )
    recompute = values["recompute"]
    return TrainingSetup(
        model=model, world_size=ints["tp"] * ints["cp"] * ints["pp"] * ints["dp"], tp=ints["tp"], pp=ints["pp"],
        cp=ints["cp"], cp_comm_type=values["cp_comm_type"],
        sp=values["sequence_parallel"] == "true", micro_batch=ints["micro_batch"],
        global_batch=ints["global_batch"], seq_length=ints["seq_length"], recompute=recompute != "none",
        recompute_granularity="full" if recompute == "full" else "selective",
        virtual_pipeline=ints["virtual_pipeline"],
    )


RECIPE_COLUMNS = ("recipe", "dropout", "cross_entropy", "defer_embedding_wgrad", "grad_reduce_in_fp32", "vboost")


@functools.lru_cache(maxsize=None)
def recipes(path: str | Path = RECIPES) -> dict[str, dict[str, object]]:
    """The recipes file: per recipe name, the ``Software`` fields it sets (``dropout``,
    ``cross_entropy``, ``defer_embedding_wgrad``, ``grad_reduce_in_fp32``, ``vboost``)."""
    lines = [line for line in read_text(path).splitlines() if line.strip()]
    skip = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    reader = csv.DictReader(io.StringIO("\n".join(lines[skip:])))
    if tuple(reader.fieldnames or ()) != RECIPE_COLUMNS:
        raise InputError(f"expected the columns {', '.join(RECIPE_COLUMNS)}", file=path, line=skip + 1)
    out: dict[str, dict[str, object]] = {}
    for number, row in enumerate(reader, start=skip + 2):
        def flag(column: str) -> bool:
            if row[column] not in ("true", "false"):
                raise InputError(f"expected true or false, got {row[column]!r}", file=path, line=number, field=column)
            return row[column] == "true"

        if row["cross_entropy"] not in ("megatron", "te"):
            raise InputError(f"expected megatron or te, got {row['cross_entropy']!r}", file=path, line=number,
                             field="cross_entropy")
        limit = row["defer_embedding_wgrad"]
        if limit and not limit.isdigit():
            raise InputError(f"expected empty or a count, got {limit!r}", file=path, line=number,
                             field="defer_embedding_wgrad")
        out[row["recipe"]] = {"dropout": flag("dropout"), "cross_entropy": row["cross_entropy"],
                              "defer_embedding_wgrad": int(limit) if limit else None,
                              "grad_reduce_in_fp32": flag("grad_reduce_in_fp32"), "vboost": flag("vboost")}
    return out


@dataclass(frozen=True)
class Result:
    run: Run
    prediction: Prediction
    memory: memory.Memory
    fits: bool

    @property
    def predicted_s(self) -> float:
        return self.prediction.total_s

    @property
    def breakdown(self) -> dict[str, float]:
        return self.prediction.breakdown()

    @property
    def error_pct(self) -> float | None:
        if self.run.measured_s is None:
            return None
        return (self.predicted_s / self.run.measured_s - 1) * 100


def validate(runs: list[Run], sw: mk.Software, *, ratios=None, source: str | Path = "<runs>") -> list[Result]:
    """Predict every run under Megatron-LM ``sw``."""
    out = []
    for run in runs:
        run_sw = replace(sw, fp8=run.fp8, **(run.recipe or {}))
        setup = run_sw.configure(run.setup)
        gpu = run.gpu.vboosted() if run_sw.vboost else run.gpu
        try:
            p = predict(setup, gpu, run_sw, run.cluster, ratios)
        except CommsweepError as err:
            raise InputError(f"cannot predict this run: {err}", file=source, line=run.line) from None
        params = {stage: local_parameters(setup, stage) for stage in {0, setup.pp - 1}}
        mem = memory.estimate(setup, params, flash_attention=sw.attention in ("flash", "cudnn"),
                              dropout=run_sw.dropout)
        out.append(Result(run=run, prediction=p, memory=mem, fits=mem.fits(run.gpu.memory_gib)))
    return out


def write_workloads(results: list[Result], folder: str | Path) -> Path:
    """Each run's SimAI workload (``<name>.txt``) and ``commands.sh``: the SimAI_analytical
    command line of each (run from that folder, SimAI's ``results/`` beside it), which
    ``commsweep simulate`` also takes. Returns the commands file."""
    from ..base.files import write_text

    folder = Path(folder)
    lines = ["# SimAI_analytical (or commsweep simulate) on each run's workload, from this folder",
             "mkdir -p results"]
    for r in results:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", r.run.name)
        write_text(folder / f"{name}.txt", r.prediction.workload.render())
        flags = " ".join(r.prediction.flags())
        lines.append(f"SimAI_analytical -w {name}.txt {flags} -r {name}-")
    commands = folder / "commands.sh"
    write_text(commands, "\n".join(lines) + "\n")
    return commands


def _cells(r: Result) -> list[str]:
    err = r.error_pct
    return ([r.run.values[c] for c in (*RUN_COLUMNS, *OPTIONAL_COLUMNS)] + [f"{r.predicted_s:.4f}", "" if err is None else f"{err:.2f}"]
            + [f"{r.breakdown[b]:.4f}" for b in BREAKDOWN] + [f"{r.memory.total_gib:.1f}", str(r.fits).lower()])


def to_csv(results: list[Result]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*RUN_COLUMNS, *OPTIONAL_COLUMNS, *RESULT_COLUMNS])
    for r in results:
        writer.writerow(_cells(r))
    return buf.getvalue()


def summary(results: list[Result]) -> dict[str, float | int | str]:
    """Mean and largest absolute error over the runs with a measurement."""
    measured = [r for r in results if r.error_pct is not None]
    if not measured:
        return {"runs": 0}
    worst = max(measured, key=lambda r: abs(r.error_pct))
    return {
        "runs": len(measured),
        "mean_abs_error_pct": sum(abs(r.error_pct) for r in measured) / len(measured),
        "mean_error_pct": sum(r.error_pct for r in measured) / len(measured),
        "max_abs_error_pct": abs(worst.error_pct),
        "worst": worst.run.name,
    }


def to_table(results: list[Result], sw: mk.Software) -> str:
    """A readable table: the setup in short, measured, predicted, error, breakdown, memory."""
    head = ("name", "t", "c", "p", "d", "v", "mb", "gb", "recompute", "sp", "measured s", "predicted s", "error %",
            "compute", "TP", "DP", "PP", "bubble", "optimizer", "GiB", "fits")
    rows = []
    for r in results:
        v, err = r.run.values, r.error_pct
        rows.append((
            v["name"], v["tp"], v["cp"], v["pp"], v["dp"], v["virtual_pipeline"], v["micro_batch"], v["global_batch"],
            v["recompute"], v["sequence_parallel"][0], v["measured_s"] or "-", f"{r.predicted_s:.3f}",
            "-" if err is None else f"{err:+.1f}", *(f"{r.breakdown[b]:.3f}" for b in BREAKDOWN),
            f"{r.memory.total_gib:.1f}", "yes" if r.fits else "NO",
        ))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in (head, *rows)]
    s = summary(results)
    lines.append("")
    lines.append(f"Megatron-LM {sw.name}: {sw.description}")
    if s["runs"]:
        lines.append(f"mean absolute error {s['mean_abs_error_pct']:.2f}% over {s['runs']} run(s) "
                     f"(mean {s['mean_error_pct']:+.2f}%); largest {s['max_abs_error_pct']:.2f}% ({s['worst']})")
    lines.append("breakdown in seconds: compute (optimizer apart), exposed TP and DP, pipeline sends, bubble, "
                 "optimizer step")
    return "\n".join(lines) + "\n"


def plot(groups: dict[str, list[Result]], output: str | Path, *, title: str | None = None) -> None:
    """Two panels: predicted against measured seconds (log-log, with the +-10% band), and
    each run's error against its measured time; one marker per group (e.g. per source)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..base.files import atomic_open

    measured = {label: [r for r in rs if r.run.measured_s is not None] for label, rs in groups.items()}
    every = [r for rs in measured.values() for r in rs]
    if not every:
        raise CommsweepError("no run has a measured time to plot")
    fig, (ax, res) = plt.subplots(1, 2, figsize=(12, 5.5))
    values = [r.run.measured_s for r in every] + [r.predicted_s for r in every]
    lo, hi = min(values) / 1.6, max(values) * 1.6
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.88", label="within 10%")
    res.axhspan(-10, 10, color="0.88")
    res.axhspan(-5, 5, color="0.78")
    res.axhline(0, color="black", linewidth=1)
    for (label, rs), marker in zip(measured.items(), "os^vDPX"):
        if not rs:
            continue
        s = summary(rs)
        xs = [r.run.measured_s for r in rs]
        ax.scatter(xs, [r.predicted_s for r in rs], marker=marker, zorder=3,
                   label=f"{label}: mean |error| {s['mean_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%")
        res.scatter(xs, [r.error_pct for r in rs], marker=marker, zorder=3)
        # Names for the runs outside the 5% band only: inside it they would sit on each other
        # (every run, with its name, is in the validate command's table).
        for r in rs:
            if abs(r.error_pct) > 5:
                res.annotate(r.run.name, (r.run.measured_s, r.error_pct), fontsize=7, xytext=(4, 3),
                             textcoords="offset points")
    for axis in (ax, res):
        axis.set_xscale("log")
        axis.set_xlim(lo, hi)
        axis.set_xlabel("measured seconds per iteration")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_ylabel("predicted seconds per iteration")
    worst = max(abs(r.error_pct) for r in every)
    res.set_ylim(-max(12, worst + 3), max(12, worst + 3))
    res.set_ylabel("error: predicted / measured - 1 (%)")
    res.set_title("each run's error (bands: 5% and 10%; runs outside 5% named)", fontsize=10)
    if title:
        ax.set_title(title, fontsize=10)
    # Under both panels: inside the left one it covered the largest runs.
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, (0.22 * -(-len(labels) // 2) + 0.15) / fig.get_figheight(), 1, 1))
    with atomic_open(output, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
