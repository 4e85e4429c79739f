"""Validate a sweep config against ``workflow/schemas/config.schema.yaml``, filling defaults.

The Snakefile validates with ``snakemake.utils.validate`` (same schema, same defaults);
this module gives the package and its CLI the same check without Snakemake, with errors
that name the config key. The schema is also the one home of what each key means:
``config_docs`` writes docs/config.md from it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from ..base.errors import ConfigError


@cache
def schema() -> dict:
    import yaml

    text = resources.files("commsweep").joinpath("config.schema.yaml").read_text(encoding="utf-8")
    # libyaml's loader where PyYAML has it: the same dict in a seventh of the time, at every
    # start of the Snakefile and of `commsweep sweep --check` (our own file: no error to place).
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _key(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


# What each of the schema's patterns allows, in words: jsonschema's own message quotes the
# regular expression. A pattern missing here is quoted as it is (a test keeps this complete).
PATTERN_WORDS = {
    "^[A-Za-z0-9][A-Za-z0-9.-]*$": "a name of letters, digits, '.' and '-' that starts with a letter or digit",
    "^[0-9]+(\\.[0-9]+){1,3}$": "a release such as 0.12.0",
    "^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$": (
        "a folder relative to the project folder, such as results/my-sweep: parts of letters, digits, "
        "'_', '.' and '-' joined by '/', none starting with '.' (no leading '/', no '..')"
    ),
}


def _pattern_message(err) -> str | None:
    """A failed ``pattern`` (of a value or, under ``propertyNames``, of a key) in words."""
    if err.validator != "pattern" or err.validator_value not in PATTERN_WORDS:
        return None
    return f"{err.instance!r} is not {PATTERN_WORDS[err.validator_value]}"


def _raise_first(errors, *, prefix: str | None = None, source: str | Path | None = None) -> None:
    """Raise a ConfigError for the first error (in key order), naming its key.

    An unknown or missing key is named itself (``sweep.colour: unknown key``), not only
    the mapping that holds it, as jsonschema's message would.
    """
    errors = sorted(errors, key=lambda e: [(isinstance(p, str), p) for p in e.absolute_path])
    if not errors:
        return
    err = errors[0]
    path, message = list(err.absolute_path), _pattern_message(err) or err.message
    if isinstance(err.instance, dict):
        if err.validator == "additionalProperties":
            allowed = err.schema.get("properties", {})
            unknown = [k for k in err.instance if k not in allowed]
            if len(unknown) == 1:
                path, message = [*path, unknown[0]], f"unknown key; expected one of {', '.join(allowed)}"
        elif err.validator == "required":
            missing = [k for k in err.validator_value if k not in err.instance]
            path, message = [*path, missing[0]], "missing (a required key)"
            if "then" in err.schema_path and "base" not in err.instance:  # a model of one's own without a base
                message += "; or start from a preset that has it, with `base:` (e.g. base: gpt-7b)"
    raise ConfigError(message, key=_key([prefix, *path] if prefix else path), source=source)


def validate_config(config: dict, *, source: str | Path | None = None) -> None:
    """Raise ConfigError naming the first bad key; fill defaults into ``config`` in place, and
    write a sweep axis given as one value (``tp: 4``, which the schema allows) as a one-value
    list, so that every reader (the Snakefile's, ``commsweep sweep``'s) sees lists."""
    import jsonschema

    base = jsonschema.validators.validator_for(schema())

    def set_defaults(validator, properties, instance, sub_schema):
        if isinstance(instance, dict):
            for name, prop in properties.items():
                if "default" in prop and name not in instance:
                    instance[name] = _copy(prop["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, sub_schema)

    filling = jsonschema.validators.extend(base, {"properties": set_defaults})
    _raise_first(filling(schema()).iter_errors(config), source=source)
    sweep = config.get("sweep")
    if isinstance(sweep, dict):
        for name, value in sweep.items():
            if value is not None and not isinstance(value, list):
                sweep[name] = [value]


@cache
def _model_validator():
    import jsonschema

    root = schema()
    sub = {"$schema": root["$schema"], "$ref": "#/$defs/model", "$defs": root["$defs"]}
    return jsonschema.validators.validator_for(root)(sub)


def validate_model(values: dict, *, key: str, source: str | Path | None = None) -> None:
    """Check one ``models:`` entry against ``$defs/model``; a ConfigError naming ``key.field`` otherwise."""
    _raise_first(_model_validator().iter_errors(values), prefix=key, source=source)


def _copy(value):
    import copy

    return copy.deepcopy(value)
