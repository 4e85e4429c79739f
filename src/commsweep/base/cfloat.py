"""The C number semantics SimAI's output depends on, in plain Python.

SimAI computes in a mix of ``float`` (32-bit), ``double`` and ``uint64_t`` (its ``Tick``),
and its CSV shows the seams: bandwidths are float32, totals pass through float32 when the
overlap ratio is applied, and impossible times wrap around 2^64. Reproducing its output
byte for byte means reproducing each of those conversions, so they live here, named for
the C operation they stand for:

* :func:`f32` rounds a double to float32 (what a ``float`` variable or a float operation
  does; a float op on two floats equals the double op rounded to float32);
* :func:`f32_of_int` converts an integer (a ``uint64_t``) to float32 with one rounding;
* :func:`u64` converts a double or float to ``uint64_t`` the way GCC's x86-64 code does,
  including what the C standard leaves undefined (NaN and negatives, which SimAI's bugs
  produce): NaN -> 2^63, negatives wrap modulo 2^64, 2^64 and above -> 0;
* :func:`div` is IEEE division (x/0 gives inf or NaN instead of raising);
* :func:`fixed` prints like ``std::fixed << std::setprecision(n)`` (NaN as ``-nan``:
  x86's default NaN has its sign bit set).
"""

from __future__ import annotations

import math
import struct

U64_MASK = (1 << 64) - 1
TWO63 = 1 << 63
_TWO63_F = 9223372036854775808.0
_F32 = struct.Struct("<f")
_pack, _unpack = _F32.pack, _F32.unpack
INF = math.inf


def f32(x: float) -> float:
    """Round a double to the nearest float32 (ties to even), as a C ``float`` would hold it."""
    try:
        return _unpack(_pack(x))[0]
    except OverflowError:  # rounds beyond FLT_MAX: C gives infinity
        return math.copysign(INF, x)


def f32_of_int(n: int) -> float:
    """An integer converted to float32 with a single rounding (C's ``(float)uint64``)."""
    if -(1 << 53) <= n <= (1 << 53):
        return f32(float(n))
    sign = -1 if n < 0 else 1
    n = abs(n)
    shift = n.bit_length() - 24
    q, r = divmod(n, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return f32(sign * float(q << shift))


def f32_from_str(text: str) -> float:
    """A decimal string read as float32 with one rounding (C's ``std::stof``)."""
    d = float(text)
    f = f32(d)
    if not math.isfinite(d) or f == d:
        return f
    # Double rounding can only go wrong when d sits exactly on a float32 midpoint.
    from fractions import Fraction

    lo, hi = (f, _next_f32(f, INF)) if f < d else (_next_f32(f, -INF), f)
    mid = (Fraction(lo) + Fraction(hi)) / 2
    if Fraction(d) != mid:
        return f
    exact = Fraction(text.strip())
    if exact == mid:
        return f  # a true tie: f32() already chose the even one
    return hi if exact > mid else lo


def _next_f32(x: float, toward: float) -> float:
    (bits,) = struct.unpack("<I", _pack(x))
    if x == 0.0:
        bits = 1 if toward > 0 else 0x80000001
    elif (x < toward) == (x > 0):
        bits += 1
    else:
        bits -= 1
    return _unpack(struct.pack("<I", bits))[0]


def _cvtt(x: float) -> int:
    """x86 ``cvttsd2si``/``cvttss2si``: truncate to int64, or INT64_MIN when it does not fit."""
    if x != x or x >= _TWO63_F or x < -_TWO63_F:
        return -TWO63
    return int(x)


def u64(x: float) -> int:
    """C's conversion of a floating value to ``uint64_t`` as GCC compiles it on x86-64.

    Values below 2^63 go through a signed truncation (negatives wrap modulo 2^64; NaN
    gives 2^63); larger ones have 2^63 subtracted first and added back (so 2^64 and
    infinity give 0).
    """
    if not x >= _TWO63_F:  # also NaN: the unordered compare takes this branch
        return _cvtt(x) & U64_MASK
    return (_cvtt(x - _TWO63_F) ^ TWO63) & U64_MASK


def div(a: float, b: float) -> float:
    """IEEE double division: x/0 is +-inf, 0/0 and nan/0 are NaN."""
    if b:
        return a / b
    if a != a or a == 0:
        return math.nan
    return math.copysign(INF, a) * math.copysign(1.0, b)


def fixed(x: float, decimals: int) -> str:
    """``std::fixed << std::setprecision(decimals) << x``: correctly rounded, ties to even."""
    if x != x:
        return "-nan"
    return f"{x:.{decimals}f}"
