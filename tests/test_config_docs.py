"""The config schema is the one home of what each key means, and docs/config.md is written from it."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import tomllib

import pytest

from commsweep.base.errors import ConfigError
from commsweep.orchestration import config_docs, sweep
from commsweep.setup.config_schema import schema, validate_config
from commsweep.setup.models import ModelSpec, model_from_dict, preset_entries, presets
from conftest import REPO


def properties(node, key=""):
    """(key, property) for every property of the schema, nested ones and $defs/model's included."""
    for name, prop in node.get("properties", {}).items():
        yield f"{key}.{name}" if key else name, prop
        yield from properties(prop, f"{key}.{name}" if key else name)
    entries = node.get("additionalProperties")
    if isinstance(entries, dict):
        yield from properties(entries, f"{key}.<name>")


def test_every_property_has_a_description_and_default():
    root = schema()
    every = [*properties(root), *properties(root["$defs"]["model"], "models.<name>")]
    assert len(every) > 40
    assert [key for key, prop in every if not str(prop.get("description", "")).strip()] == []
    # A key the user may leave out has a default, except a model's fields (ModelSpec's defaults,
    # filled after `base`) and the required keys of a network.
    network = root["properties"]["networks"]["additionalProperties"]
    without = [key for key, prop in properties(root) if "default" not in prop and not key.startswith("networks.<name>.")]
    assert without == []
    assert set(network["required"]) == set(network["properties"])


def test_model_fields_carry_no_default():
    # The validator fills defaults in: one here would override the `base` preset's value.
    assert [k for k, p in schema()["$defs"]["model"]["properties"].items() if "default" in p] == []


_TYPES = {"int": ["integer"], "int | None": ["integer", "null"], "bool": ["boolean"], "str": ["string"],
          "str | None": ["string", "null"], "float": ["number"]}


def test_model_schema_mirrors_modelspec():
    model = schema()["$defs"]["model"]
    fields = {f.name: f for f in dataclasses.fields(ModelSpec) if f.name != "name"}
    assert set(model["properties"]) - {"base", "source"} == set(fields)
    for name, field in fields.items():
        prop = model["properties"][name]
        kinds = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        assert kinds == _TYPES[field.type], name
        if "enum" in prop:
            assert field.default in prop["enum"], name
    required = {n for n, f in fields.items() if f.default is dataclasses.MISSING}
    assert set(model["then"]["required"]) == required


def test_config_page_is_generated_from_the_schema():
    page = REPO / "docs" / "config.md"
    assert page.read_text(encoding="utf-8") == config_docs.render(), (
        "docs/config.md is stale: run `.venv/bin/python -m commsweep.orchestration.config_docs` and commit it")


def test_check_mode_fails_on_a_stale_page(tmp_path, capsys):
    page = tmp_path / "config.md"
    assert config_docs.main(["--check", str(page)]) == 1
    assert config_docs.main([str(page)]) == 0
    assert config_docs.main(["--check", str(page)]) == 0
    page.write_text(page.read_text().replace("Tensor-parallel size", "TP"))
    assert config_docs.main(["--check", str(page)]) == 1
    assert "is stale" in capsys.readouterr().err


def test_every_key_is_on_the_page():
    text = config_docs.render()
    for key, _ in properties(schema()):
        assert f"`{key}`" in text, key
    for name in presets():
        assert f"`{name}`" in text


def test_schema_examples_are_valid_sweeps():
    examples = schema()["examples"]
    assert examples
    for example in examples:
        config = copy.deepcopy(example)
        validate_config(config)
        points, invalid = sweep.points_from_config(config)
        assert len(points) == 4 and not invalid
        # It answers the question: each setting both as AICB writes it and as Megatron runs it.
        assert {p.schedule for p in points} == {"aicb", "megatron"}


def test_every_preset_names_its_source():
    entries = preset_entries()
    assert list(entries) == list(presets())
    assert [name for name, e in entries.items() if len(e.get("source", "").split()) < 3] == []


def test_a_bad_preset_entry_names_its_file_and_key():
    with pytest.raises(ConfigError) as err:
        model_from_dict("gpt-x", {**preset_entries()["gpt-7b"], "num_layers": "32"}, key="", source="models.yaml")
    assert str(err.value) == "models.yaml: gpt-x.num_layers: '32' is not of type 'integer'"


def test_package_data_ships_every_data_file():
    # A non-editable install gets only what package-data names: the schema and the presets.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["commsweep"]
    package = REPO / "src" / "commsweep"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert "presets/models.yaml" in data
    assert [d for d in data if not any(fnmatch.fnmatch(d, pat) for pat in patterns)] == []
