"""A network, as SimAI's command line gives it, and the one spelling of its flags.

One class for both of its uses: a sweep's named networks (``networks:`` in the config, a
point's ``Point.net``: servers of ``gpus_per_server`` GPUs and ``nics_per_server`` NICs,
NVLink and NIC bandwidths in GB/s) and one simulation's network, which adds the run's GPUs
(SimAI's ``-g``) and the overlap ratios (``-tp_o -dp_o -ep_o -pp_o``). The engine, the audit,
the prediction and the per-point commands all take this class, and ``flags`` and
``server_flags`` are the only place the flags are written.

Bandwidths and ratios may be given as text, as on SimAI's command line; SimAI reads them
with ``std::stof`` into float32, and so does the engine (``number``, ``keep``). A flag's
value is written as given: text as typed, a number as Python prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..base.cfloat import f32, f32_from_str
from ..base.errors import ConfigError

# The network's fields, in the points table's order (its columns, after the axes).
NETWORK_FIELDS = ("gpus_per_server", "nics_per_server", "nvlink_gbps", "nic_gbps")
# SimAI's flag of each field.
SERVER_FLAGS = {"gpus_per_server": "-g_p_s", "nics_per_server": "-n_p_s", "nvlink_gbps": "-nv", "nic_gbps": "-nic"}
GPUS_FLAG = "-g"
# The overlap ratios (``-tp_o`` ...), with SimAI's defaults.
OVERLAPS = {"tp": 0.0, "dp": 0.0, "ep": 0.0, "pp": 1.0}


def overlap_flag(name: str, value: float | str) -> list[str]:
    """SimAI's flag of the ``name`` (tp, dp, ep, pp) overlap ratio, with its value as given."""
    if name not in OVERLAPS:
        raise ConfigError(f"not an overlap ratio: {name!r} (one of {', '.join(OVERLAPS)})", key="overlap")
    return [f"-{name}_o", str(value)]


@dataclass(frozen=True, kw_only=True)
class Network:
    """A network of servers; with ``gpus``, one simulation's (SimAI's ``-g``), with its overlap ratios."""

    gpus_per_server: int
    nics_per_server: int
    nvlink_gbps: float | str
    nic_gbps: float | str
    # The config's name of the network ("" for one given by flags).
    name: str = ""
    gpus: int | None = None
    tp_overlap: float | str = 0.0
    dp_overlap: float | str = 0.0
    ep_overlap: float | str = 0.0
    pp_overlap: float | str = 1.0

    def __post_init__(self) -> None:
        for name in ("gpus", "gpus_per_server", "nics_per_server"):
            value = getattr(self, name)
            if name == "gpus" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be a positive integer, got {value!r}", key=name)
        for name in ("nvlink_gbps", "nic_gbps"):
            if not self.number(name) > 0:
                raise ConfigError(f"must be a positive number, got {getattr(self, name)!r}", key=name)
        for name in OVERLAPS:
            if not 0 <= self.number(f"{name}_overlap") <= 1:
                raise ConfigError(f"must be between 0 and 1, got {getattr(self, f'{name}_overlap')!r}",
                                  key=f"{name}_overlap")

    def number(self, name: str) -> float:
        """A bandwidth or ratio as SimAI holds it: float32, read from its text with ``std::stof``."""
        value = getattr(self, name)
        try:
            return f32_from_str(value if isinstance(value, str) else repr(float(value)))
        except (TypeError, ValueError):
            raise ConfigError(f"must be a number, got {value!r}", key=name) from None

    @cached_property
    def bandwidths(self) -> tuple[float, float]:
        """(NVLink, NIC) GB/s as SimAI holds them (float32)."""
        return self.number("nvlink_gbps"), self.number("nic_gbps")

    def keep(self, name: str) -> float:
        """float32(1 - overlap): the share of a collective's time left exposed."""
        return f32(1 - self.number(f"{name}_overlap"))

    def server_flags(self) -> list[str]:
        """SimAI's four network flags, ``-g_p_s -n_p_s -nv -nic``, each value as given."""
        return [text for field, flag in SERVER_FLAGS.items() for text in (flag, str(getattr(self, field)))]

    def flags(self) -> list[str]:
        """SimAI's command-line flags of this simulation's network (without -w and -r): ``-g``,
        the four network flags, and each overlap ratio that is not SimAI's default."""
        if self.gpus is None:
            raise ConfigError("a network without its GPU count (-g) has no SimAI command line", key="gpus")
        out = [GPUS_FLAG, str(self.gpus), *self.server_flags()]
        for name, default in OVERLAPS.items():
            if self.number(f"{name}_overlap") != default:
                out += overlap_flag(name, getattr(self, f"{name}_overlap"))
        return out
