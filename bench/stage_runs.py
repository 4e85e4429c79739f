"""What a batch's in-process tasks cost: every task of a sweep run on its typed job
(``Stage.run``, what a batch does) against the same tasks run by parsing their command lines
(what a batch did before the stage contracts, and what ``commsweep guard -- COMMAND`` does),
in CPU seconds per pass (the machine may be shared), passes interleaved; and the check that
both leave the same bytes.

    .venv/bin/python bench/stage_runs.py                     # the default sweep, 5 passes each
    .venv/bin/python bench/stage_runs.py --config config/moe.yaml --passes 3
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def one_pass(tasks, name: str) -> tuple[float, dict[str, bytes]]:
    """CPU seconds of running ``tasks`` as one batch from scratch, and what they wrote."""
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch

    for task in tasks:
        for path in (task.status, *task.outputs):
            Path(path).unlink(missing_ok=True)
    one = batch.Batch(name, (), tuple(tasks), {kind: () for kind in batch.FILE_KINDS})
    with contextlib.redirect_stderr(io.StringIO()):
        cpu = time.process_time()
        outcome = batch.run(one, 1, Layout().batch_manifest(name), running_dir=".running")
        cpu = time.process_time() - cpu
    if outcome.failed:
        raise SystemExit(f"{len(outcome.failed)} task(s) failed, e.g. {outcome.failed[0].status}")
    return cpu, {p: Path(p).read_bytes() for t in tasks for p in t.outputs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(HERE / "config" / "config.yaml"))
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    config_path = os.path.abspath(args.config)
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch, provenance, sweep

    with tempfile.TemporaryDirectory(prefix="commsweep-stage-runs-") as tmp:
        os.chdir(tmp)
        config = sweep.load_config(config_path)
        points, _ = sweep.points_from_config(config)
        run = provenance.Run(config=config, inputs=provenance.check_external(config, points))
        typed = [t for b in batch.plan(points, config, Layout(), run).values() for t in b.tasks]
        parsed = [dataclasses.replace(t, job=None) for t in typed]  # run from their command lines
        cpu = {"typed": [], "parsed": []}
        for _ in range(args.passes):
            seconds, by_job = one_pass(typed, "typed")
            cpu["typed"].append(seconds)
            seconds, by_command = one_pass(parsed, "parsed")
            cpu["parsed"].append(seconds)
            if by_job != by_command:
                differ = sorted(p for p in by_job if by_job[p] != by_command.get(p))
                raise SystemExit(f"typed jobs and parsed commands wrote different files: {differ[:5]}")
    best = {mode: min(values) for mode, values in cpu.items()}
    print(f"{args.config}: {len(typed)} tasks, {len(points)} points, load {os.getloadavg()[0]:.1f}; "
          "every output byte-identical both ways")
    for mode, label in (("typed", "typed jobs (Stage.run)"), ("parsed", "parsed command lines")):
        print(f"  {label:26} CPU s per pass: min {best[mode]:.2f}, all {' '.join(f'{s:.2f}' for s in cpu[mode])}")
    print(f"  ratio typed / parsed (min): {best['typed'] / best['parsed']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
