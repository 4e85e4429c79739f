"""The docs work as written: every fenced ``sh`` block of README.md, docs/*.md and
profiles/README.md runs.

Each page gets one scratch copy of the repository (its tracked and unignored files, and a
link to this checkout's ``.venv``); its ``sh`` blocks run there in order with ``bash -e``,
``.venv/bin`` first on PATH, so a block may use what an earlier block of the same page
wrote. In the copy, ``config/config.yaml`` is a 4-point sweep, so ``make run`` takes
seconds. A block's ``.venv/bin/pip install`` runs with ``--dry-run --no-index``: the link
is this checkout's own venv, which must already hold what the command would install (``make
test`` installs every extra), and is not to be re-pointed at the copy. On the line right
before a fence (docs/development.md):

* ``<!-- example: needs simai|ns3|aicb -->``: the block runs where SIMAI_ROOT (simai: a
  SimAI build with ``bin/SimAI_analytical``; ns3: with ``bin/SimAI_simulator``) or AICB_ROOT
  (an AICB checkout) names something usable, and is a skipped test saying why elsewhere;
* ``<!-- example: needs gpu|cluster -->`` or ``<!-- example: skip REASON -->``: the block
  is a skipped test with that reason;
* ``<!-- example: file NAME -->`` before another fence (``yaml``...): its text is written to
  NAME in the copy before the page's blocks run.

Also: every ``yaml`` block parses, every relative link points at a file (and heading) that
exists, a block whose Snakemake needs an executor or storage plugin installs the extra that
holds it, and docs/audit.md lists every cause of analysis/causes.py with its explanation.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "profiles" / "README.md"]
FENCE = re.compile(r"^```(\S*)\s*$")
ANNOTATION = re.compile(r"^<!-- example: (needs|skip|file) ?(.*?) -->$")
SMALL_SWEEP = (
    "# The doc-example test's sweep (tests/test_doc_examples.py): 4 points.\n"
    "sweep: {model: [gpt-7b], world_size: [16], tp: [2], sp: [false], aiob: [false, true],\n"
    "        schedule: [aicb, megatron], global_batch: [16], network: [netA]}\n"
)
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    language: str
    text: str
    annotation: tuple[str, str] | None  # (needs|skip|file, argument)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            i += 1
        note = ANNOTATION.match(lines[start - 1].strip()) if start else None
        out.append(Block(page, start + 1, m.group(1), "\n".join(lines[start + 1:i]) + "\n",
                         (note.group(1), note.group(2)) if note else None))
        i += 1
    return out


def shell_blocks() -> list:
    params = []
    for page in PAGES:
        for block in blocks(page):
            if block.language == "sh":
                # A block that runs a sweep takes seconds to tens of seconds: a slow test.
                slow = re.search(r"\bsnakemake\b|\bmake run\b", block.text) is not None
                params.append(pytest.param(block, id=block.where, marks=[pytest.mark.slow] if slow else []))
    return params


def _simai(root: str) -> None:
    from commsweep.simulate import simai

    simai.find_binary(Path(root))


def _ns3(root: str) -> None:
    from commsweep.simulate.ns3 import runner

    runner.find_binary(root)


def _aicb(root: str) -> None:
    from commsweep.workload import aicb_runner

    aicb_runner.checkout(root)


# What a ``needs`` example needs that a machine may have: the variable that names it, and the
# program's own check that it is usable (raises ConfigError saying why not).
NEEDS = {"simai": ("SIMAI_ROOT", _simai), "ns3": ("SIMAI_ROOT", _ns3), "aicb": ("AICB_ROOT", _aicb)}


def needs_reason(what: str, environ=os.environ) -> str | None:
    """Why a ``needs`` example cannot run here, or None when it can."""
    from commsweep.base.errors import ConfigError

    if what not in NEEDS:  # a GPU, a cluster: never in the tests
        return f"needs {what}"
    variable, usable = NEEDS[what]
    value = environ.get(variable)
    if not value:
        return f"needs {what}: set {variable}"
    try:
        usable(value)
    except ConfigError as err:
        return f"needs {what}: {variable}={value}: {err}"
    return None


def skip_reason(block: Block) -> str | None:
    if block.annotation is None:
        return None
    kind, argument = block.annotation
    if kind == "needs":
        return needs_reason(argument)
    if kind == "skip":
        return argument or "skipped"
    return None


# -- one scratch copy per page --------------------------------------------------------------


def repository_files() -> list[Path]:
    """The checkout's tracked and unignored files (what a user's clone holds)."""
    found = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True)
    if found.returncode != 0:
        pytest.skip(f"git cannot list the checkout's files: {found.stderr.strip()}")
    return [Path(p) for p in found.stdout.split("\0") if p and (REPO / p).is_file()]


@dataclass
class Scratch:
    folder: Path
    next: int = 0  # index of the page's next block to run
    broken: str | None = None


SCRATCH: dict[Path, Scratch] = {}


def scratch_of(page: Path, factory) -> Scratch:
    if page not in SCRATCH:
        folder = factory.mktemp("doc-" + page.stem)
        for rel in repository_files():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, target)  # keeps mtimes: make sees .venv up to date
        (folder / ".venv").symlink_to(Path(sys.prefix))
        (folder / "config" / "config.yaml").write_text(SMALL_SWEEP)
        for block in blocks(page):
            if block.annotation and block.annotation[0] == "file":
                (folder / block.annotation[1]).write_text(block.text)
        SCRATCH[page] = Scratch(folder)
    return SCRATCH[page]


PIP_INSTALL = re.compile(r"(\.venv/bin/pip install)(?=\s)")


def checked_installs(text: str) -> str:
    """A block's text with its pip installs made checks: pip resolves what it would install
    from what the venv holds, and fails when the venv lacks any of it."""
    return PIP_INSTALL.sub(r"\1 --dry-run --no-index --no-build-isolation --quiet", text)


def run_block(block: Block, folder: Path) -> None:
    if re.search(r"(^|\s)make\s", block.text):
        # make must find .venv up to date: it would otherwise reinstall this checkout's venv
        # from the scratch copy.
        fresh = subprocess.run(["make", "-q", ".venv/.base-installed"], cwd=folder, capture_output=True)
        if fresh.returncode != 0:
            pytest.skip(".venv is older than pyproject.toml: run `make setup` first")
    env = {**os.environ, "PATH": f"{folder / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", checked_installs(block.text)], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise AssertionError(f"{block.where}: the example exits {result.returncode}\n{block.text}\n"
                             f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}")


@pytest.mark.parametrize("block", shell_blocks())
def test_shell_example_runs_as_written(block, tmp_path_factory):
    reason = skip_reason(block)
    if reason is not None:
        pytest.skip(f"{block.where}: {reason}")
    scratch = scratch_of(block.page, tmp_path_factory)
    page_blocks = [b for b in blocks(block.page) if b.language == "sh"]
    index = page_blocks.index(block)
    # The page's earlier blocks first (already run when the tests run in order).
    for earlier in page_blocks[scratch.next:index]:
        if skip_reason(earlier) is None and scratch.broken is None:
            try:
                run_block(earlier, scratch.folder)
            except AssertionError:
                scratch.broken = earlier.where
        scratch.next = page_blocks.index(earlier) + 1
    if scratch.broken is not None:
        pytest.fail(f"an earlier example of the page failed: {scratch.broken}")
    scratch.next = index + 1
    try:
        run_block(block, scratch.folder)
    except AssertionError:
        scratch.broken = block.where
        raise


# -- the rest of the docs ------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_yaml_examples_parse(page):
    for block in blocks(page):
        if block.language in ("yaml", "yml"):
            try:
                yaml.safe_load(block.text)
            except yaml.YAMLError as err:
                pytest.fail(f"{block.where}: {err}")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_relative_links_point_at_what_exists(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.relative_to(REPO)}: link to {target}: no such file"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"{page.relative_to(REPO)}: link to {target}: no such heading"


def test_the_audit_page_lists_every_cause():
    from commsweep.analysis import causes

    text = (REPO / "docs" / "audit.md").read_text(encoding="utf-8")
    for cause in causes.CAUSES.values():
        assert f"| `{cause.slug}` | {cause.explanation} |" in text, cause.slug


def test_the_readme_is_a_front_door():
    assert (REPO / "README.md").stat().st_size < 12 * 1024


def test_needs_examples_run_where_the_variable_names_a_usable_build(tmp_path):
    simai, aicb = tmp_path / "simai", tmp_path / "aicb"
    assert needs_reason("simai", {}) == "needs simai: set SIMAI_ROOT"
    assert "SimAI_analytical not found" in needs_reason("simai", {"SIMAI_ROOT": str(simai)})
    (simai / "bin").mkdir(parents=True)
    for name in ("SimAI_analytical", "SimAI_simulator"):
        (simai / "bin" / name).write_text("#!/bin/sh\n")
    assert "is not executable" in needs_reason("ns3", {"SIMAI_ROOT": str(simai)})
    (simai / "bin" / "SimAI_analytical").chmod(0o755)
    assert needs_reason("simai", {"SIMAI_ROOT": str(simai)}) is None
    assert "SimAI_simulator is not executable" in needs_reason("ns3", {"SIMAI_ROOT": str(simai)})
    (simai / "bin" / "SimAI_simulator").chmod(0o755)
    assert needs_reason("ns3", {"SIMAI_ROOT": str(simai)}) is None
    assert "not an AICB checkout" in needs_reason("aicb", {"AICB_ROOT": str(aicb)})
    (aicb / "workload_generator").mkdir(parents=True)
    (aicb / "workload_generator" / "SimAI_training_workload_generator.py").write_text("")
    assert needs_reason("aicb", {"AICB_ROOT": str(aicb)}) is None
    assert needs_reason("gpu", {"SIMAI_ROOT": str(simai)}) == "needs gpu"


def test_every_needs_annotation_names_something_known():
    known = {*NEEDS, "gpu", "cluster"}
    for page in PAGES:
        for block in blocks(page):
            if block.annotation and block.annotation[0] == "needs":
                assert block.annotation[1] in known, f"{block.where}: needs {block.annotation[1]}?"


def test_a_pip_install_in_an_example_fails_where_the_venv_lacks_what_it_installs(tmp_path):
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    lacking = subprocess.run(["bash", "-c", checked_installs(".venv/bin/pip install commsweep-no-such-package==1.0")],
                             cwd=tmp_path, capture_output=True, text=True)
    assert lacking.returncode != 0 and "commsweep-no-such-package" in lacking.stderr
    held = subprocess.run(["bash", "-c", checked_installs(".venv/bin/pip install 'pyyaml'")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert held.returncode == 0, held.stderr


def _extras_packages(extras: list[str]) -> set[str]:
    """The packages pyproject.toml's extras install (an extra may name another: commsweep[s3])."""
    import tomllib

    table = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out, todo = set(), list(extras)
    while todo:
        for requirement in table[todo.pop()]:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
            inner = re.match(r"commsweep\[([^\]]+)\]", requirement)
            if inner:
                todo += inner.group(1).split(",")
            else:
                out.add(name.lower())
    return out


