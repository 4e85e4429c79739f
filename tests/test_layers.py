"""The package's architecture, checked from its own imports: layers, one way, no circle.

Every ``import`` and ``from ... import`` in ``src/commsweep`` (at module level or inside a
function: a late import is still a dependency) is read with ``ast``, not by importing the
code. A module may import its own layer and the layers below it; any import of a higher
layer, and any circle of imports between modules, fails with the modules named.
docs/development.md describes the layers and maps every module; the last test keeps that
map complete.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "commsweep"

# Bottom first. A module belongs to the longest entry that names it or a folder above it.
LAYERS = (
    "commsweep",  # the package root: __version__
    "commsweep.base",  # errors, files, flags, the results layout, status files
    "commsweep.setup",  # one point's setup: models, training, arguments, memory, points, config
    "commsweep.aiob",  # the stages, in the order their outputs feed each other
    "commsweep.workload",
    "commsweep.simulate",
    "commsweep.trace",
    "commsweep.analysis",
    "commsweep.orchestration",  # the sweep, batches, the Snakefile's hooks, the command line
    "commsweep.__main__",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, known: set[str]) -> set[str]:
    """The package modules ``path`` imports (a name imported from a package counts as that
    module when it is one, else the package itself)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "commsweep")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != "commsweep":
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else base)
    found.discard(name)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(path, set(mods)) for name, path in mods.items()}


def layer(module: str) -> int:
    matches = [i for i, prefix in enumerate(LAYERS) if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: add its folder to LAYERS"
    return max(matches, key=lambda i: len(LAYERS[i]))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges``: each strongly connected group of two or more
    modules (Tarjan's algorithm), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_checks_catch_a_circle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert layer("commsweep.base.files") < layer("commsweep.setup.training") < layer("commsweep.workload.format")
    assert layer("commsweep.analysis.audit") < layer("commsweep.orchestration.batch")
    assert layer("commsweep") < layer("commsweep.base")


def test_the_import_reader_resolves_relative_and_late_imports(tmp_path):
    edges = graph()
    # batch imports the stages' commands inside a function (a late import counts)
    assert "commsweep.orchestration.stages" in edges["commsweep.orchestration.batch"]
    # ``from ..base import paths`` is the module, ``from .. import __version__`` the package root
    assert "commsweep.base.paths" in edges["commsweep.analysis.summary"]
    assert "commsweep" in edges["commsweep.base.status"]


def test_no_import_circle():
    assert cycles(graph()) == [], "import circles (break each by moving what both need below them)"


def test_no_upward_import():
    upward = sorted(
        f"{mod} (layer {LAYERS[layer(mod)]}) imports {dep} (layer {LAYERS[layer(dep)]})"
        for mod, deps in graph().items() for dep in deps if layer(dep) > layer(mod)
    )
    assert upward == []


def test_every_folder_says_what_it_holds():
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and doc.splitlines()[0].endswith("."), f"{init}: needs a docstring whose first line says what it holds"


def test_the_code_map_names_every_module():
    text = (SRC.parent / "docs" / "development.md").read_text(encoding="utf-8")
    start = text.index("src/commsweep/")
    block = text[start: text.index("```", start)]
    mapped: set[str] = set()
    folders: list[str] = []  # the folder at each depth of indentation (two spaces a level)
    for line in block.splitlines()[1:]:
        m = re.match(r"^( +)(\S+)", line)
        if not m or len(m.group(1)) % 2:
            continue
        depth = len(m.group(1)) // 2 - 1
        name = m.group(2)
        if name.endswith("/"):
            folders[depth:] = [name]
        elif name.endswith(".py") and depth <= len(folders):
            mapped.add("".join(folders[:depth]) + name)
    files = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(files - mapped) == [], "docs/development.md's code map leaves these out"
    assert sorted(mapped - files) == [], "docs/development.md's code map names files that are gone"
