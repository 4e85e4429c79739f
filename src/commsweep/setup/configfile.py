"""Reading sweep configs: YAML files and ``--config KEY=VALUE`` overrides, as one config.

The Snakefile and ``commsweep sweep`` both read a sweep through here, so a config means
the same to both and every error names its place: a YAML error its file, line and
column; a key written twice its file, line and key (YAML would keep the last in silence);
a bad value its key (``config_schema``), and so do the config's networks and models and the
axes that name them (``networks_and_models``), all with the file. Snakemake's own reading of
``--configfile`` and ``--config`` is replaced, because it reports a YAML error without a
place and reads ``--config skip_invalid=true`` as the string ``'true'``. (Snakemake reads
``--configfile`` once before the Snakefile runs, so a YAML error there is Snakemake's to
report: ``commsweep sweep --check FILE`` names its place.)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..base.errors import ConfigError

if TYPE_CHECKING:
    from .models import ModelSpec
    from .network import Network


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
    if config is None:  # nothing but comments: a sweep of every default, surely not what was meant
        raise ConfigError("the file is empty (no key at all): a sweep config needs at least one key "
                          "(config/config.yaml is the default sweep; `{}` asks for every default)", source=f"{path}:1")
    if not isinstance(config, dict):
        raise ConfigError("the config must be a mapping at the top level", key="<top level>", source=path)
    return config


def parse_yaml(text: str, source: str):
    """``yaml.safe_load`` of ``text``; its errors as ConfigError at ``source:LINE:COLUMN``, and
    a key given twice in one mapping as a ConfigError at ``source:LINE`` naming the key."""
    import yaml

    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _refuse_repeated_keys(node, source)
            return loader.construct_document(node)
        finally:
            loader.dispose()
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


def _refuse_repeated_keys(root, source: str) -> None:
    """A ConfigError for the first mapping key given twice, at its second line, naming its key
    path: YAML keeps the last value and drops the first in silence (``tp: [1]`` then ``tp: [2]``)."""
    import yaml

    seen_nodes: set[int] = set()
    todo = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:  # an alias: a node already checked (or one holding itself)
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += [(item, f"{path}[{i}]") for i, item in reversed(list(enumerate(node.value)))]
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                where = f"{path}.{key.value}" if path else key.value
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    raise ConfigError(f"given twice (first at line {first[key.tag, key.value]}): YAML would keep only "
                                      "the last and ignore the first; remove one", key=where, source=f"{source}:{line}")
                first[key.tag, key.value] = line
            todo += [(value, f"{path}.{key.value}" if path else str(key.value)) for key, value in reversed(node.value)]


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


def load(files: Sequence[str | Path], overrides: Iterable[str] = (), *, given_as: str = "--config") -> dict:
    """The sweep config of ``files`` (later ones win) and ``--config`` ``overrides``,
    validated against the schema, with its defaults filled in. ``given_as``: the option an
    error names for the overrides (``commsweep sweep --results DIR`` is one)."""
    from .config_schema import validate_config

    config: dict = {}
    for path in files:
        config = merge(config, read(path))
    overrides = list(overrides)
    for entry in overrides:
        key, value = parse_override(entry)
        config = merge(config, {key: value})
    sources = [str(f) for f in files] + ([given_as] if overrides else [])
    source = ", ".join(sources) or None
    network_given = isinstance(config.get("sweep"), dict) and "network" in config["sweep"]
    validate_config(config, source=source)
    try:
        networks_and_models(config, network_given=network_given)
    except ConfigError as err:
        raise ConfigError(err.message, key=err.key, source=err.source or source) from None
    return config


def networks(config: dict) -> dict[str, Network]:
    """The config's ``networks``, by name; a ConfigError naming the key of a bad one."""
    from .network import NETWORK_FIELDS, Network

    out = {}
    for name, values in (config.get("networks") or {}).items():
        if not isinstance(name, str):
            raise ConfigError(f"network names must be strings, got {name!r}", key=f"networks.{name}")
        if not isinstance(values, dict):
            raise ConfigError("must be a mapping of " + ", ".join(NETWORK_FIELDS), key=f"networks.{name}")
        for f in NETWORK_FIELDS:
            if f not in values:
                raise ConfigError("missing", key=f"networks.{name}.{f}")
            v = values[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"must be a positive number, got {v!r}", key=f"networks.{name}.{f}")
        for f in ("gpus_per_server", "nics_per_server"):
            if not isinstance(values[f], int):
                raise ConfigError(f"must be an integer, got {values[f]!r}", key=f"networks.{name}.{f}")
        try:
            out[name] = Network(name=name, **{f: values[f] for f in NETWORK_FIELDS})
        except ConfigError as err:  # what SimAI cannot read as float32 (1e-50 GB/s is 0)
            raise ConfigError(err.message, key=f"networks.{name}.{err.key}") from None
    return out


def custom_models(config: dict) -> dict[str, ModelSpec]:
    """The config's own ``models``, by name; a ConfigError naming the key of a bad one."""
    from .models import model_from_dict

    models = config.get("models") or {}
    if not isinstance(models, dict):
        raise ConfigError("must be a mapping from model name to fields", key="models")
    out = {}
    for name, values in models.items():
        if not isinstance(name, str):
            raise ConfigError(f"model names must be strings, got {name!r}", key=f"models.{name}")
        if not isinstance(values, dict):
            raise ConfigError("must be a mapping of model fields", key=f"models.{name}")
        out[name] = model_from_dict(name, values)
    return out


def networks_and_models(config: dict, *, network_given: bool | None = None
                        ) -> tuple[dict[str, Network], dict[str, ModelSpec]]:
    """The config's networks, and the models the ``model`` axis names, by name; a ConfigError naming the key of a bad definition or of a name that is none.

    ``network_given``: whether the config set ``sweep.network`` (None: not known, the
    defaults being filled in): a config that defines networks of its own but leaves the axis
    at its default (``netA``) is told so, not only that ``netA`` is unknown.
    """
    from .models import resolve_model

    nets = networks(config)
    models = custom_models(config)
    sweep = config.get("sweep") or {}
    for name in sweep.get("network") or ():
        if name not in nets:
            defined = ", ".join(nets) or "none"
            if network_given is False:
                raise ConfigError(f"not set, so it defaults to [{name}]; this config's networks replace the default "
                                  f"{name} and are: {defined}; set sweep.network (e.g. [{next(iter(nets), name)}])",
                                  key="sweep.network")
            raise ConfigError(f"unknown network {name!r}; the config defines: {defined}", key="sweep.network")
    return nets, {name: resolve_model(name, models) for name in sweep.get("model") or ()}
