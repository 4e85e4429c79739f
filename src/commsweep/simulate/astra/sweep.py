"""``simulator.astra`` of a sweep's config: whether the sweep runs ASTRA-sim beside SimAI, on
which binary, with which settings.

With ``simulator.astra.root`` set, the sweep has a step (``orchestration.steps``: ``astra_compare``)
that runs ``commsweep astra-compare`` over its finished points. The root may name an environment
variable (``$ASTRA_SIM_ROOT``): a shipped config then runs with whatever build the user points it
at, and one that names an unset variable is refused before any job, with the variable named.
The binary is an external input: checked and checksummed here, so a rebuilt ASTRA-sim reruns the
step (``check_external``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ...base.errors import ConfigError
from . import inputs, runner

KEY = "simulator.astra.root"


def block(config: Mapping) -> Mapping:
    """The config's ``simulator.astra`` (empty when absent)."""
    return (config.get("simulator") or {}).get("astra") or {}


def enabled(config: Mapping) -> bool:
    """Whether the sweep runs ASTRA-sim: ``simulator.astra.root`` is set (even to an unset variable)."""
    return bool(block(config).get("root"))


def root(config: Mapping) -> str:
    """The root with ``$VARIABLE``s and ``~`` expanded; ConfigError when a variable is unset."""
    given = str(block(config).get("root") or "")
    expanded = os.path.expanduser(os.path.expandvars(given))
    if not given or "$" in expanded or not expanded.strip():
        raise ConfigError(f"{given!r} names no ASTRA-sim: set the variable it reads (e.g. ASTRA_SIM_ROOT=/path/to/"
                          "astra-sim) or give the root (--config 'simulator={astra: {root: /path/to/astra-sim}}')",
                          key=KEY)
    return expanded


def backend(config: Mapping) -> str:
    """The astra backend's name (``runner.BINARIES``)."""
    return f"astra-{block(config).get('backend') or 'unaware'}"


def binary(config: Mapping) -> Path:
    """The binary the step runs, checked to be there and executable."""
    path = runner.binary(root(config), backend(config))
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{path} is not executable", key=KEY)
    return path


def settings(config: Mapping) -> inputs.Settings:
    """Latencies, topologies and system keys as ``inputs.Settings`` (checked there)."""
    b = block(config)
    return inputs.Settings(latency_ns=tuple(b.get("latency_ns") or inputs.DEFAULT_LATENCY_NS),
                           topology=tuple(b.get("topology") or inputs.DEFAULT_TOPOLOGY),
                           system=dict(b.get("system") or {}))


def check_external(config: Mapping) -> dict:
    """The binary as an external input (``simulator.astra.root``), when the sweep runs ASTRA-sim."""
    from ...base.external import External, file_digest

    if not enabled(config):
        return {}
    settings(config)  # a bad setting stops the run here, not in the step
    path = binary(config)
    return {KEY: External(KEY, root(config), file_digest(path), str(path.resolve()))}


def arguments(config: Mapping, results: str, table: str, pairs: str, runs: str) -> list[str]:
    """The step's ``commsweep astra-compare`` arguments: the sweep's results folder, its two
    tables, the folder of its runs and the config's settings."""
    b, s = block(config), settings(config)
    words = ["--results", results, "--table", table, "--pairs", pairs, "--runs", runs,
             "--astra-root", root(config), "--backend", backend(config),
             "--astra-latency", ",".join(repr(float(x)) for x in s.latency_ns),
             "--astra-topology", ",".join(s.topology), "--strict"]
    for key, value in s.system.items():
        words += ["--astra-system", f"{key}={json.dumps(value)}"]
    if b.get("overlap"):
        words += ["--astra-overlap", ",".join(b["overlap"])]
    if b.get("timeout_s") is not None:
        words += ["--timeout", repr(float(b["timeout_s"]))]
    if b.get("stall_s") is not None:
        words += ["--stall-s", repr(float(b["stall_s"]))]
    return words
