"""The software a cluster's nodes run: the conda environment and the container definition
(workflow/envs/), each rule's reference to them, and what can be checked of them here.

Neither conda nor a container registry can be reached on this machine, so the environment is
not built by conda and the image not built at all; what is checked: both agree with
pyproject.toml (Python, the package and its extras), every rule names the environment and the
image, and the environment's pip section installs this package into a fresh venv whose
Snakemake runs the default sweep (the slow test; the requirements it reads from this venv).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import sweeps
from conftest import REPO

ENVS = REPO / "workflow" / "envs"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def conda_env() -> dict:
    return yaml.safe_load((ENVS / "commsweep.yaml").read_text())


def pip_section(env: dict) -> list[str]:
    [pip] = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    return pip


def minimum_python() -> tuple[int, int]:
    found = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["requires-python"])
    assert found, PYPROJECT["requires-python"]
    return int(found[1]), int(found[2])


def test_conda_env_installs_this_package_with_the_python_it_needs():
    env = conda_env()
    [python] = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    version = re.fullmatch(r"python\s*=\s*(\d+)\.(\d+)", python)
    assert version and (int(version[1]), int(version[2])) >= minimum_python()
    assert "pip" in env["dependencies"]
    # The package itself, from the workflow's folder: its requirements are pyproject.toml's.
    assert pip_section(env) == ["${COMMSWEEP_SOURCE}"]
    assert set(env["channels"]) == {"conda-forge", "nodefaults"}


def test_dockerfile_is_a_public_python_image_and_this_package():
    text = (ENVS / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    [base] = [line.split()[1] for line in lines if line.startswith("FROM ")]
    version = re.fullmatch(r"python:(\d+)\.(\d+)-slim", base)
    assert version and (int(version[1]), int(version[2])) >= minimum_python()
    # What it copies is this checkout's package, and what it installs are this package's extras.
    for line in lines:
        if line.startswith("COPY "):
            for name in line.split()[1:-1]:
                assert (REPO / name).exists(), name
    [install] = re.findall(r'pip install --no-cache-dir "\.\[([^\]]+)\]"', text)
    assert set(install.split(",")) <= set(PYPROJECT["optional-dependencies"])


def test_every_rule_names_the_environment_and_the_image():
    rules = sorted((REPO / "workflow" / "rules").glob("*.smk"))
    for path in rules:
        text = path.read_text()
        count = len(re.findall(r"^\s+rule(\s+\w+)?:\s*$", text, re.MULTILINE))
        assert text.count("conda:\n") == count, path
    assert 'COMMSWEEP_ENV = "../envs/commsweep.yaml"' in (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert (REPO / "workflow" / "rules" / "../envs/commsweep.yaml").resolve() == ENVS / "commsweep.yaml"
    assert re.search(r'^container: os.environ.get\("COMMSWEEP_CONTAINER", ', (REPO / "Snakefile").read_text(),
                     re.MULTILINE)


@pytest.mark.slow
def test_environment_installs_into_a_fresh_venv_and_runs_the_default_sweep(tmp_path):
    """The environment's pip section, as conda hands it to pip (``${COMMSWEEP_SOURCE}``, which
    pip expands), installs this package, from a copy of the files the Dockerfile copies, into a
    fresh venv whose Snakemake then runs the default sweep with it.

    Lean on time: the package's requirements (pyproject.toml's pins) are not downloaded and
    installed again (minutes on a loaded 2-core machine); the fresh venv reads them from this
    venv's site-packages (a ``.pth`` line), where `make` installed those same pins with pip.
    """
    import sysconfig

    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(pip_section(conda_env())) + "\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "commsweep-requirements.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "COMMSWEEP_SOURCE": str(source)}
    env.pop("PYTHONPATH", None)
    installed = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(requirements)],
                               env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-4000:]
    # The commsweep that runs is the fresh venv's (installed from the copy), not this checkout's.
    where = subprocess.run([str(python), "-c", "import commsweep; print(commsweep.__file__)"],
                           capture_output=True, text=True, check=True, env=env, cwd=tmp_path).stdout
    assert where.startswith(str(venv))

    workdir = tmp_path / "work"
    workdir.mkdir()
    result = subprocess.run(
        [str(python), "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "2"],
        capture_output=True, text=True, timeout=600,
        env={**env, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert result.returncode == 0, result.stderr[-4000:]
    planned = sweeps.planned(result)
    verdict = (workdir / "results" / "status.txt").read_text()
    assert planned["points"] > 4 and verdict.startswith(f"all {planned['points']} point(s) ok")
