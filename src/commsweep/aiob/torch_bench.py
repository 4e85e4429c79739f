"""The torch backend: run AICB's AIOB operators for real with PyTorch and time them.

The operators and shapes are those of AICB's ``AiobMegatron`` (see ``roofline`` for what
each section covers), built from the model's own architecture (GQA, swiglu, RMSNorm).
Where AICB calls a CUDA extension this module uses PyTorch's own equivalent:
``torch.nn.functional.layer_norm`` / ``rms_norm`` for apex's FastLayerNorm (AICB's own
fallback), ``scaled_dot_product_attention`` (FlashAttention's kernel on CUDA) for
``flash_attn_unpadded_func``.

Every section is run ``warmup`` times untimed, then ``iters`` times, each call timed on
its own: between CUDA events recorded around the call and followed by a device
synchronisation (what AICB's ``cuda_timing_decorator`` does), or with the wall clock on
the CPU, whose kernels are synchronous. Times are aggregated the way AICB's
``process_all_keys`` does: the minimum; samples above three times the minimum are
dropped; the maximum and the mean of the rest. ``train_iter`` is ``iters``.

Tensors are made section by section and freed after it, so the peak memory is that of
the largest section (usually ``param_time``'s fp32 buffer of AICB's parameter count);
the module checks that it fits before allocating anything.

PyTorch is an optional dependency (``pip install '.[torch]'``) and is imported only
inside the functions here.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..base.errors import CommsweepError, ConfigError
from ..setup.training import TrainingSetup
from .profile_file import STANDARD_SECTIONS, AiobProfile, OpTime
from .roofline import Shard, _us, aicb_model_param, check_shard

INSTALL_HINT = "the torch backend needs PyTorch: pip install '.[torch]' (or pip install torch==2.13.0)"


def import_torch():
    """PyTorch, or a CommsweepError saying how to install it."""
    try:
        import torch
    except ImportError as err:
        raise CommsweepError(f"{INSTALL_HINT} ({err})") from None
    return torch


@dataclass(frozen=True)
class Measurement:
    """One section's samples in microseconds, and AICB's aggregate of them."""

    section: str
    samples: tuple[float, ...]

    def aggregate(self) -> OpTime:
        """AICB's ``process_all_keys``: min; drop samples above 3 x min; max and mean of the rest."""
        low = min(self.samples)
        kept = [t for t in self.samples if t <= 3 * low]
        return OpTime(max=_us(max(kept)), min=_us(low), avg=_us(sum(kept) / len(kept)))


@dataclass(frozen=True)
class TorchRun:
    profile: AiobProfile
    measurements: tuple[Measurement, ...]
    device: str  # e.g. "cuda:0 (NVIDIA H200)" or "cpu (2 threads)"
    torch_version: str


# -- memory ----------------------------------------------------------------------------


