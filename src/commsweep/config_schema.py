"""Validate a sweep config against ``workflow/schemas/config.schema.yaml``, filling defaults.

The Snakefile validates with ``snakemake.utils.validate`` (same schema, same defaults);
this module gives the package and its CLI the same check without Snakemake, with errors
that name the config key.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from .errors import ConfigError


@cache
def schema() -> dict:
    import yaml

    text = resources.files("commsweep").joinpath("config.schema.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _key(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def validate_config(config: dict, *, source: str | Path | None = None) -> None:
    """Raise ConfigError naming the first bad key; fill defaults into ``config`` in place."""
    import jsonschema

    base = jsonschema.validators.validator_for(schema())

    def set_defaults(validator, properties, instance, sub_schema):
        if isinstance(instance, dict):
            for name, prop in properties.items():
                if "default" in prop and name not in instance:
                    instance[name] = _copy(prop["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, sub_schema)

    filling = jsonschema.validators.extend(base, {"properties": set_defaults})
    errors = sorted(filling(schema()).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        raise ConfigError(err.message, key=_key(err.absolute_path), source=source)


def _copy(value):
    import copy

    return copy.deepcopy(value)
