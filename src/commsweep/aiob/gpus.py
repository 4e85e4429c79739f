"""The GPUs the roofline backend knows: peak bf16 tensor throughput, HBM bandwidth and
the fractions of them real kernels reach.

Peaks are the vendors' published numbers, dense (NVIDIA's datasheets print bf16 "with
sparsity", twice the dense rate; the dense half is what a training GEMM can use). Each
entry names its source next to it.

Efficiencies say what fraction of the peak a well-shaped kernel of each kind reaches, and
can be overridden per run (``commsweep profile --gemm-efficiency ...``). The A100's GEMM and
memory efficiencies are **fitted** on the two published tables of measured Megatron-LM
iteration times (Korthikanti et al. 2022 Table 5, Narayanan et al. 2021 Table 1; shipped in
``commsweep/data/validation/``; ``bench/validate.py --fit`` redoes the fit, a grid search of
the two numbers minimising the tables' mean absolute error with Megatron's kernels of
``megatron_kernels.py``; see ``docs/validation.md``). They hold for both A100 memories (the
same chip). The other GPUs' efficiencies are this project's documented assumptions, not
validated against measurements:

* ``gemm``: large bf16 cuBLAS GEMMs of transformer shapes, before wave quantization
  (``megatron_kernels.gemm_efficiency``). A100: 0.74, fitted (230 of 312 TFLOP/s; cuBLAS
  sweeps show 250-270 for square GEMMs, so the fit also carries what the model leaves out,
  e.g. the GEMMs' slowdown beside concurrent NCCL kernels). Hopper: 650-750 of 989 TFLOP/s
  (0.70) as NVIDIA's and MLPerf-style GEMM sweeps commonly show; the H20's tensor cores are
  capped so far below its memory system that GEMMs run close to the cap (0.85).
* ``fp8_gemm``: large FP8 GEMMs (Transformer Engine, the transformer layers' linears), as
  a fraction of the dense FP8 peak. Hopper: 0.54, **fitted** on one table only, NVIDIA's
  NeMo 24.07 DGX-H100 pre-training table (``nemo2407_h100.csv``, each run under its
  recipe, ``recipes.csv``, with the ``nemo`` version's host gap per kernel, fitted on the
  same table first; ``bench/validate.py --fit-fp8``), and held fixed for every other table;
  it carries what the model leaves out of FP8 training (the scaling factors' amax
  reductions). The
  B200's 0.60 is an assumption, not validated.
* ``vboost_gain``: what ``nvidia-smi boost-slider --vboost 1`` (the power budget steered
  from the memory to the cores) adds to the tensor cores' rate, for runs whose recipe turns
  it on. Hopper: 0.015, **fitted** on one table only, the vboost edition of NVIDIA's NeMo
  24.07 table (``nemo2407_vboost_h100.csv``, the same runs measured again with vboost on;
  ``bench/validate.py --fit-vboost``), the host gap and the FP8 efficiency held; elsewhere
  0 (not measured).
* ``fused_attention``: Transformer Engine's cuDNN fused attention (NVIDIA's recipes),
  forward and backward. Hopper: **measured**, by sequence length
  (``fused_attention_table``): cuDNN's causal forward at head size 128 in the
  FlashAttention-3 paper (Shah et al. 2024, arXiv 2407.08608, Figure 5), 0.32 of the peak at
  512 tokens to 0.54 at 16k; the backward taken at the same efficiency (the paper prints no
  cuDNN backward at these sizes). The one-number fallback, 0.50, is for kernels without a
  sequence length. Elsewhere as ``attention``.
* ``attention``: FlashAttention-2's forward, which AICB times. The FlashAttention-2 paper
  (Dao, 2023) reports up to 70-73 % of A100 peak forward, less with a causal mask at 2-4k
  tokens (0.60); the FlashAttention-3 paper (Shah et al., 2024) shows FlashAttention-2 at
  about 35 % of H100 peak (0.35); Blackwell kernels are younger (0.45).
* ``memory``: streaming element-wise kernels (copies, norms, activations, the optimizer).
  A100: 0.70, fitted: below the 80-85 % STREAM-like kernels reach, as the fit also carries
  the gaps between Megatron's many short element-wise kernels. Others: 0.80-0.85, the
  STREAM-like figure.
* ``launch_us``: per kernel, the host-side launch and event gap that AICB's timing (CUDA
  events around one eager PyTorch call on an idle GPU) includes; a few microseconds.

``sm_count`` (wave quantization of GEMMs) and ``memory_gib`` (the memory model's verdict)
are datasheet figures: the A100 whitepaper's 108 SMs; the H100/H800/H200's 132 (H100
whitepaper, SXM5); the H20's 78 and the B200's 148 as NVIDIA's partners publish them;
memories as each entry's datasheet prints them (read as GiB: an A100 80GB has 81920 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..base.errors import ConfigError


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: peaks from its datasheet and the default efficiencies."""

    name: str
    bf16_tflops: float  # dense bf16 tensor-core peak, TFLOP/s
    hbm_tbps: float  # HBM bandwidth, TB/s (10^12 bytes per second)
    gemm_efficiency: float
    attention_efficiency: float
    memory_efficiency: float
    launch_us: float
    source: str
    # For the Megatron kernel model (``megatron_kernels.py``) and the memory model: the
    # streaming multiprocessors (GEMM wave quantization) and the HBM capacity in GiB
    # (the datasheet's "80GB" is 80 GiB: nvidia-smi reports 81920 MiB on an A100 80GB).
    sm_count: int = 0
    memory_gib: float = 0.0
    # A measured GEMM efficiency table: (FLOPs of one GEMM, fraction of peak), interpolated
    # in log FLOPs; empty: the wave-quantization model of ``megatron_kernels.gemm_efficiency``.
    gemm_table: tuple[tuple[float, float], ...] = ()
    # Dense FP8 tensor-core peak (TFLOP/s; 0: no FP8 tensor cores, as the A100) and the
    # fraction of it large FP8 GEMMs reach (before wave quantization).
    fp8_tflops: float = 0.0
    fp8_gemm_efficiency: float = 0.0
    # Transformer Engine's cuDNN fused attention (the kernel model's "cudnn" attention);
    # 0: as ``attention_efficiency``.
    fused_attention_efficiency: float = 0.0
    # A measured table of it by sequence length: (tokens, fraction of the bf16 peak),
    # interpolated in log tokens; where given it replaces ``fused_attention_efficiency``.
    fused_attention_table: tuple[tuple[float, float], ...] = ()
    # What vboost (``nvidia-smi boost-slider --vboost 1``) adds to the tensor cores' rate:
    # the core clock's gain once the power budget shifts from the memory to the cores.
    vboost_gain: float = 0.0

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s."""
        return self.bf16_tflops * 1e12

    @property
    def peak_bytes(self) -> float:
        """Peak bytes/s."""
        return self.hbm_tbps * 1e12

    def vboosted(self) -> "GpuSpec":
        """This GPU with vboost on: the tensor-core peaks (bf16 and FP8) times 1 + ``vboost_gain``.
        Only compute-bound kernels gain; the memory clock it lowers is not modelled (no
        published figure), so streaming kernels keep their rate."""
        gain = 1.0 + self.vboost_gain
        return replace(self, bf16_tflops=self.bf16_tflops * gain, fp8_tflops=self.fp8_tflops * gain)

    def with_overrides(self, **values: float | None) -> "GpuSpec":
        """This GPU with some efficiencies replaced (None keeps the default); each in (0, 1]."""
        changes = {k: v for k, v in values.items() if v is not None}
        for key, value in changes.items():
            if key == "launch_us":
                if value < 0:
                    raise ConfigError(f"must be >= 0, got {value}", key="--launch-us")
            elif not 0 < value <= 1:
                raise ConfigError(f"must be in (0, 1], got {value}", key=f"--{key.replace('_', '-')}")
        return replace(self, **changes)


# A100: GEMM and memory efficiencies fitted (see the module docstring); attention and launch assumed.
# Hopper: the FP8 GEMM efficiency and the vboost gain fitted (NeMo 24.07's H100 table and its
# vboost edition), cuDNN's attention measured (below); the others assumed.
_AMPERE = dict(gemm_efficiency=0.74, attention_efficiency=0.60, memory_efficiency=0.70, launch_us=5.0)
# cuDNN's causal attention forward on an H100 SXM5, head size 128, bf16, as the
# FlashAttention-3 paper measures it (Shah et al. 2024, arXiv 2407.08608, Figure 5, causal,
# head dim 128): 315, 410, 484, 518, 529 and 539 TFLOP/s at 512 to 16k tokens, over the
# 989.5 TFLOP/s dense peak. The paper's FLOPs are the causal half, as the kernel model's.
_CUDNN_CAUSAL_H100 = tuple((float(s), round(t / 989.5, 3)) for s, t in (
    (512, 315), (1024, 410), (2048, 484), (4096, 518), (8192, 529), (16384, 539)))
_HOPPER = dict(gemm_efficiency=0.70, attention_efficiency=0.35, memory_efficiency=0.80, launch_us=5.0,
               fp8_gemm_efficiency=0.54, fused_attention_efficiency=0.50, vboost_gain=0.015,
               fused_attention_table=_CUDNN_CAUSAL_H100)

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"):
        # BFLOAT16 Tensor Core 312 TFLOPS (624 with sparsity); A100 40GB SXM 1,555 GB/s.
        GpuSpec("A100-40GB", 312.0, 1.555, **_AMPERE, sm_count=108, memory_gib=40,
                source="NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): 312 TFLOPS bf16, 1,555 GB/s; "
                       "gemm and mem efficiencies fitted (docs/validation.md)"),
        # Same datasheet: A100 80GB SXM 2,039 GB/s.
        GpuSpec("A100-80GB", 312.0, 2.039, **_AMPERE, sm_count=108, memory_gib=80,
                source="NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): 312 TFLOPS bf16, 2,039 GB/s (SXM); "
                       "gemm and mem efficiencies fitted (docs/validation.md)"),
        # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/, "h100-datasheet"):
        # H100 SXM BF16 Tensor Core 1,979 TFLOPS with sparsity (989.5 dense); 3.35 TB/s.
        # FP8 Tensor Core 3,958 TFLOPS with sparsity (1,979 dense).
        GpuSpec("H100-SXM", 989.5, 3.35, **_HOPPER, sm_count=132, memory_gib=80, fp8_tflops=1979.0,
                source="NVIDIA H100 datasheet, SXM column (nvidia.com/en-us/data-center/h100/): 1,979 TFLOPS bf16 sparse, 3.35 TB/s"),
        # NVIDIA H800 SXM5 product brief: the H100 SXM's compute and HBM3 (1,979 TFLOPS bf16 sparse,
        # 3.35 TB/s), NVLink reduced to 400 GB/s (which the roofline does not use).
        GpuSpec("H800", 989.5, 3.35, **_HOPPER, sm_count=132, memory_gib=80, fp8_tflops=1979.0,
                source="NVIDIA H800 SXM5 product brief: 1,979 TFLOPS bf16 sparse, 3.35 TB/s (NVLink 400 GB/s)"),
        # NVIDIA HGX H20 specifications (2024; no public NVIDIA datasheet URL, published by server
        # vendors and e.g. huggingface.co/hardware/h20): FP16/BF16 148 TFLOPS dense, 96 GB HBM3 4.0 TB/s.
        GpuSpec("H20", 148.0, 4.0, gemm_efficiency=0.85, attention_efficiency=0.60, memory_efficiency=0.80, launch_us=5.0,
                sm_count=78, memory_gib=96, fp8_tflops=296.0, fp8_gemm_efficiency=0.85,
                source="NVIDIA HGX H20 specifications (2024, as published by server vendors): 148 TFLOPS bf16 dense, 4.0 TB/s"),
        # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/): H200 SXM BF16 1,979 TFLOPS with
        # sparsity (989.5 dense), 141 GB HBM3e 4.8 TB/s.
        # FP8 3,958 TFLOPS with sparsity (1,979 dense).
        GpuSpec("H200", 989.5, 4.8, **_HOPPER, sm_count=132, memory_gib=141, fp8_tflops=1979.0,
                source="NVIDIA H200 datasheet, SXM column (nvidia.com/en-us/data-center/h200/): 1,979 TFLOPS bf16 sparse, 4.8 TB/s"),
        # NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx/): FP16/BF16 Tensor Core
        # 4.5 PFLOPS per GPU with sparsity (2.25 dense); NVIDIA DGX B200 datasheet: 64 TB/s HBM3e for
        # 8 GPUs, 8 TB/s each (the HGX table's later revision prints 7.7 TB/s; the higher value keeps
        # the roofline a lower bound).
        # FP8 9 PFLOPS with sparsity (4.5 dense).
        GpuSpec("B200", 2250.0, 8.0, gemm_efficiency=0.70, attention_efficiency=0.45, memory_efficiency=0.80, launch_us=5.0,
                sm_count=148, memory_gib=180, fp8_tflops=4500.0, fp8_gemm_efficiency=0.60,
                source="NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx/): 4.5 PFLOPS bf16 sparse; DGX B200 datasheet: 8 TB/s per GPU"),
    )
}


def known_gpus() -> list[str]:
    return list(GPUS)


def gpu(name: str, *, key: str = "--gpu") -> GpuSpec:
    """The GPU called ``name`` (case-insensitive); a ConfigError listing the known ones otherwise."""
    if name in GPUS:
        return GPUS[name]
    for known, spec in GPUS.items():
        if known.lower() == name.lower():
            return spec
    raise ConfigError(f"unknown GPU type {name!r}; known: {', '.join(GPUS)}", key=key)


def table() -> str:
    """The GPU table as text (name, peaks, efficiencies, source), for ``commsweep profile --list-gpus``."""
    lines = [f"{'gpu':<10} {'bf16 TFLOP/s':>12} {'HBM TB/s':>9} {'HBM GiB':>7} {'SMs':>4} {'gemm':>5} {'attn':>5} "
             f"{'mem':>5} {'launch us':>9}  source"]
    for g in GPUS.values():
        lines.append(
            f"{g.name:<10} {g.bf16_tflops:>12g} {g.hbm_tbps:>9g} {g.memory_gib:>7g} {g.sm_count:>4} {g.gemm_efficiency:>5g} "
            f"{g.attention_efficiency:>5g} {g.memory_efficiency:>5g} {g.launch_us:>9g}  {g.source}"
        )
    return "\n".join(lines) + "\n"
