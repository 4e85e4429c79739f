"""What `commsweep guard` costs a per-point job: wall time of `commsweep generate` with and
without the guard (status file, markers on failure), median of several runs.

    .venv/bin/python bench/guard.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMSWEEP = str(Path(sys.executable).with_name("commsweep"))
GENERATE = ["generate", "--schedule", "megatron", "--model", "gpt-7b", "--world_size=16",
            "--tensor_model_parallel_size=4", "--global_batch=8"]
RUNS = 9


def median_seconds(argv: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out, status = Path(tmp) / "w.txt", Path(tmp) / "w.status"
        plain = median_seconds([COMMSWEEP, *GENERATE, "-o", str(out)])
        guarded = median_seconds(
            [COMMSWEEP, "guard", "--status", str(status), "--outputs", str(out), "--", *GENERATE, "-o", str(out)]
        )
    print(f"commsweep generate:        {plain * 1000:7.1f} ms (median of {RUNS})")
    print(f"commsweep guard -- generate: {guarded * 1000:5.1f} ms")
    print(f"ratio guarded / plain:      {guarded / plain:6.2f}")


if __name__ == "__main__":
    main()