def section_bytes(setup: TrainingSetup) -> dict[str, int]:
    """Bytes each section allocates (inputs, weights, outputs, temporaries), for the fit check."""
    sh = Shard.of(setup)
    n, h, t = sh.tokens, sh.h, sh.t
    bf = 2
    vocab_rows = math.ceil(sh.vocab / t)
    heads, groups, d = sh.heads // t, sh.kv_groups // t, sh.head_dim
    m_e, experts = sh.expert_tokens, sh.local_experts
    max_pos = max(setup.model.max_position_embeddings, sh.s)
    norm = sh.norm_rows * h * bf * 2 + 4 * h
    return {
        "Emb": vocab_rows * h * 8 + max_pos * h * 4 + n * h * (8 + 4 + 4 + 4) + n * 8 * 6,
        "layernorm": norm,
        "atten_qkv": bf * (n * h + h * sh.qkv_width + n * sh.qkv_width),
        "atten_flash": bf * n * (2 * heads * d + 2 * groups * d) + 4 * sh.b * heads * sh.s,
        "atten_linear": bf * (2 * n * heads * d + heads * d * h + n * h),
        "layernorm2": norm,
        "mlp_linear_1": bf * experts * (m_e * h + h * sh.fc1_width + m_e * sh.fc1_width),
        "mlp_gelu": bf * experts * m_e * sh.fc1_width * 3,
        "mlp_linear_2": bf * experts * (m_e * sh.fc2_width + h * sh.fc2_width + m_e * h),
        "layernorm_post": norm,
        "logit_time": bf * (n * h + h * sh.vocab // t + n * sh.vocab // t),
        "param_time": 4 * (aicb_model_param(setup) // t),
    }


def _free_bytes(torch, device) -> tuple[int, str]:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return free, "free GPU memory"
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "available host memory"
    except (ValueError, OSError, AttributeError):
        return 1 << 62, "host memory"


# -- the operators ---------------------------------------------------------------------


def _builders(setup: TrainingSetup, torch, device, dtype) -> dict[str, Callable[[], Callable[[], object]]]:
    """For each section, a function that allocates its tensors and returns the timed call."""
    ops = _Operators(setup, torch, device, dtype)
    sh = ops.sh
    h, t, s, b = sh.h, sh.t, sh.s, sh.b
    return {
        "Emb": ops.embedding,
        "layernorm": ops.norm,
        "atten_qkv": lambda: ops.linear((s, b), h, sh.qkv_width),
        "atten_flash": ops.flash,
        "atten_linear": ops.projection,
        "layernorm2": ops.norm,
        "mlp_linear_1": lambda: ops.expert_linears(h, sh.fc1_width),
        "mlp_gelu": ops.activation,
        "mlp_linear_2": lambda: ops.expert_linears(sh.fc2_width, h),
        "layernorm_post": ops.norm,
        "logit_time": lambda: ops.linear((s, b), h, sh.vocab // t),
        "param_time": ops.param,
    }


class _Operators:
    """AICB's operators on one rank's shard: each method allocates its tensors and returns the
    timed call. Creating it seeds torch's generator (the tensors are the same every run)."""

    def __init__(self, setup: TrainingSetup, torch, device, dtype):
        import torch.nn.functional as F

        self.setup, self.torch, self.F, self.device, self.dtype = setup, torch, F, device, dtype
        self.sh = sh = Shard.of(setup)
        self.heads, self.groups = sh.heads // sh.t, sh.kv_groups // sh.t
        self.rows_shape = (sh.s, sh.b) if sh.experts is None else (sh.expert_tokens,)
        torch.manual_seed(0)

    def rand(self, *shape):
        return self.torch.rand(*shape, device=self.device).to(self.dtype)

    def embedding(self):
        torch, device, sh = self.torch, self.device, self.sh
        h, t, s, b = sh.h, sh.t, sh.s, sh.b
        rows = math.ceil(sh.vocab / t)
        ids = torch.randint(0, rows, (b, s), device=device)
        table = torch.zeros(rows, h, dtype=torch.int64, device=device)  # AICB: randint(0, 1) as int64
        max_pos = max(self.setup.model.max_position_embeddings, s)
        positions = torch.nn.Embedding(max_pos, h).to(device)
        position_ids = torch.randint(0, max(s - 1, 1), (1, s), device=device)

        def call():
            if t > 1:
                mask = (ids < 0) | (ids >= rows)
                masked = ids.clone() - 0
                masked[mask] = 0
            else:
                masked = ids
            words = table[masked]
            return (words + positions(position_ids)).transpose(0, 1).contiguous()

        return call

    def norm(self):
        F, sh = self.F, self.sh
        h = sh.h
        rows = -(-sh.s // sh.t) if sh.sp else sh.s
        x = self.rand(rows, sh.b, h)
        weight, bias = self.rand(h), self.torch.zeros(h, dtype=self.dtype, device=self.device)
        if self.setup.model.normalization == "rmsnorm":
            return lambda: F.rms_norm(x, [h], weight, 1e-5)
        return lambda: F.layer_norm(x, [h], weight, bias, 1e-5)

    def linear(self, rows_shape: tuple[int, ...], k: int, out: int):
        x, w = self.rand(*rows_shape, k), self.rand(out, k)
        torch = self.torch
        return lambda: torch.matmul(x, w.t())

    def flash(self):
        F, sh, heads, groups = self.F, self.sh, self.heads, self.groups
        b, s, d = sh.b, sh.s, sh.head_dim
        q = self.rand(b, heads, s, d)
        k, v = self.rand(b, groups, s, d), self.rand(b, groups, s, d)
        gqa = groups != heads
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def projection(self):
        torch, sh, heads = self.torch, self.sh, self.heads
        b, s, d = sh.b, sh.s, sh.head_dim
        context, w = self.rand(b, s, heads, d), self.rand(sh.h, heads * d)

        def call():
            sbh = context.permute(1, 0, 2, 3).reshape(s, b, heads * d).contiguous()
            return torch.matmul(sbh, w.t())

        return call

    def expert_linears(self, k: int, out: int):
        calls = [self.linear(self.rows_shape, k, out) for _ in range(self.sh.local_experts)]
        return lambda: [c() for c in calls]

    def activation(self):
        F, torch, sh = self.F, self.torch, self.sh
        xs = [self.rand(*self.rows_shape, sh.fc1_width) for _ in range(sh.local_experts)]
        bias = self.rand(sh.fc1_width)

        def one(x):
            if sh.bias:
                x = x + bias
            if sh.swiglu:
                gate, up = torch.chunk(x, 2, dim=-1)
                return F.silu(gate) * up
            return F.gelu(x)

        return lambda: [one(x) for x in xs]

    def param(self):
        torch, setup = self.torch, self.setup
        values = aicb_model_param(setup) // self.sh.t
        data = torch.rand(values, device=self.device, dtype=torch.float32)
        dp = max(setup.dp, 1)

        def call():
            data.div_(dp)
            shard = values // dp
            return [data[r * shard:(r + 1) * shard] for r in range(dp)]

        return call


def _pick_device(torch, device: str):
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("CUDA is not available to PyTorch here; use --device cpu or auto", key="--device")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ConfigError(f"not a PyTorch device: {err}", key="--device") from None


def _timer(torch, device) -> Callable[[Callable[[], object]], float]:
    if device.type == "cuda":
        def timed(call):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize(device)
            return start.elapsed_time(end) * 1000.0  # ms -> us

        return timed

    def wall(call):
        begin = time.perf_counter()
        call()
        return (time.perf_counter() - begin) * 1e6

    return wall


def run(
    setup: TrainingSetup,
    *,
    device: str = "auto",
    warmup: int = 3,
    iters: int = 10,
    threads: int | None = None,
) -> TorchRun:
    """Time every AIOB section of ``setup``'s rank on ``device``."""
    if warmup < 0:
        raise ConfigError(f"must be >= 0, got {warmup}", key="--warmup")
    if iters < 1:
        raise ConfigError(f"must be >= 1, got {iters}", key="--iters")
    check_shard(setup)
    torch = import_torch()
    dev = _pick_device(torch, device)
    if threads is not None and threads > 0:
        torch.set_num_threads(threads)

    need = section_bytes(setup)
    free, what = _free_bytes(torch, dev)
    biggest = max(need, key=need.__getitem__)
    if need[biggest] * 1.2 > free:
        raise CommsweepError(
            f"section {biggest} needs about {need[biggest] / 2**30:.1f} GiB but only {free / 2**30:.1f} GiB of "
            f"{what} is there; profile a smaller shard (more TP, shorter sequence) or use the roofline backend"
        )

    builders = _builders(setup, torch, dev, torch.bfloat16)
    timed = _timer(torch, dev)
    measurements = []
    with torch.no_grad():
        for section in STANDARD_SECTIONS:
            call = builders[section]()
            for _ in range(warmup):
                call()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            samples = tuple(timed(call) for _ in range(iters))
            measurements.append(Measurement(section, samples))
            del call
            if dev.type == "cuda":
                torch.cuda.empty_cache()

    if dev.type == "cuda":
        where = f"{dev} ({torch.cuda.get_device_name(dev)})"
    else:
        where = f"cpu ({torch.get_num_threads()} threads)"
    profile = AiobProfile(sections=tuple((m.section, m.aggregate()) for m in measurements), train_iter=iters)
    return TorchRun(profile=profile, measurements=tuple(measurements), device=where, torch_version=torch.__version__)
