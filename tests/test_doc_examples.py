"""The docs work as written: every fenced ``sh`` block of README.md and docs/*.md runs.

Each page gets one scratch copy of the repository (its tracked and unignored files, and a
link to this checkout's ``.venv``); its ``sh`` blocks run there in order with ``bash -e``,
``.venv/bin`` first on PATH, so a block may use what an earlier block of the same page
wrote. In the copy, ``config/config.yaml`` is a 4-point sweep, so ``make run`` takes
seconds. On the line right before a fence (docs/development.md):

* ``<!-- example: needs gpu|simai|aicb|cluster -->`` or ``<!-- example: skip REASON -->``:
  the block is a skipped test with that reason;
* ``<!-- example: file NAME -->`` before another fence (``yaml``...): its text is written to
  NAME in the copy before the page's blocks run.

Also: every ``yaml`` block parses, every relative link points at a file (and heading) that
exists, and docs/audit.md lists every cause of analysis/causes.py with its explanation.
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

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
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


def skip_reason(block: Block) -> str | None:
    if block.annotation is None:
        return None
    kind, argument = block.annotation
    if kind == "needs":
        return f"needs {argument}"
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


def run_block(block: Block, folder: Path) -> None:
    if re.search(r"(^|\s)make\s", block.text):
        # make must find .venv up to date: it would otherwise reinstall this checkout's venv
        # from the scratch copy.
        fresh = subprocess.run(["make", "-q", ".venv/.base-installed"], cwd=folder, capture_output=True)
        if fresh.returncode != 0:
            pytest.skip(".venv is older than pyproject.toml: run `make setup` first")
    env = {**os.environ, "PATH": f"{folder / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=folder, env=env,
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
