"""The sweep without a shared filesystem: every file through a real storage plugin.

Snakemake with ``--shared-fs-usage none`` and a default storage provider (what the
Kubernetes and batch-service executors run) gives each job local copies of its declared
inputs and keeps only what it declares as outputs. Here the provider is
snakemake-storage-plugin-fs (the ``storage`` extra; it copies with rsync) and the storage a
folder of its own: the run must leave every result there, file for file equal to a local
run's, and nothing in its working directory's ``results/``. Without the plugin or rsync the
test skips with the reason; under CI (``CI=true``, where ``make test`` installs the extra and
.ci/run installs rsync) it fails instead.
"""

from __future__ import annotations

import os
import shutil

import pytest

import sweeps
from commsweep.orchestration import storage


def _needs_fs_storage() -> None:
    missing = []
    try:
        import snakemake_storage_plugin_fs  # noqa: F401
    except ImportError:
        missing.append("snakemake-storage-plugin-fs (pip install -e '.[storage]')")
    if shutil.which("rsync") is None:
        missing.append("rsync (apt-get install rsync)")
    if missing:
        message = "needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run the storage test")
        pytest.skip(message)


def sweeps_points(config):
    from commsweep.orchestration import sweep

    points, _ = sweep.points_from_config(sweep.load_config(config))
    return points


def storage_args(remote) -> tuple[str, ...]:
    return ("--default-storage-provider", "fs", "--default-storage-prefix", str(remote), "--shared-fs-usage", "none")


@pytest.mark.slow
def test_sweep_through_storage_equals_local_run(tmp_path):
    _needs_fs_storage()
    local, workdir, remote = tmp_path / "local", tmp_path / "node", tmp_path / "storage"
    for folder in (local, workdir):
        sweeps.write_config(folder)
    remote.mkdir()
    sweeps.run(local, "--configfile", str(local / "sweep.yaml"))

    result = sweeps.run(workdir, "--configfile", str(workdir / "sweep.yaml"), *storage_args(remote))
    output = result.stdout + result.stderr
    batches = sweeps.planned(result)["batches"]
    # A rule per batch, each declaring its points' files, which went through the storage.
    assert batches > 1 and output.count("rule batch_") == batches
    assert "(in storage)" in output
    # Every result is in the storage, as a local run leaves it; nothing was left beside it.
    assert not (workdir / "results").exists()
    assert (remote / "results" / "status.txt").read_text().startswith("all 4 point(s) ok")
    assert sweeps.differences(sweeps.result_files(local), sweeps.result_files(remote)) == []

    # Nothing changed: nothing to do (no parameter of a job moves between runs).
    again = sweeps.run(workdir, "--configfile", str(workdir / "sweep.yaml"), *storage_args(remote), "--dry-run")
    assert "Nothing to be done" in again.stdout + again.stderr


def test_storage_dry_run_declares_each_point_file(tmp_path):
    """The plan without a shared filesystem: one rule per batch, each listing its points' files,
    and the sweep-wide steps reading them from the storage."""
    _needs_fs_storage()
    config = sweeps.write_config(tmp_path)
    remote = tmp_path / "storage"
    remote.mkdir()
    result = sweeps.run(tmp_path, "--configfile", str(config), *storage_args(remote), "--dry-run")
    out = result.stdout
    batches = sweeps.planned(result)["batches"]
    assert out.count("rule batch_") == batches
    # Each point's times come back from its batch to the summary, through the storage.
    summarize = out[out.index("rule tables:"):].split("\n\n")[0]
    points = {p.point_key for p in sweeps_points(config)}
    assert len(points) == 4
    for point in points:
        assert f"{remote}/results/points/{point}/times.csv (retrieve from storage)" in summarize


def test_rebase_takes_the_root_off_paths_under_it():
    root = ".snakemake/storage/fs/srv/run/"
    words = [f"{root}results/a.csv", f"--comp_filepath={root}results/p.txt", "results/b.csv", "-o", "7"]
    assert storage.rebase(words, root) == ["results/a.csv", "--comp_filepath=results/p.txt", "results/b.csv",
                                           "-o", "7"]
    assert storage.rebase(words, "") == words


def test_enter_runs_from_the_root_once(tmp_path, monkeypatch):
    root = tmp_path / "copies"
    (root / "results").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(storage.ROOT_ENV, "copies/")
    assert storage.enter(["copies/results/x", "keep"]) == ["results/x", "keep"]
    assert os.getcwd() == str(root)
    # Taken out of the environment: a command started from here (or a second call) stays put.
    assert storage.ROOT_ENV not in os.environ
    assert storage.enter(["results/x"]) == ["results/x"] and os.getcwd() == str(root)


@pytest.mark.parametrize("name", ["kubernetes", "aws-batch"])
def test_profiles_without_a_shared_filesystem_bundle_the_tables_as_slurm_does(name):
    """The Kubernetes and AWS Batch profiles (docs/cluster.md): every file through S3, and the
    sweep-wide steps in one job, the same group as on Slurm (whose profile is kept up to date
    with the rules by its dry-run test)."""
    import yaml

    from conftest import REPO

    profile = yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())
    slurm = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["shared-fs-usage"] == "none" and profile["default-storage-provider"] == "s3"
    assert profile["executor"] == name and profile["groups"] == slurm["groups"]
