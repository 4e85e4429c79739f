"""AICB's AIOB compute-time file (the ``--comp_filepath`` format), and how AICB reads it.

The file holds one section per operator, times in microseconds::

    train_iter:10
    Emb:
        time_gpu_max: 857
        time_gpu_min: 782
        time_gpu_avg: 799
    layernorm:
        ...

``aicb_compute_times`` reproduces the aggregation of AICB's ``utils.extract_averages``
(float sums in file order, Python's round), which the AICB emulation and the Megatron
schedule both consume.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import InputError
from ..base.files import read_text, write_text

# The operator sections AICB's AiobMegatron measures for a dense Megatron layer, in its order.
STANDARD_SECTIONS = (
    "Emb", "layernorm", "atten_qkv", "atten_flash", "atten_linear", "layernorm2",
    "mlp_linear_1", "mlp_gelu", "mlp_linear_2", "layernorm_post", "logit_time", "param_time",
)
# AICB's DeepSeek AIOB model (AiobDeepSeek.DeepSeekMLA) times multi-latent attention in five
# sections in place of the three attention ones (its frame reads them as per-layer times).
MLA_SECTIONS = (
    "attention_linear_q_lora", "attention_q_column", "attention_linear_kv_lora", "attention_kv_column",
    "attention_o_row",
)
_ATTENTION = ("atten_qkv", "atten_flash", "atten_linear")
DEEPSEEK_SECTIONS = tuple(x for s in STANDARD_SECTIONS if s not in _ATTENTION[1:]
                          for x in (MLA_SECTIONS if s == "atten_qkv" else (s,)))
TIME_KEYS = ("time_gpu_max", "time_gpu_min", "time_gpu_avg")

_SECTION = re.compile(r"(\w+):\s*")
_TRAIN_ITER = re.compile(r"train_iter:\s*(\d+)\s*")
_VALUE = re.compile(r"[ \t]+(\w+):[ \t]*(\S+)\s*")
_NUMBER = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")

Number = int | float


@dataclass(frozen=True)
class OpTime:
    """One operator's measured times in microseconds."""

    max: Number
    min: Number
    avg: Number
    # Keys other than the three times, kept verbatim (AICB may write them).
    extra: tuple[tuple[str, str], ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class AiobProfile:
    """An AIOB file: ``train_iter`` and the sections in file order."""

    sections: tuple[tuple[str, OpTime], ...]
    train_iter: int = 10

    def get(self, name: str) -> OpTime | None:
        for section, times in self.sections:
            if section == name:
                return times
        return None

    def names(self) -> list[str]:
        return [name for name, _ in self.sections]


# -- reading ---------------------------------------------------------------------------


def read(path: str | Path, *, require_standard: bool = False) -> AiobProfile:
    """Read and validate an AIOB file; raise InputError naming file, line and field."""
    return parse(read_text(path), source=path, require_standard=require_standard)


def _number(token: str, *, source, line: int, key: str) -> Number:
    if not _NUMBER.fullmatch(token):
        what = "a negative value" if token.startswith("-") else repr(token)
        raise InputError(f"expected a non-negative number of microseconds, got {what}", file=source, line=line, field=key)
    try:
        value = float(token) if not token.isdigit() else int(token)
    except ValueError:  # Python refuses integers of more than 4300 digits
        raise InputError(f"expected a finite number, got {len(token)} digits", file=source, line=line, field=key) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"expected a finite number, got {token!r}", file=source, line=line, field=key)
    return value


def parse(text: str, *, source: str | Path = "<aiob>", require_standard: bool = False) -> AiobProfile:
    """A profile from its text; ``require_standard``: every section AICB's workloads read."""
    lines = text.splitlines()
    train_iter = _train_iter(lines, source)
    sections = _sections(lines, source)
    if not sections:
        raise InputError("no operator sections", file=source, line=len(lines))
    profile = AiobProfile(sections=tuple(sections), train_iter=train_iter)
    if require_standard:
        # Either AICB's Megatron sections or its DeepSeek ones (the fewer missing named).
        missing = min(([s for s in names if profile.get(s) is None] for names in (STANDARD_SECTIONS, DEEPSEEK_SECTIONS)),
                      key=len)
        if missing:
            raise InputError(
                f"missing sections: {', '.join(missing)}", file=source, line=len(lines), field=missing[0]
            )
    return profile


def _train_iter(lines: list[str], source: str | Path) -> int:
    """The first line's ``train_iter:<N>``."""
    if not lines or not _TRAIN_ITER.fullmatch(lines[0]):
        got = lines[0] if lines else ""
        raise InputError(f"expected 'train_iter:<N>' on the first line, got {got!r}", file=source, line=1, field="train_iter")
    digits = _TRAIN_ITER.fullmatch(lines[0]).group(1)  # type: ignore[union-attr]
    if len(digits) > 18:
        raise InputError(f"expected an iteration count, got {len(digits)} digits", file=source, line=1, field="train_iter")
    return int(digits)


