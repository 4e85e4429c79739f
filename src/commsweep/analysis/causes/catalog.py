"""The causes' catalog: ``catalog.yaml`` beside this module, read and checked once.

The catalog is data: each cause's slug, label and explanation, in the order tables and
figures list them. The rules that name a finding's cause are code (``rules.py``); a new
cause is an entry here and a rule there. Read on first use, not at import: the per-point
commands that import the causes (``commsweep audit``) need no explanation, and should not
pay for YAML.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ...base.errors import InputError

CATALOG_FILE = "catalog.yaml"
FIELDS = ("slug", "label", "explanation")


@dataclass(frozen=True)
class Cause:
    """A named reason an AICB workload differs from Megatron: a slug, a label, plain words."""

    slug: str
    label: str
    explanation: str


def _source():
    from importlib import resources

    return resources.files(__package__).joinpath(CATALOG_FILE)


def parse(text: str, source: Any = CATALOG_FILE) -> dict[str, Cause]:
    """The catalog's causes by slug, in its order; an InputError naming the line and field of
    an entry that is not a cause (a missing or unknown field, a slug given twice, an
    explanation that is not a sentence)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    root = yaml.compose(text, Loader=loader)
    if root is None or not isinstance(root, yaml.SequenceNode):
        raise InputError("expected a list of causes", file=source, line=1)
    out: dict[str, Cause] = {}
    for node in root.value:
        line = node.start_mark.line + 1
        if not isinstance(node, yaml.MappingNode):
            raise InputError("expected a cause (slug, label, explanation)", file=source, line=line)
        values = {key.value: value for key, value in node.value}
        for name in values:
            if name not in FIELDS:
                raise InputError(f"unknown field (a cause has {', '.join(FIELDS)})", file=source, line=line,
                                 field=name)
        for name in FIELDS:
            value = values.get(name)
            if not isinstance(value, yaml.ScalarNode) or not value.value.strip():
                raise InputError("expected text", file=source, line=line, field=name)
        slug = values["slug"].value
        if not slug.isidentifier() or slug in out:
            raise InputError(f"{slug!r} is not a new slug (a lowercase name)", file=source, line=line, field="slug")
        if not values["explanation"].value.endswith("."):
            raise InputError("an explanation is a sentence: it ends with '.'", file=source, line=line,
                             field="explanation")
        out[slug] = Cause(slug, values["label"].value, values["explanation"].value)
    return out


@cache
def causes() -> dict[str, Cause]:
    """The causes by slug, in the catalog's order."""
    source = _source()
    return parse(source.read_text(encoding="utf-8"), source)


@cache
def order() -> dict[str, int]:
    """Each cause's place in the catalog (the tables' order)."""
    return {slug: i for i, slug in enumerate(causes())}


def __getattr__(name: str) -> Any:
    # ``catalog.CAUSES``: the causes by slug, read on first use (see ``causes``).
    if name == "CAUSES":
        return causes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
