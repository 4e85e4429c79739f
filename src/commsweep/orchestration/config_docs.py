"""docs/config.md, written from the config schema: the one home of what each key means.

The page is generated, never edited: ``python -m commsweep.orchestration.config_docs`` rewrites it, and
``--check`` (what the test does) fails when it is stale. It lives in the package, not in
``workflow/scripts/``, because it reads what the package ships (the schema, the presets,
ModelSpec's defaults, the GPU table) and the test imports ``render`` directly.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

from ..setup.config_schema import schema

PAGE = Path("docs/config.md")
SCHEMA_PATH = "workflow/schemas/config.schema.yaml"

# A model field's default is ModelSpec's (the schema has none: see its $defs/model).
_MODEL_REF = "#/$defs/model"


def _text(description: str | None) -> str:
    return " ".join((description or "").split()).replace("|", "\\|")


def _yaml(value) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def _resolve(prop: dict) -> dict:
    ref = prop.get("$ref")
    if ref is None:
        return prop
    target = schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in prop.items() if k != "$ref"}}


def type_text(prop: dict) -> str:
    """A property's type in words: ``list of integers >= 1``, ``one of `a`, `b```."""
    prop = _resolve(prop)
    if "enum" in prop:
        return "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    kinds = prop.get("type", "")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    words = []
    for kind in kinds:
        if kind == "array":
            words.append("list of " + type_text(prop.get("items", {})).replace("integer", "integers")
                         .replace("string", "strings").replace("number", "numbers").replace("name", "names"))
        elif kind == "object":
            words.append("mapping")
        elif kind == "boolean":
            words.append("true/false")
        elif kind == "string" and "pattern" in prop:
            words.append("name")
        elif kind in ("integer", "number"):
            if "minimum" in prop and "maximum" in prop:
                words.append(f"{kind} from {prop['minimum']} to {prop['maximum']}")
            elif "minimum" in prop:
                words.append(f"{kind} >= {prop['minimum']}")
            elif "exclusiveMinimum" in prop:
                words.append(f"{kind} > {prop['exclusiveMinimum']}")
            else:
                words.append(kind)
        else:
            words.append(kind)
    return " or ".join(words)


def _model_defaults() -> dict:
    from ..setup.models import ModelSpec

    return {f.name: f.default for f in dataclasses.fields(ModelSpec) if f.default is not dataclasses.MISSING}


def rows(prop: dict, key: str, required: bool = False) -> Iterator[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for a property and everything under it."""
    if prop.get("$ref") == _MODEL_REF:
        model = _resolve(prop)
        needed = model["then"]["required"]
        defaults = _model_defaults()
        for name, field in model["properties"].items():
            if name in defaults:
                default = _yaml(defaults[name])
            else:
                default = "required without `base`" if name in needed else ""
            yield f"{key}.{name}", type_text(field), default, _text(field["description"])
        return
    prop = _resolve(prop)
    default = "required" if required else _yaml(prop["default"]) if "default" in prop else ""
    children = prop.get("properties")
    entries = prop.get("additionalProperties")
    if children:
        if "." in key:  # a nested mapping (e.g. simulator.overlap): its own row, then its keys
            yield key, "mapping", "", _text(prop.get("description"))
        for name, child in children.items():
            yield from rows(child, f"{key}.{name}", name in prop.get("required", ()))
    elif isinstance(entries, dict):
        yield from rows(entries, f"{key}.<name>")
    else:
        yield key, type_text(prop), default, _text(prop.get("description"))


def _table(lines: list[str], items) -> None:
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {t} | {d} | {m} |" for k, t, d, m in items]
    lines.append("")


def _presets(lines: list[str]) -> None:
    from ..setup.models import presets, preset_entries

    lines += [
        "### Presets",
        "",
        "Written in `src/commsweep/presets/models.yaml` exactly as a `models:` entry is (fields "
        "left out take the defaults above); `base: <preset>` starts a model of your own from one.",
        "",
        "| preset | layers | hidden | heads | query groups or MLA latents | FFN | vocabulary | experts (top-k) | source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in presets().items():
        experts = f"{m.num_experts} ({m.moe_topk})" if m.is_moe else ""
        if m.is_moe and m.moe_first_k_dense:
            k = m.moe_first_k_dense
            experts += f", the first {k} layers dense" if k > 1 else ", the first layer dense"
        groups = m.num_query_groups or ""
        if m.is_mla:
            groups = f"MLA: q {m.q_lora_rank or 'none'}, kv {m.kv_lora_rank}"
        shape = "swiglu, rope, rmsnorm, untied" if m.swiglu else ""
        source = _text(preset_entries()[name].get("source"))
        lines.append(
            f"| `{name}` | {m.num_layers} | {m.hidden_size} | {m.num_attention_heads} | {groups} | "
            f"{m.ffn_hidden_size}{' (' + shape + ')' if shape else ''} | {m.vocab_size} | {experts} | {source} |"
        )
    lines.append("")


def render() -> str:
    """The whole page."""
    from ..aiob.gpus import known_gpus

    import yaml

    root = schema()
    lines = [
        f"<!-- Generated from {SCHEMA_PATH} by `python -m commsweep.orchestration.config_docs`: edit the schema, not this page. -->",
        "",
        "# Configuring a sweep",
        "",
        _text(root["description"]),
        "",
    ]
    for example in root.get("examples", ()):
        # The example is a file of the doc-example test (tests/test_doc_examples.py), which
        # runs the commands below on it.
        lines += ["For example, `my-sweep.yaml`:", "", "<!-- example: file my-sweep.yaml -->", "```yaml",
                  yaml.safe_dump(example, sort_keys=False, default_flow_style=None, width=100).strip(), "```", "",
                  "`commsweep sweep FILE` checks a sweep and lists its points; "
                  "`make run CONFIG=FILE` runs it (and makes its report):", "",
                  "```sh", ".venv/bin/commsweep sweep my-sweep.yaml", "```", "",
                  "The default sweep is `config/config.yaml`:", "",
                  "```sh", ".venv/bin/commsweep sweep config/config.yaml", "```", ""]
    for name, prop in root["properties"].items():
        lines += [f"## `{name}`", ""]
        if prop.get("type") == "object":
            lines += [_text(prop.get("description")), ""]
            if prop.get("default"):
                lines += [f"Default: {_yaml(prop['default'])}.", ""]
        _table(lines, rows(prop, name))
        if name == "models":
            _presets(lines)
        if name == "aiob":
            lines += [f"GPUs the roofline knows (`commsweep profile --list-gpus` prints their peaks and sources): "
                      f"{', '.join(f'`{g}`' for g in known_gpus())}.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m commsweep.orchestration.config_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail (status 1) if the page is not what render() writes")
    parser.add_argument("page", nargs="?", default=str(PAGE), help=f"the page (default: {PAGE})")
    ns = parser.parse_args(argv)
    page = Path(ns.page)
    text = render()
    if ns.check:
        if not page.is_file() or page.read_text(encoding="utf-8") != text:
            print(f"{page} is stale: run `python -m commsweep.orchestration.config_docs` and commit it", file=sys.stderr)
            return 1
        return 0
    from ..base.files import write_text

    write_text(page, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
