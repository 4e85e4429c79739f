"""The sweep through a real Slurm (profiles/slurm): same results as a local run.

A single-node Slurm is started on this machine for the module (tests/slurm_cluster.py)
and stopped by PID afterwards. Without the Debian packages (or without root) the tests
skip with the reason; under CI (CI=true, where .ci/run installs the packages) they fail
instead, so a broken setup cannot pass silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import slurm_cluster
import sweeps

# Hard limits: the whole Slurm run, and starting the daemons.
RUN_TIMEOUT_S = 420
START_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def slurm():
    reason = slurm_cluster.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must run the Slurm tests; .ci/run installs the packages)")
        pytest.skip(reason)
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        message = "snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cluster = slurm_cluster.start(timeout=START_TIMEOUT_S)
    try:
        yield cluster
    finally:
        slurm_cluster.stop(cluster)
        # Stopped by PID, and really gone (not even a zombie).
        assert not [name for name, pid in cluster.pids.items() if slurm_cluster.alive(pid)]


# The settings a test cluster needs on top of the profile (see slurm_cluster.py): accounting
# is off, so the status comes from squeue; poll soon, or every wave waits 40 s.
SLURM_ARGS = (
    "--slurm-status-command", "squeue",
    "--slurm-init-seconds-before-status-checks", "2",
)


@pytest.mark.slow
def test_sweep_on_slurm_equals_local_run(tmp_path, slurm):
    local, remote = tmp_path / "local", tmp_path / "slurm"
    for workdir in (local, remote):
        sweeps.write_config(workdir)
    # The local run, to compare with, goes on meanwhile: the Slurm run spends much of its
    # time waiting on sbatch and squeue.
    with ThreadPoolExecutor(1) as pool:
        local_run = pool.submit(sweeps.run, local, "--configfile", str(local / "sweep.yaml"))
        started = time.monotonic()
        try:
            result = sweeps.run(
                remote, "--configfile", str(remote / "sweep.yaml"), *SLURM_ARGS,
                "--default-resources", f"slurm_partition={slurm.partition}",
                "--cores", str(slurm.cpus),  # a bundled job may not ask for more CPUs than the node has
                profile="slurm", timeout=RUN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Slurm run did not finish in {RUN_TIMEOUT_S} s\n{slurm.diagnostics()}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n{slurm.diagnostics()}") from None
        wall = time.monotonic() - started
        local_run.result()
    print(f"\nSlurm run: {wall:.1f} s wall")

    output = result.stdout + result.stderr
    # Each batch of points went through sbatch, and so did the sweep-wide tables and figures,
    # the timeline among them (one group job); only sweep_table, run_record and check ran locally.
    batches = sweeps.planned(result)["batches"]
    assert batches > 1 and "Group job tables" in output
    assert output.count("has been submitted with SLURM jobid") == batches + 1
    # The verdict names this run (its id in run.json), so it cannot be an earlier run's.
    run_id = json.loads((remote / "results" / "run.json").read_text())["run"]
    assert (remote / "results" / "status.txt").read_text() == f"all 4 point(s) ok (run {run_id})\n"
    assert sweeps.differences(sweeps.result_files(local), sweeps.result_files(remote)) == []


def test_slurm_profile_plans_the_sweep_without_a_cluster(tmp_path):
    """The profile parses, plans a job per batch of points and groups the sweep-wide steps
    (a dry run needs no Slurm)."""
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e '.[slurm]'")
    config = sweeps.write_config(tmp_path)
    result = sweeps.run(tmp_path, "--configfile", str(config), "--dry-run", profile="slurm")
    planned = sweeps.planned(result)
    assert planned["points"] == 4 and planned["batches"] > 1
    jobs = dict(line.split() for line in result.stdout.splitlines() if line.startswith("batch "))
    assert jobs == {"batch": str(planned["batches"])}
    assert result.stdout.count("Group job tables") == 1
