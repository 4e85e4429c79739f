"""The time model against the published measurements: error per source, and the fits.

For each published table shipped in ``src/commsweep/data/validation/`` (Korthikanti et al.
2022 Table 5, Narayanan et al. 2021 Table 1 on A100; NVIDIA's NeMo 24.07 table and its
later releases' on H100), runs ``commsweep validate``'s prediction under the Megatron-LM
version the table was measured with (and the A100 tables under the default version, 2022
too), and prints the mean and largest absolute error per source.

``--plot FILE`` draws both tables' predictions against the measurements (the figure of
``docs/validation.md``). ``--fit`` redoes the fit of the two A100 efficiencies of ``aiob/gpus.py`` (the large-GEMM
efficiency and the streaming-kernel memory efficiency; everything else in the model is a
datasheet figure or a count of bytes and FLOPs): a grid search minimising the mean of the
two tables' mean absolute errors, each table under its own Megatron-LM version. These two
tables are the only data the fit sees. About 5 minutes on 2 cores. ``--fit-gap`` redoes the
fit of the ``nemo`` version's host gap per kernel on the NeMo 24.07 table alone: the whole
microseconds at which its two GPT-3 175B runs (one layout at micro batch 1 and 2) come out
with the same error (about a minute and a half). ``--fit-fp8`` redoes the
fit of Hopper's FP8 GEMM efficiency on the NeMo 24.07 table alone (steps of 0.01), which
every other table then takes as it is. ``--fit-vboost`` redoes the fit of Hopper's vboost
gain (what vboost adds to the tensor cores' rate) on the 24.07 table's vboost edition alone
(the same runs measured again with vboost on; steps of 0.005), the FP8 efficiency held.

The H100 fits go in this order, each holding the ones before it: ``--fit-gap --fit-fp8
--fit-vboost``.

Run with ``.venv/bin/python bench/validate.py [--plot FILE] [--fit] [--fit-gap] [--fit-fp8] [--fit-vboost]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from commsweep.aiob import gpus
from commsweep.aiob.megatron_kernels import NEMO_KERNEL_GAP_US, software
from commsweep.analysis import validate


CITATION = {"korthikanti2022_table5.csv": "Korthikanti et al. 2022, Table 5",
            "narayanan2021_table1.csv": "Narayanan et al. 2021, Table 1",
            "nemo2407_h100.csv": "NeMo 24.07, DGX-H100 FP8",
            "nemo2407_vboost_h100.csv": "NeMo 24.07 with vboost, DGX-H100 FP8",
            "nemo2409_h100.csv": "NeMo 24.09, DGX-H100 FP8",
            "nemo_later_h100.csv": "NeMo 25.02 to 26.04.01, DGX-H100 FP8",
            "nemo_cp_h100.csv": "NeMo 24.07's context-parallel runs (3 editions), DGX-H100 FP8"}
A100 = ("korthikanti2022_table5.csv", "narayanan2021_table1.csv")
FP8_FIT = "nemo2407_h100.csv"
# The fit's pair of the FP8 table: one layout (TP 4, PP 8, VP 6) at micro batch 1 and 2.
PAIR = ("GPT3-175B-128", "GPT3-175B-512")
VBOOST_FIT = "nemo2407_vboost_h100.csv"


def results(rs: list, version: str, gpu_changes: dict | None = None, sw_changes: dict | None = None) -> list:
    if gpu_changes:
        rs = [dataclasses.replace(r, gpu=dataclasses.replace(r.gpu, **gpu_changes)) for r in rs]
    return validate.validate(rs, dataclasses.replace(software(version), **(sw_changes or {})))


def errors(runs: dict[str, list], versions: dict[str, str], gpu_changes: dict | None = None,
           sw_changes: dict | None = None) -> dict[str, dict]:
    return {name: validate.summary(results(rs, versions[name], gpu_changes, sw_changes)) for name, rs in runs.items()}


def fit_one(runs: dict[str, list], table: str, field: str, values: list[float],
            sw_changes: dict | None = None, quiet: bool = False) -> float:
    """Fit one GPU constant on one table: the value of ``values`` with the least mean
    absolute error there, every other constant held."""
    fits = []
    for value in values:
        e = errors({table: runs[table]}, validate.PUBLISHED, {field: value}, sw_changes)[table]
        fits.append((e["mean_abs_error_pct"], value, e))
    score, best, e = min(fits)
    if not quiet:
        print(f"\nfit on {table}: {field} {best}: mean |error| {score:.2f}% "
              f"(max {e['max_abs_error_pct']:.2f}%, {e['worst']})")
    return best


FP8_STEPS = [step / 100 for step in range(35, 81)]


def fit_gap(runs: dict[str, list]) -> None:
    """Fit the ``nemo`` software's host gap per kernel on the NeMo 24.07 table alone: the
    whole microseconds at which its two GPT-3 175B runs (the same layout at micro batch 1
    and 2; the per-token difference between them is a cost per micro-batch) come out with
    the same error, the FP8 efficiency refitted on the table at each. The difference (micro
    batch 1's error minus 2's) rises with the gap, so a bisection finds it."""
    table = runs[FP8_FIT]

    def spread(gap: float) -> tuple[float, float]:
        changes = {"kernel_gap_us": gap}
        fp8 = fit_one(runs, FP8_FIT, "fp8_gemm_efficiency", FP8_STEPS, changes, quiet=True)
        errs = {r.run.name: r.error_pct for r in results(table, "nemo", {"fp8_gemm_efficiency": fp8}, changes)}
        return errs[PAIR[0]] - errs[PAIR[1]], fp8

    low, high = 0, 64
    while high - low > 1:
        mid = (low + high) // 2
        if spread(float(mid))[0] > 0:
            high = mid
        else:
            low = mid
    gap, (diff, fp8) = min(((g, spread(float(g))) for g in (low, high)), key=lambda fit: abs(fit[1][0]))
    print(f"\nfit on {FP8_FIT}: kernel_gap_us {gap} ({PAIR[0]} minus {PAIR[1]}: {diff:+.2f} points; "
          f"FP8 GEMM efficiency refitted there: {fp8})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="grid-search the A100 GEMM and memory efficiencies")
    parser.add_argument("--fit-fp8", action="store_true", help="fit Hopper's FP8 GEMM efficiency on the NeMo 24.07 table")
    parser.add_argument("--fit-gap", action="store_true",
                        help="fit the nemo software's host gap per kernel on the NeMo 24.07 table")
    parser.add_argument("--fit-vboost", action="store_true",
                        help="fit Hopper's vboost gain on the NeMo 24.07 table's vboost edition")
    parser.add_argument("--plot", metavar="FILE", help="draw every table, each under its own version (docs/validation.png)")
    args = parser.parse_args()
    runs = {name: validate.read_runs(validate.DATA / name) for name in validate.PUBLISHED}
    a100_runs = {name: runs[name] for name in A100}
    a100, h100 = gpus.gpu("A100-80GB"), gpus.gpu("H100-SXM")
    print(f"fitted: A100 gemm {a100.gemm_efficiency}, memory {a100.memory_efficiency} (on {', '.join(A100)}); "
          f"nemo host gap {NEMO_KERNEL_GAP_US} us per kernel and Hopper FP8 gemm {h100.fp8_gemm_efficiency} "
          f"(on {FP8_FIT}), vboost gain {h100.vboost_gain} "
          f"(on {VBOOST_FIT})")
    print(f"{'source':<28} {'megatron':>8} {'runs':>4} {'mean |err| %':>12} {'mean err %':>10} {'max |err| %':>11}  worst")
    for versions in (validate.PUBLISHED, {n: "2022" for n in A100}):
        for name, s in errors({n: runs[n] for n in versions}, versions).items():
            print(f"{name.removesuffix('.csv'):<28} {versions[name]:>8} {s['runs']:>4} {s['mean_abs_error_pct']:>12.2f} "
                  f"{s['mean_error_pct']:>+10.2f} {s['max_abs_error_pct']:>11.2f}  {s['worst']}")
    if args.plot:
        groups = {f"{CITATION[name]} (Megatron-LM {v})": validate.validate(runs[name], software(v))
                  for name, v in validate.PUBLISHED.items()}
        validate.plot(groups, args.plot, title="Iteration time on A100 (Selene) and H100 (DGX H100): predicted vs measured")
        print(f"wrote {args.plot}")
    if args.fit_gap:
        fit_gap(runs)
    if args.fit_fp8:
        fit_one(runs, FP8_FIT, "fp8_gemm_efficiency", FP8_STEPS)
    if args.fit_vboost:
        fit_one(runs, VBOOST_FIT, "vboost_gain", [step / 200 for step in range(0, 21)])
    if not args.fit:
        return
    start = time.perf_counter()
    best = None
    # A coarse grid, then a fine one around its best point: steps of 0.05, then 0.01.
    grid = [(g / 100, m / 100) for g in range(60, 91, 5) for m in range(50, 91, 5)]
    for _ in range(2):
        for gemm, mem in grid:
            changes = {"gemm_efficiency": round(gemm, 2), "memory_efficiency": round(mem, 2)}
            e = errors(a100_runs, validate.PUBLISHED, changes)
            score = sum(s["mean_abs_error_pct"] for s in e.values()) / len(e)
            if best is None or score < best[0]:
                best = (score, changes, e)
        g0, m0 = best[1]["gemm_efficiency"], best[1]["memory_efficiency"]
        grid = [(g0 + i / 100, m0 + j / 100) for i in range(-4, 5) for j in range(-4, 5) if (i, j) != (0, 0)]
    score, changes, e = best
    print(f"\nfit ({time.perf_counter() - start:.0f} s): {changes}: mean of the tables' mean |error| {score:.2f}%")
    for name, s in e.items():
        print(f"  {name}: {s['mean_abs_error_pct']:.2f}% (max {s['max_abs_error_pct']:.2f}%, {s['worst']})")


if __name__ == "__main__":
    main()