def _sections(lines: list[str], source: str | Path) -> list[tuple[str, OpTime]]:
    """Each ``Section:`` with its indented ``key: value`` lines, in file order, checked."""
    sections: list[tuple[str, OpTime]] = []
    seen: dict[str, int] = {}
    current: str | None = None
    current_line = 0
    values: dict[str, tuple[Number, int]] = {}
    extra: list[tuple[str, str]] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        section = _SECTION.fullmatch(line)
        if section:
            if current is not None:
                sections.append((current, _op_time(current, current_line, values, extra, source)))
            current, current_line, values, extra = section.group(1), number, {}, []
            if current in seen:
                raise InputError(
                    f"section {current!r} appears twice (first on line {seen[current]})", file=source, line=number, field=current
                )
            seen[current] = number
            continue
        value = _VALUE.fullmatch(line)
        if value is None:
            raise InputError(f"expected 'Section:' or an indented 'key: value', got {line.strip()!r}", file=source, line=number)
        if current is None:
            raise InputError("a value before any section", file=source, line=number, field=value.group(1))
        key, token = value.group(1), value.group(2)
        if key in TIME_KEYS:
            if key in values:
                raise InputError(f"{key} given twice in section {current!r}", file=source, line=number, field=key)
            values[key] = (_number(token, source=source, line=number, key=key), number)
        else:
            extra.append((key, token))
    if current is not None:
        sections.append((current, _op_time(current, current_line, values, extra, source)))
    return sections


def _op_time(name: str, line: int, values: dict[str, tuple[Number, int]], extra: list[tuple[str, str]],
             source: str | Path) -> OpTime:
    """One section's times, each present and min <= avg <= max (``line``: the section's)."""
    missing = [k for k in TIME_KEYS if k not in values]
    if missing:
        raise InputError(f"section {name!r} lacks {', '.join(missing)}", file=source, line=line, field=missing[0])
    mx, mn, avg = (values[k][0] for k in TIME_KEYS)
    if not mn <= avg <= mx:
        raise InputError(
            f"section {name!r} needs time_gpu_min <= time_gpu_avg <= time_gpu_max, got {mn}, {avg}, {mx}",
            file=source, line=values["time_gpu_avg"][1], field="time_gpu_avg",
        )
    return OpTime(max=mx, min=mn, avg=avg, extra=tuple(extra))


# -- writing ---------------------------------------------------------------------------


def render(profile: AiobProfile) -> str:
    out = [f"train_iter:{profile.train_iter}"]
    for name, times in profile.sections:
        out.append(f"{name}:")
        out.append(f"    time_gpu_max: {times.max}")
        out.append(f"    time_gpu_min: {times.min}")
        out.append(f"    time_gpu_avg: {times.avg}")
        out.extend(f"    {key}: {value}" for key, value in times.extra)
    return "\n".join(out) + "\n"


def write(profile: AiobProfile, path: str | Path) -> None:
    write_text(path, render(profile))


# -- AICB's aggregation ----------------------------------------------------------------


@dataclass(frozen=True)
class ComputeTimes:
    """Per-layer compute times in ns, as AICB's ``extract_averages`` derives them."""

    attention: int  # forward = backward
    mlp: int  # forward = backward
    grad_forward: int  # param_time min
    grad_backward: int  # param_time avg
    other: tuple[tuple[str, int], ...]  # every other section's avg (Emb, logit_time, ...)

    def get(self, name: str, default: int = 0) -> int:
        return dict(self.other).get(name, default)


def aicb_compute_times(profile: AiobProfile, *, recompute: bool = False) -> ComputeTimes:
    """Sum sections the way AICB does: ``atten*`` plus ``layernorm`` make attention,
    ``mlp*`` plus ``layernorm2`` make the MLP, ``param_time`` gives the gradient times;
    microseconds become nanoseconds; with recompute, ``*flash*`` sections count twice."""
    attention = 0.0
    mlp = 0.0
    grad_forward = grad_backward = 0.0
    other: dict[str, float] = {}
    for name, times in profile.sections:
        avg = float(times.avg) * 1000
        if name == "param_time":
            grad_forward = float(times.min) * 1000
            grad_backward = avg
        elif "atten" in name or name == "layernorm":
            attention += avg * 2 if recompute and "flash" in name else avg
        elif "mlp" in name or name == "layernorm2":
            mlp += avg
        else:
            other[name] = avg
    return ComputeTimes(
        attention=round(attention),
        mlp=round(mlp),
        grad_forward=round(grad_forward),
        grad_backward=round(grad_backward),
        other=tuple((k, round(v)) for k, v in other.items()),
    )
