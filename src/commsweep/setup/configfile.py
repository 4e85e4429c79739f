"""Reading sweep configs: YAML files and ``--config KEY=VALUE`` overrides, as one config.

The Snakefile and ``commsweep sweep`` both read a sweep through here, so a config means
the same to both and every error names its place: a YAML error its file, line and
column; a bad value its key (``config_schema``). Snakemake's own reading of
``--configfile`` and ``--config`` is replaced, because it reports a YAML error without a
place and reads ``--config skip_invalid=true`` as the string ``'true'``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..base.errors import ConfigError


def read(path: str | Path) -> dict:
    """The mapping of one config file, not yet validated; ConfigError naming file, line, column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read the file: {err.strerror}", source=path) from None
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text (byte {err.start})", source=f"{path}:{line}") from None
    config = parse_yaml(text, str(path))
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError("the config must be a mapping at the top level", key="<top level>", source=path)
    return config


def parse_yaml(text: str, source: str):
    """``yaml.safe_load`` of ``text``; its errors as ConfigError at ``source:LINE:COLUMN``."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        if mark is not None:
            line, column = mark.line + 1, mark.column + 1
        else:  # a reader error (a character YAML forbids) has a position instead
            line, column = _place(text, getattr(err, "position", 0))
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"invalid YAML: {problem}", source=f"{source}:{line}:{column}") from None
    except ValueError:  # PyYAML's int() of a number with more than 4300 digits
        long = re.search(r"[0-9_]{4000,}", text)
        line, column = _place(text, long.start()) if long else (1, 1)
        raise ConfigError("invalid YAML: a number with thousands of digits", source=f"{source}:{line}:{column}") from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", source=f"{source}:1:1") from None


def _place(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def parse_override(entry: str) -> tuple[str, object]:
    """One ``--config KEY=VALUE``: the value read as YAML (``true``, ``[2, 4]``, ``{tp: [2]}``)."""
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise ConfigError(f"expected KEY=VALUE, got {entry!r}", source="--config")
    return key, parse_yaml(value, f"--config {key}") if value != "" else None


def merge(base: dict, update: dict) -> dict:
    """``update`` merged into a copy of ``base``, mappings key by key (as Snakemake merges configs)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load(files: Sequence[str | Path], overrides: Iterable[str] = ()) -> dict:
    """The sweep config of ``files`` (later ones win) and ``--config`` ``overrides``,
    validated against the schema, with its defaults filled in."""
    from .config_schema import validate_config

    config: dict = {}
    for path in files:
        config = merge(config, read(path))
    overrides = list(overrides)
    for entry in overrides:
        key, value = parse_override(entry)
        config = merge(config, {key: value})
    sources = [str(f) for f in files] + (["--config"] if overrides else [])
    validate_config(config, source=", ".join(sources) or None)
    return config
