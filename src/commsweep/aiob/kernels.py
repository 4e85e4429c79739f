"""The roofline's units: a kernel (its FLOPs and bytes), a section's kernels, and the shapes
of the kernels every section is made of (bf16 GEMMs with their backward, elementwise passes).

``roofline`` and ``mla`` build the AIOB sections from these; ``roofline`` turns them into times.
"""

from __future__ import annotations

from dataclasses import dataclass

BF16 = 2  # bytes per bf16 value
FP32 = 4
INT64 = 8


@dataclass(frozen=True)
class Kernel:
    """One kernel launch: its kind decides which efficiency its FLOPs run at."""

    name: str
    kind: str  # "gemm", "attention" or "memory"
    flops: float
    bytes: float


@dataclass(frozen=True)
class Operator:
    """One AIOB section: the kernels AICB's timed call launches, and their backward."""

    section: str
    forward: tuple[Kernel, ...]
    backward: tuple[Kernel, ...] = ()


def gemm(name: str, m: int, k: int, n: int) -> Kernel:
    """``[m, k] x [k, n]`` in bf16: 2mkn FLOPs; both inputs read and the output written once."""
    return Kernel(name, "gemm", 2.0 * m * k * n, BF16 * (m * k + k * n + m * n))


def gemm_backward(name: str, m: int, k: int, n: int) -> tuple[Kernel, ...]:
    """Input gradient ``[m, n] x [n, k]`` and weight gradient ``[k, m] x [m, n]`` accumulated
    into Megatron's fp32 main gradient (read and written): twice the forward FLOPs."""
    return (
        Kernel(f"{name}.dgrad", "gemm", 2.0 * m * n * k, BF16 * (m * n + n * k + m * k)),
        Kernel(f"{name}.wgrad", "gemm", 2.0 * m * k * n, BF16 * (m * k + m * n) + 2 * FP32 * k * n),
    )


def elementwise(name: str, read: float, write: float, flops: float = 0.0) -> Kernel:
    """A memory-bound pass: ``read`` and ``write`` bytes, few FLOPs."""
    return Kernel(name, "memory", flops, read + write)
