"""``SimAI.conf`` (the NS-3 network's settings) and the environment knobs of ``SimAI_simulator``.

``SimAI.conf`` is read word by word by ``ReadConf`` (SimAI's ``network_frontend/ns3/common.h``):
a key, then its value(s); an unknown key is skipped silently, a missing file leaves every
setting at its compiled-in value. :func:`render` writes SimAI's shipped file
(``astra-sim-alibabacloud/inputs/config/SimAI.conf``, SimAI cef83f9d) line for line, with
the sweep's values in place of its defaults, and every file it names inside the run's
own directory (``./``: the simulator runs there) instead of the shared
``/etc/astra-sim/simulation/`` where every run of a stock install writes the same names.

The knobs a sweep sets (:class:`Settings`, defaults = SimAI's file):

* ``cc_mode`` (``CC_MODE``): congestion control, 1 DCQCN, 3 HPCC, 7 TIMELY, 8 DCTCP, 10 HPCC-PINT;
* ``buffer_mb`` (``BUFFER_SIZE``): switch buffer, MB;
* ``ecn`` (``ENABLE_QCN``) and ``dynamic_pfc_threshold`` (``USE_DYNAMIC_PFC_THRESHOLD``);
* ``packet_payload`` (``PACKET_PAYLOAD_SIZE``): bytes per packet;
* ``kmax``/``kmin``/``pmax`` (``KMAX_MAP`` ...): ECN marking thresholds per link rate (bps);
* ``error_rate_per_link`` (``ERROR_RATE_PER_LINK``).

Environment (:func:`environment`): ``AS_SEND_LAT`` in SimAI's real unit. ``entry.h`` takes
the variable as nanoseconds, multiplies it by 1000 "to ps" and starts each flow that many
time steps late; but the simulator's time step is the nanosecond (its fct timestamps are
ns and nothing sets another resolution), so each flow starts ``AS_SEND_LAT`` *microseconds*
late. SimAI's default when the variable is unset (6000, or its per-algorithm table) thus
adds 6 ms or more to every ring step. The sweep's ``send_latency_us`` is the delay meant,
in microseconds, and is passed unchanged: ``AS_SEND_LAT=6`` is 6 us per flow. The value
must be a whole number (SimAI reads it with ``std::stoi``) below 2,147,484 (times 1000 it
must fit SimAI's ``int``). ``AS_NVLS_ENABLE`` and ``AS_PXN_ENABLE`` are passed as 0/1;
every other ``AS_*`` variable of the caller's environment is removed so a run does not
depend on the shell it was started from.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from ...base.errors import ConfigError

# SimAI's file's paths, relative to the run directory (the simulator's working directory).
FCT_FILE = "llama_hpn7_fct.txt"
PFC_FILE = "llama_hpn7_pfc.txt"
TRACE_OUTPUT = "llama_hpn7_mix.tr"
CONF_FILE = "SimAI.conf"
INT_MAX = 2**31 - 1
CC_MODES = {1: "DCQCN", 3: "HPCC", 7: "TIMELY", 8: "DCTCP", 10: "HPCC-PINT"}
DEFAULT_KMAX = ((25000000000, "400"), (50000000000, "800"), (100000000000, "1600"), (200000000000, "1200"),
                (400000000000, "3200"), (1600000000000, "2400"))
DEFAULT_KMIN = ((25000000000, "100"), (50000000000, "200"), (100000000000, "400"), (200000000000, "300"),
                (400000000000, "800"), (1600000000000, "600"))
DEFAULT_PMAX = ((25000000000, "0.2"), (50000000000, "0.2"), (100000000000, "0.2"), (200000000000, "0.8"),
                (400000000000, "0.2"), (1600000000000, "0.2"))


@dataclass(frozen=True)
class Settings:
    """A packet-level run's network settings and knobs; the defaults are SimAI's own file's,
    but for ``send_latency_us`` (see the module docstring)."""

    cc_mode: int = 1
    buffer_mb: int = 32
    ecn: bool = True
    dynamic_pfc_threshold: bool = True
    packet_payload: int = 9000
    error_rate_per_link: str = "0.0000"
    kmax: tuple[tuple[int, str], ...] = DEFAULT_KMAX
    kmin: tuple[tuple[int, str], ...] = DEFAULT_KMIN
    pmax: tuple[tuple[int, str], ...] = DEFAULT_PMAX
    send_latency_us: int = 6
    nvls: bool = False
    pxn: bool = False

    def __post_init__(self) -> None:
        if self.cc_mode not in CC_MODES:
            raise ConfigError(f"must be one of {sorted(CC_MODES)} ({', '.join(f'{k} {v}' for k, v in CC_MODES.items())}), "
                              f"got {self.cc_mode!r}", key="ns3.cc_mode")
        for key in ("buffer_mb", "packet_payload"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= INT_MAX:
                raise ConfigError(f"must be a whole number from 1 to {INT_MAX}, got {value!r}", key=f"ns3.{key}")
        lat = self.send_latency_us
        if isinstance(lat, bool) or not isinstance(lat, int) or not 0 <= lat <= INT_MAX // 1000:
            raise ConfigError(f"must be a whole number of microseconds from 0 to {INT_MAX // 1000} (SimAI reads "
                              f"AS_SEND_LAT with std::stoi and multiplies it by 1000 in an int), got {lat!r}",
                              key="ns3.send_latency_us")
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", str(self.error_rate_per_link)):
            raise ConfigError(f"must be a number, got {self.error_rate_per_link!r}", key="ns3.error_rate_per_link")
        for key in ("kmax", "kmin", "pmax"):
            for rate, value in getattr(self, key):
                if not isinstance(rate, int) or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", str(value)):
                    raise ConfigError(f"expected [rate_bps, value] pairs, got {[rate, value]!r}", key=f"ns3.{key}")

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)


def _map(pairs) -> str:
    return " ".join([str(len(pairs))] + [f"{rate} {value}" for rate, value in pairs])


def render(settings: Settings, directory: str = "./") -> str:
    """SimAI.conf for these settings, with every file under ``directory`` (default: the
    simulator's working directory). With the defaults and ``/etc/astra-sim/simulation/``
    this is SimAI's shipped file byte for byte, its missing last newline included.

    Long because it is that file written out line for line, in its order, so that a reader
    can compare it with SimAI's shipped SimAI.conf side by side.
    """
    if re.search(r"\s", directory):
        raise ConfigError(f"SimAI reads SimAI.conf word by word: a path with a space cannot be named ({directory!r})",
                          key="ns3")
    d = directory if directory.endswith("/") else directory + "/"
    s = settings
    lines = [
        f"ENABLE_QCN {int(s.ecn)}",
        f"USE_DYNAMIC_PFC_THRESHOLD {int(s.dynamic_pfc_threshold)}",
        "",
        f"PACKET_PAYLOAD_SIZE {s.packet_payload}",
        "",
        f"FLOW_FILE {d}flow1.txt",
        f"TRACE_FILE {d}trace1.txt",
        f"TRACE_OUTPUT_FILE {d}{TRACE_OUTPUT}",
        f"FCT_OUTPUT_FILE {d}{FCT_FILE}",
        f"PFC_OUTPUT_FILE {d}{PFC_FILE}",
        "",
        "SIMULATOR_STOP_TIME 40000000000000.00",
        "",
        f"CC_MODE {s.cc_mode}",
        "ALPHA_RESUME_INTERVAL 1",
        "RATE_DECREASE_INTERVAL 4",
        "CLAMP_TARGET_RATE 0",
        "RP_TIMER 900 ",
        "EWMA_GAIN 0.00390625",
        "FAST_RECOVERY_TIMES 1",
        "RATE_AI 50Mb/s",
        "RATE_HAI 100Mb/s",
        "MIN_RATE 100Mb/s",
        "DCTCP_RATE_AI 1000Mb/s",
        "",
        f"ERROR_RATE_PER_LINK {s.error_rate_per_link}",
        "L2_CHUNK_SIZE 4000",
        "L2_ACK_INTERVAL 1",
        "L2_BACK_TO_ZERO 0",
        "",
        "HAS_WIN 1",
        "GLOBAL_T 0",
        "VAR_WIN 1",
        "FAST_REACT 1",
        "U_TARGET 0.95",
        "MI_THRESH 0",
        "INT_MULTI 1",
        "MULTI_RATE 0",
        "SAMPLE_FEEDBACK 0",
        "PINT_LOG_BASE 1.05",
        "PINT_PROB 1.0",
        "",
        "RATE_BOUND 1",
        "",
        "ACK_HIGH_PRIO 0",
        "",
        "LINK_DOWN 0 0 0",
        "",
        "ENABLE_TRACE 1",
        "",
        f"KMAX_MAP {_map(s.kmax)}",
        f"KMIN_MAP {_map(s.kmin)}",
        f"PMAX_MAP {_map(s.pmax)}",
        "",
        f"BUFFER_SIZE {s.buffer_mb}",
        "",
        f"QLEN_MON_FILE {d}llama_hpn7_qlen.txt",
        f"BW_MON_FILE {d}llama_hpn7_bw.txt",
        f"RATE_MON_FILE {d}llama_hpn7_rate.txt",
        f"CNP_MON_FILE {d}llama_hpn7_cnp.txt",
        "MON_START 0",
        "MON_END 20000",
        "QP_MON_INTERVAL 100",
        "QLEN_MON_INTERVAL 10000",
        "BW_MON_INTERVAL 10000",
    ]
    return "\n".join(lines)


def knobs(settings: Settings) -> dict[str, str]:
    """The AS_* variables a run sets, as text (for the run record and the hand-run command)."""
    return {
        "AS_SEND_LAT": str(settings.send_latency_us),
        "AS_NVLS_ENABLE": str(int(settings.nvls)),
        "AS_PXN_ENABLE": str(int(settings.pxn)),
    }


def environment(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The simulator's environment: ``base`` (default: ours) without any AS_* variable, plus :func:`knobs`."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("AS_")}
    env.update(knobs(settings))
    return env


def describe(settings: Settings) -> str:
    """One line for logs and the run record: what the run's network and send latency are."""
    return (f"CC_MODE {settings.cc_mode} ({CC_MODES[settings.cc_mode]}), buffer {settings.buffer_mb} MB, "
            f"ECN {'on' if settings.ecn else 'off'}, dynamic PFC threshold {'on' if settings.dynamic_pfc_threshold else 'off'}, "
            f"payload {settings.packet_payload} B; AS_SEND_LAT={settings.send_latency_us}: each flow starts "
            f"{settings.send_latency_us} us late (SimAI's entry.h multiplies the variable by 1000 in ns steps)")


def settings_from_mapping(values: dict, *, key: str = "ns3") -> Settings:
    """Settings from a config mapping (``simulator.ns3``); unknown keys are an error naming them."""
    names = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}; known: {', '.join(sorted(names))}", key=key)
    converted = dict(values)
    for name in ("kmax", "kmin", "pmax"):
        if name in converted:
            try:
                converted[name] = tuple((int(rate), str(v)) for rate, v in converted[name])
            except (TypeError, ValueError):
                raise ConfigError(f"expected a list of [rate_bps, value] pairs, got {converted[name]!r}",
                                  key=f"{key}.{name}") from None
    if "error_rate_per_link" in converted:
        converted["error_rate_per_link"] = str(converted["error_rate_per_link"])
    return Settings(**converted)