def plugins_needed(text: str) -> set[str]:
    """The Snakemake plugins a block's snakemake commands load: the executor and the default
    storage provider of the workflow profile, or those the command line gives instead."""
    needed = set()
    for command in text.replace("\\\n", " ").splitlines():
        if not re.search(r"\bsnakemake\b", command):
            continue
        settings = {}
        profile = re.search(r"--workflow-profile\s+(\S+)", command)
        if profile:
            settings.update(yaml.safe_load((REPO / profile.group(1) / "config.yaml").read_text()) or {})
        for key in ("executor", "default-storage-provider"):
            given = re.search(rf"--{key}\s+(\S+)", command)
            if given:
                settings[key] = given.group(1)
        if settings.get("executor", "local") not in ("local", "dryrun", "touch"):
            needed.add(f"snakemake-executor-plugin-{settings['executor']}")
        if settings.get("default-storage-provider"):
            needed.add(f"snakemake-storage-plugin-{settings['default-storage-provider']}")
    return needed


def test_a_cluster_example_installs_the_plugins_it_needs():
    """`make run` installs no Snakemake plugin: a block that needs one installs its extra itself."""
    checked = 0
    for page in PAGES:
        for block in blocks(page):
            if block.language != "sh" or not (needed := plugins_needed(block.text)):
                continue
            extras = [e for found in re.findall(r"pip install -e ['\"]?\.\[([^\]]+)\]", block.text)
                      for e in found.split(",")]
            assert needed <= _extras_packages(extras), (
                f"{block.where}: needs {sorted(needed - _extras_packages(extras))}: "
                f"install its extra in the block (`.venv/bin/pip install -e '.[EXTRA]'`)")
            checked += 1
    assert checked >= 6  # the dry and real runs of docs/cluster.md and profiles/README.md
