"""No function in the package is longer than 60 lines unless its docstring says why.

A long function is usually several things in one: it is split into functions that each do
one thing. Where the length is the honest shape (a line-by-line emulation of another tool
that a reader compares side by side with its source, a template written out as the file it
makes), the docstring has a line starting with ``Long because`` that says so. Lines are
counted from the ``def`` to the function's last line, docstring included; methods and nested
functions count as functions. The code is read with ``ast``, not imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "commsweep"
LIMIT = 60
MARKER = "Long because"


def unexplained_long_functions(source: str, where: str = "<source>") -> list[str]:
    """``where:line name (N lines)`` for each function over ``LIMIT`` lines without the marker."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        if length <= LIMIT:
            continue
        doc = ast.get_docstring(node) or ""
        if not any(line.strip().startswith(MARKER) for line in doc.splitlines()):
            out.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return out


def _function(lines: int, doc: str) -> str:
    body = "\n".join(f"    x{i} = {i}" for i in range(lines - 3))
    return f'def f():\n    """{doc}"""\n{body}\n    return 0\n'


def test_the_check_counts_lines_and_reads_the_marker():
    assert unexplained_long_functions(_function(60, "Short enough.")) == []
    assert unexplained_long_functions(_function(61, "One line too many.")) == ["<source>:1 f (61 lines)"]
    assert unexplained_long_functions(_function(61, "What it does.\n\n    Long because it mirrors X.\n    ")) == []
    # The marker must start a line: a mention elsewhere is not a reason given.
    assert unexplained_long_functions(_function(61, "Not Long because of anything.")) == ["<source>:1 f (61 lines)"]
    nested = "class C:\n    def m(self):\n" + "\n".join(f"        y{i} = {i}" for i in range(61)) + "\n"
    assert unexplained_long_functions(nested) == ["<source>:2 m (62 lines)"]


def test_every_long_function_says_why():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += unexplained_long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == [], (
        f"functions over {LIMIT} lines: split each into functions that do one thing, or say why "
        f"its length is its honest shape in a docstring line starting {MARKER!r}:\n  " + "\n  ".join(found)
    )
