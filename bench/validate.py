"""The time model against the published measurements: error per source, and the A100 fit.

For each published table shipped in ``src/commsweep/data/validation/`` (Korthikanti et al.
2022 Table 5, Narayanan et al. 2021 Table 1), runs ``commsweep validate``'s prediction
under the Megatron-LM version the table was measured with and under the default version
(2022), and prints the mean and largest absolute error per source.

``--plot FILE`` draws both tables' predictions against the measurements (the figure of
``docs/validation.md``). ``--fit`` redoes the fit of the two A100 efficiencies of ``aiob/gpus.py`` (the large-GEMM
efficiency and the streaming-kernel memory efficiency; everything else in the model is a
datasheet figure or a count of bytes and FLOPs): a grid search minimising the mean of the
two tables' mean absolute errors, each table under its own Megatron-LM version. These two
tables are the only data the fit sees. About 5 minutes on 2 cores.

Run with ``.venv/bin/python bench/validate.py [--plot FILE] [--fit]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from commsweep.aiob import gpus
from commsweep.aiob.megatron_kernels import software
from commsweep.analysis import validate


CITATION = {"korthikanti2022_table5.csv": "Korthikanti et al. 2022, Table 5",
            "narayanan2021_table1.csv": "Narayanan et al. 2021, Table 1"}


def errors(runs: dict[str, list], versions: dict[str, str], gpu_changes: dict | None = None) -> dict[str, dict]:
    out = {}
    for name, rs in runs.items():
        if gpu_changes:
            rs = [dataclasses.replace(r, gpu=dataclasses.replace(r.gpu, **gpu_changes)) for r in rs]
        out[name] = validate.summary(validate.validate(rs, software(versions[name])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="grid-search the A100 GEMM and memory efficiencies")
    parser.add_argument("--plot", metavar="FILE", help="draw both tables, each under its own version (docs/validation.png)")
    args = parser.parse_args()
    runs = {name: validate.read_runs(validate.DATA / name) for name in validate.PUBLISHED}
    a100 = gpus.gpu("A100-80GB")
    print(f"A100 efficiencies: gemm {a100.gemm_efficiency}, memory {a100.memory_efficiency}")
    print(f"{'source':<28} {'megatron':>8} {'runs':>4} {'mean |err| %':>12} {'mean err %':>10} {'max |err| %':>11}  worst")
    for label, versions in (("own", validate.PUBLISHED), ("default", {n: "2022" for n in validate.PUBLISHED})):
        for name, s in errors(runs, versions).items():
            print(f"{name.removesuffix('.csv'):<28} {versions[name]:>8} {s['runs']:>4} {s['mean_abs_error_pct']:>12.2f} "
                  f"{s['mean_error_pct']:>+10.2f} {s['max_abs_error_pct']:>11.2f}  {s['worst']}")
    if args.plot:
        groups = {f"{CITATION[name]} (Megatron-LM {v})": validate.validate(runs[name], software(v))
                  for name, v in validate.PUBLISHED.items()}
        validate.plot(groups, args.plot, title="Iteration time on A100 (Selene): predicted vs measured")
        print(f"wrote {args.plot}")
    if not args.fit:
        return
    start = time.perf_counter()
    best = None
    # A coarse grid, then a fine one around its best point: steps of 0.05, then 0.01.
    grid = [(g / 100, m / 100) for g in range(60, 91, 5) for m in range(50, 91, 5)]
    for _ in range(2):
        for gemm, mem in grid:
            changes = {"gemm_efficiency": round(gemm, 2), "memory_efficiency": round(mem, 2)}
            e = errors(runs, validate.PUBLISHED, changes)
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
