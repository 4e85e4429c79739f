"""Figures drawn from ``results/summary.csv`` (matplotlib, PNG, deterministic bytes)."""

from __future__ import annotations

from pathlib import Path

PHASE_LABELS = {"fwd": "forward", "ig": "input grad", "wg": "weight grad", "pp": "pipeline"}
PHASE_COLOURS = {"fwd": "#4c72b0", "ig": "#dd8452", "wg": "#55a868", "pp": "#8172b3"}
GiB = 2**30


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    """Save a PNG atomically with fixed metadata, so identical data gives identical bytes."""
    from ..files import atomic_open

    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, metadata={"Software": "commsweep"})


def variant(schedule: str, aiob: str) -> str:
    """How a workload was made, as a legend label."""
    if schedule == "megatron":
        return "Megatron"
    return "AICB AIOB path" if aiob == "True" else "AICB default path"


def volume_by_tp(summary_csv: Path, output: Path) -> None:
    """Payload bytes per iteration by TP and SP, stacked by phase, one bar per generator.

    One row of panels per model; volumes do not depend on the network, so the first
    network's rows are used.
    """
    import pandas as pd

    plt = _pyplot()
    df = pd.read_csv(summary_csv, dtype={"aiob": str, "sp": str, "status": str})
    if "status" in df.columns:
        df = df[df["status"] == "ok"]  # failed points have no volumes (see commsweep.status)
    if df.empty:
        fig = plt.figure(figsize=(6, 2))
        fig.text(0.5, 0.5, "no point of the sweep has volumes", ha="center", va="center")
        save(fig, output)
        plt.close(fig)
        return
    df = df[df["network"] == df["network"].iloc[0]]
    df["variant"] = [variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    models = sorted(df["model"].unique())
    sps = sorted(df["sp"].unique())
    variants = [v for v in ("AICB default path", "AICB AIOB path", "Megatron") if v in set(df["variant"])]
    phases = [p for p in PHASE_LABELS if p in set(df["phase"])]
    fig, axes = plt.subplots(
        len(models), len(sps), figsize=(5.2 * len(sps), 3.8 * len(models)), squeeze=False, sharey="row"
    )
    hatches = {"AICB default path": "", "AICB AIOB path": "//", "Megatron": ".."}
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(models):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            sub = df[(df["model"] == model) & (df["sp"] == sp)]
            # Several points may share model, SP, TP and variant (other axes); sum per point, then average.
            per_point = sub.groupby(["tp", "variant", "point", "phase"])["payload_bytes"].sum()
            mean = per_point.groupby(["tp", "variant", "phase"]).mean()
            tps = sorted(sub["tp"].unique())
            for k, var in enumerate(variants):
                bottom = [0.0] * len(tps)
                xs = [i + (k - (len(variants) - 1) / 2) * width for i in range(len(tps))]
                for phase in phases:
                    heights = [mean.get((tp, var, phase), 0.0) / GiB for tp in tps]
                    ax.bar(xs, heights, width * 0.95, bottom=bottom, color=PHASE_COLOURS[phase],
                           hatch=hatches[var], edgecolor="black", linewidth=0.4)
                    bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlabel("tensor parallel size (TP)")
            ax.set_ylabel("payload per iteration (GiB)")
            ax.set_title(f"{model}, SP {'on' if sp == 'True' else 'off'}")
            ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=PHASE_COLOURS[p], edgecolor="black", label=PHASE_LABELS[p]) for p in phases]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatches[v], label=v) for v in variants]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle("Communication volume per iteration by TP, SP and phase")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    save(fig, output)
    plt.close(fig)


PLOTS = {"volume-by-tp": volume_by_tp}
