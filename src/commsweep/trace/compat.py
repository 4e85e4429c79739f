"""What each megatron-core release needs, beyond ``model.py``'s common CPU set-up, to trace.

``model.py`` runs any release the same way; where releases differ in an API or in what
they need from CUDA, one small named function here bridges it. Each one detects what it
needs (a module file, a keyword, an attribute) rather than comparing version numbers, so
that a release between the traced ones takes the right branch, and each returns the name
of the workaround it applied (recorded with the trace: ``RankInfo.workarounds``), or None.

Workarounds (release ranges as traced; see ``docs/megatron-versions.md``):

* ``paged_stash_without_triton`` (0.18 and later): the MoE paged stash, which every GPT
  model and the pipeline schedules import, imports Triton for its kernels, and a CPU
  torch has no Triton. The module that does is imported with a stand-in Triton whose
  kernels raise if launched (a dense model on the CPU never launches them).
* ``cuda_stream_on_cpu`` (0.19; MoE from 0.9): the DDP wrapper asks for the current
  CUDA stream before each gradient reduction, to wait on CUDA-graph events there are none
  of, and the MoE all-to-all dispatcher copies its split sizes to the host on a side
  stream (0.12 and later) or synchronises the current one (before); a stream that does
  nothing (``CpuStream``) stands in for all of them (recorded only when megatron called one).
* ``stale_parallel_state`` (0.8 to 0.12): ``destroy_model_parallel`` leaves the ranks
  of the position-embedding group set; a trace runs several setups in one process, so
  ranks left from an earlier setup are cleared once the next setup's groups are made.
* ``cpu_rng_tracker`` (every release, not recorded): megatron's model-parallel RNG
  tracker saves and restores CUDA RNG states. 0.16 offers an inference tracker that does
  not; 0.8 has none, so the same do-nothing tracker is installed directly (dropout is
  off: no draw is made).
* ``layer_spec_norm_default`` (0.8 to 0.11): ``get_gpt_layer_local_spec`` takes no
  ``normalization``; the norms are replaced by ``SequenceParallelNorm`` either way.
* ``param_gather_in_optimizer`` (0.8): the distributed optimizer, not the DDP
  wrapper, all-gathers the updated parameters, at the end of its step; the optimizer is
  built (torch's AdamW stands in for the fused Adam of apex or Transformer Engine) and
  its step run without gradient clipping, whose norm all-reduce no release's trace keeps.

MLA only (recorded with MLA traces): ``mla_transformer_engine_stand_ins`` (0.14 and later):
megatron's MLA needs its Transformer Engine spec, CUDA only
(the local spec's core attention takes one width for keys and values); the spec is built with
CPU stand-ins for its three TE modules (``mla_transformer_engine_spec``), and 0.19's backend
lookup of the up projections answers with them. 0.10 to 0.13 build MLA's down projections
column parallel, which the schedule does not model: refused.

MoE only (recorded with MoE traces; a dense trace never needs them):

* ``moe_te_functions_none`` (0.8 to 0.16): ``moe_utils`` and the GPT layer specs bind
  Transformer Engine names only when TE imports, though megatron tests them for None
  (0.10's MoE spec, 0.12 to 0.16's router); the names their source imports that way are
  set to None.
* ``moe_split_sizes_on_host`` (0.12 and later): the dispatcher's
  ``maybe_move_tensor_to_cpu`` leaves a CPU tensor a tensor where it gives numpy for a
  CUDA one, and ``all_to_all_single`` takes no tensor of split sizes; a stand-in gives
  numpy (recorded when called).
* ``moe_router_by_name`` (0.8 to 0.15): the MoE layer builds megatron's ``TopKRouter``
  itself, not from its spec; the trace's balanced router takes that name in
  ``moe_layer`` (from 0.16 the spec names the router).
* ``experts_as_wide_as_ffn`` (0.8 to 0.11): before 0.10 there is no
  ``moe_ffn_hidden_size`` (experts are ``ffn_hidden_size`` wide), and 0.10 and 0.11's
  experts without grouped GEMM refuse any other width; where every layer is MoE nothing
  else reads ``ffn_hidden_size``, which takes the experts' width.
* ``integer_histc`` (0.9): the router and dispatcher count tokens per expert with
  ``torch.histc`` of integer indices, which the CPU refuses; they are counted in float.

Where a release lacks an option a setup needs (an MoE option of ``TransformerConfig``,
expert tensor parallelism), ``Unsupported`` says so, naming the release and the option;
an option it lacks but whose value asked for is what the release does anyway (every
layer MoE, no shared expert, ...) is simply left out. ``moe_state_reset`` (every release,
not a workaround) starts each traced model's MoE bookkeeping afresh.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.util
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..base.errors import CommsweepError

# Files that import Triton at their top (the MoE paged stash: in 0.18 the stash itself,
# from 0.19 its kernels' own module), which every GPT model imports.
TRITON_AT_IMPORT = ("core/transformer/moe/paged_stash.py", "core/transformer/moe/ops/paged_stash.py")

# Workarounds installed for every release but needed only where megatron calls them:
# each records its name here on first use.
USED: set[str] = set()


def used_stand_in(name: str, function: Any) -> Any:
    """``function``, recording ``name`` in ``USED`` whenever it is called."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        USED.add(name)
        return function(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


class CpuStream:
    """A CUDA stream, event and stream context on the CPU: work is already in order, so
    every wait, record and synchronisation does nothing."""

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "CpuStream":
        return self

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> "CpuStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_CPU_STREAM = CpuStream()


def cuda_stream_on_cpu() -> None:
    """``torch.cuda.Stream``, ``current_stream`` and ``stream`` give ``CpuStream`` (call
    after megatron is imported; recorded when megatron calls one): 0.19's DDP waits on the
    current stream for CUDA-graph events before every gradient reduction, and the MoE
    all-to-all dispatcher copies its split sizes to the host on a side stream (0.12 and
    later) or synchronises the current one (before)."""
    import torch

    torch.cuda.Stream = used_stand_in("cuda_stream_on_cpu", lambda *args, **kwargs: _CPU_STREAM)
    torch.cuda.current_stream = used_stand_in("cuda_stream_on_cpu", lambda *args, **kwargs: _CPU_STREAM)
    torch.cuda.stream = used_stand_in("cuda_stream_on_cpu", lambda stream=None: _CPU_STREAM)


# Modules that import Transformer Engine names in a ``try`` block, leaving them unbound
# without TE, though the MoE code reads them (0.10's MoE spec tests
# ``TEColumnParallelGroupedLinear is not None``; 0.12 to 0.16's router ``te_general_gemm``).
TE_NAMES_IN_TRY = ("megatron.core.transformer.moe.moe_utils", "megatron.core.models.gpt.gpt_layer_specs")


def moe_te_functions_none() -> str | None:
    """Set to None the Transformer Engine names that the modules of ``TE_NAMES_IN_TRY``
    import in a top-level ``try`` block and so leave unbound without TE: megatron tests
    them for None (from 0.17 it sets them to None itself). Found in each module's source;
    the name returned when any was set."""
    import importlib

    unbound = []
    for name in TE_NAMES_IN_TRY:
        module = importlib.import_module(name)
        tree = ast.parse(Path(module.__file__).read_bytes())
        imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.Try)
                    for statement in node.body if isinstance(statement, ast.ImportFrom)
                    and "transformer_engine" in (statement.module or "") for alias in statement.names}
        for te_name in sorted(imported):
            if not hasattr(module, te_name):
                setattr(module, te_name, None)
                unbound.append(te_name)
    return "moe_te_functions_none" if unbound else None


def integer_histc() -> None:
    """``torch.histc`` of an integer tensor counts in float and gives the input's type:
    CUDA counts integers, the CPU refuses them ("histogram_cpu" not implemented for
    'Long'), and 0.9's MoE router and dispatcher count tokens per expert that way (their
    expert indices: whole numbers, counted exactly). Recorded when called with integers."""
    import torch

    histc = torch.histc

    def stand_in(input: Any, bins: int = 100, min: float = 0, max: float = 0, **kwargs: Any) -> Any:
        if input.dtype.is_floating_point or kwargs:
            return histc(input, bins=bins, min=min, max=max, **kwargs)
        USED.add("integer_histc")
        return histc(input.float(), bins=bins, min=min, max=max).to(input.dtype)

    torch.histc = stand_in


def _to_host(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """megatron's ``maybe_move_tensor_to_cpu`` for tensors already on the CPU: what it gives
    for a CUDA tensor (numpy for the all-to-all split sizes, which torch.distributed takes
    as a sequence of ints; it returns a CPU tensor unchanged, which it does not)."""
    import torch

    if torch.is_tensor(tensor) and as_numpy:
        return tensor.numpy()
    return tensor


def moe_split_sizes_on_host() -> None:
    """The all-to-all dispatcher's ``maybe_move_tensor_to_cpu`` (0.12 and later) is
    ``_to_host`` (recorded as ``moe_split_sizes_on_host`` when called). Before 0.12 the
    dispatcher copies with ``.to("cpu").numpy()``, which a CPU tensor takes as it is."""
    from megatron.core.transformer.moe import token_dispatcher

    if hasattr(token_dispatcher, "maybe_move_tensor_to_cpu"):
        token_dispatcher.maybe_move_tensor_to_cpu = used_stand_in("moe_split_sizes_on_host", _to_host)


def megatron_version() -> str:
    """The version of the megatron-core that ``import megatron.core`` loads."""
    from megatron.core import package_info

    return package_info.__version__


def _megatron_file(relative: str) -> Path | None:
    """A file of the megatron package that would be imported, found without importing it."""
    spec = importlib.util.find_spec("megatron")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / relative
        if path.is_file():
            return path
    return None


@contextlib.contextmanager
def megatron_imports() -> Iterator[list[str]]:
    """Wrap the imports of megatron: yields the list of import-time workarounds applied."""
    applied: list[str] = []
    with contextlib.ExitStack() as stack:
        if stack.enter_context(paged_stash_without_triton()):
            applied.append("paged_stash_without_triton")
        yield applied


@contextlib.contextmanager
def paged_stash_without_triton() -> Iterator[bool]:
    """While megatron is imported, the modules of ``TRITON_AT_IMPORT`` that import Triton
    get a stand-in when there is none (yields whether one was needed).

    Only those modules see it: a finder hands them their own ``__import__``, which answers
    ``triton`` with the stand-in and passes every other name on. ``sys.modules`` never
    holds it, so torch (which probes for Triton and imports parts of it when found) does
    not see it. The stand-in's kernels raise if launched; a dense model on the CPU never
    launches them.
    """
    targets = {"megatron." + relative.removesuffix(".py").replace("/", "."): path
               for relative in TRITON_AT_IMPORT if (path := _megatron_file(relative)) is not None}
    targets = {name: path for name, path in targets.items() if _imports_triton(path)}
    if importlib.util.find_spec("triton") is not None or not targets:
        yield False
        return
    finder = _TritonStandInFinder(set(targets))
    sys.meta_path.insert(0, finder)
    try:
        yield True
    finally:
        sys.meta_path.remove(finder)


class _TritonStandInFinder(importlib.abc.MetaPathFinder):
    """Finds the modules named in ``targets`` as usual and has them import the stand-in
    Triton of ``_triton_stand_in`` (see ``paged_stash_without_triton``)."""

    def __init__(self, targets: set[str]) -> None:
        self.targets = targets

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.targets:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _WithStandInTriton(spec.loader)
        return spec


class _WithStandInTriton(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        import builtins

        stand_in = _triton_stand_in()
        real_import = builtins.__import__

        def scoped_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0):
            if level == 0 and name.split(".")[0] == "triton":
                return stand_in
            return real_import(name, globals, locals, fromlist, level)

        module.__builtins__ = {**builtins.__dict__, "__import__": scoped_import}
        self.loader.exec_module(module)


def _triton_stand_in() -> types.ModuleType:
    """A ``triton`` whose ``jit`` makes kernels that raise if launched, and whose
    ``language`` answers any name (type annotations such as ``tl.constexpr``)."""

    class Kernel:
        def __init__(self, function: Any = None, **options: Any) -> None:
            self.__name__ = getattr(function, "__name__", "kernel")

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"megatron's Triton kernel {self.__name__} was called on a CPU without Triton")

        __getitem__ = __call__

    def jit(function: Any = None, **options: Any) -> Any:
        return Kernel(function) if function is not None else (lambda f: Kernel(f))

    def attribute(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Kernel

    triton = types.ModuleType("triton", "commsweep's stand-in: Triton kernels cannot run on a CPU")
    language = types.ModuleType("triton.language")
    language.__getattr__ = attribute
    triton.jit, triton.language = jit, language
    return triton


def _imports_triton(path: Path) -> bool:
    """Whether a file imports Triton unconditionally (at its top level)."""
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] == "triton"
        for alias in node.names) for node in ast.parse(path.read_bytes()).body)


def stale_parallel_state() -> str | None:
    """Clear group ranks left over from an earlier setup (call right after
    ``initialize_model_parallel``): 0.8 to 0.12's ``destroy_model_parallel`` resets the
    position-embedding group but not its ranks, and ``initialize_model_parallel`` sets
    them only on the group's members, so a rank outside the new group, a member of the
    old one, believes it is in a group it never got. A trace runs several setups in one
    process; ranks set while their group is not are exactly those. They become an empty
    list, not None: 0.8 tests membership with ``rank in ranks`` alone."""
    from megatron.core import parallel_state

    stale = [name for name, value in vars(parallel_state).items()
             if name.startswith("_") and name.endswith("_GLOBAL_RANKS") and value
             and getattr(parallel_state, name.removesuffix("_GLOBAL_RANKS") + "_GROUP", 0) is None]
    for name in stale:
        setattr(parallel_state, name, [])
    return "stale_parallel_state" if stale else None


class _CpuRngTracker:
    """An RNG tracker that tracks nothing: ``fork`` is a no-op (what 0.16's inference
    tracker does)."""

    def is_initialized(self) -> bool:
        return True

    def reset(self) -> None:
        pass

    def get_states(self) -> dict:
        return {}

    def set_states(self, states: dict) -> None:
        pass

    def add(self, name: str, seed: int) -> None:
        pass

    def fork(self, name: str = "model-parallel-rng"):
        return contextlib.nullcontext()


def cpu_rng_tracker() -> None:
    """Install ``_CpuRngTracker`` as megatron's model-parallel RNG tracker (every
    release: not reported among the workarounds)."""
    from megatron.core.tensor_parallel import random

    random._CUDA_RNG_STATE_TRACKER = _CpuRngTracker()
    random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def moe_state_reset() -> Any:
    """A function starting a new model's MoE bookkeeping (make it once megatron is imported,
    before any trace; every release, not a workaround). megatron keeps the MoE losses it
    logs in a module-level tracker sized by the model's layers, which its training loop only
    zeroes: in ``parallel_state`` (0.8 to 0.12), ``moe_utils`` (0.13 to 0.17) or
    ``moe_logging``'s metrics tracker (0.18 and later, where ``moe_utils``' one is a copy);
    and the auxiliary-loss scale the schedule sets stays on ``MoEAuxLossAutoScaler``: it
    goes back to what it was at import (None, or 0.8's 1.0)."""
    from megatron.core import parallel_state
    from megatron.core.transformer.moe import moe_utils

    try:
        from megatron.core.transformer.moe import moe_logging
    except ImportError:
        moe_logging = None
    scaler = moe_utils.MoEAuxLossAutoScaler
    scale = scaler.main_loss_backward_scale
    scale = scale.clone() if scale is not None else None

    def reset() -> None:
        if moe_logging is not None:
            moe_logging.get_moe_metrics_tracker().metrics.clear()
        else:
            holder = moe_utils if hasattr(moe_utils, "get_moe_layer_wise_logging_tracker") else parallel_state
            holder.get_moe_layer_wise_logging_tracker().clear()
        scaler.main_loss_backward_scale = scale.clone() if scale is not None else None

    return reset


def local_layer_spec(normalization: str, num_experts: int | None = None, *,
                     multi_latent_attention: bool = False) -> tuple[Any, str | None]:
    """megatron's local (non Transformer-Engine) GPT layer spec (with ``num_experts``
    experts: its MoE layer's; with ``multi_latent_attention``, its MLA layer's)."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    parameters = inspect.signature(get_gpt_layer_local_spec).parameters
    extra: dict[str, Any] = {}
    if multi_latent_attention:
        if "multi_latent_attention" not in parameters:
            raise _unsupported("multi-latent attention", "its GPT layer specs have no MLA")
        extra["multi_latent_attention"] = True
    if "normalization" in parameters:
        return get_gpt_layer_local_spec(num_experts=num_experts, normalization=normalization, **extra), None
    return get_gpt_layer_local_spec(num_experts=num_experts, **extra), "layer_spec_norm_default"


def mla_transformer_engine_spec(submodules: Any, *, down: type, up: type, core_attention: type) -> str:
    """MLA's submodules as megatron's Transformer Engine spec has them, with CPU stand-ins
    for its three TE modules (``model.py`` says what each does): the q and kv down
    projections duplicated on every TP rank (``TELinear``, parallel mode "duplicated"), the
    up projections with the latent norms fused in (``TELayerNormColumnParallelLinear``), and
    core attention taking keys and values of different widths (``TEDotProductAttention``).
    The local spec cannot run MLA (its ``DotProductAttention`` takes one width for keys and
    values) and is not what a GPU run builds (its down projections are column parallel).
    ``MLASelfAttention`` asks for the duplicated mode only of a class it knows as TE's
    ``TELinear``: the stand-in takes that name in its module."""
    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer.identity_op import IdentityOp

    source = _megatron_file("core/transformer/multi_latent_attention.py")
    if source is None or b"'duplicated'" not in source.read_bytes():
        raise _unsupported("multi-latent attention as GPUs run it",
                           "its Transformer Engine spec builds MLA's down projections column parallel (0.10 to 0.13), "
                           "which the megatron schedule does not model")
    multi_latent_attention.TELinear = down
    try:  # 0.19 and later pick the up projections (and the latent norms) from the backend
        from megatron.core.transformer import mla_qk_norm_config
    except ImportError:
        mla_qk_norm_config = None
    if mla_qk_norm_config is not None:
        mla_qk_norm_config.get_backend = lambda impl: _MlaBackend(up)
    submodules.linear_q_down_proj = down
    submodules.linear_kv_down_proj = down
    submodules.linear_q_up_proj = up
    submodules.linear_kv_up_proj = up
    submodules.q_layernorm = IdentityOp
    submodules.kv_layernorm = IdentityOp
    submodules.core_attention = core_attention
    return "mla_transformer_engine_stand_ins"


class _MlaBackend:
    """What 0.19's ``QKNormConfigResolver`` asks of the Transformer Engine backend (it
    builds MLA's up projections with the latent norms fused in, and, without a query latent,
    ``linear_q_proj`` with a norm of the hidden state fused in): the fused stand-in."""

    def __init__(self, fused: type) -> None:
        self.fused = fused

    def column_parallel_layer_norm_linear(self) -> type:
        return self.fused

    def column_parallel_linear(self) -> type:
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear

        return ColumnParallelLinear

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False) -> Any:
        return None  # not asked for: MLA's norms are fused into the up projections


class Unsupported(CommsweepError):
    """The megatron-core release cannot run what was asked for (an option it lacks)."""


def _unsupported(what: str, why: str) -> Unsupported:
    return Unsupported(f"megatron-core {megatron_version()} cannot trace {what}: {why}")


def parallel_sizes(tp: int, pp: int, ep: int, expert_tp: int) -> dict[str, int]:
    """``initialize_model_parallel``'s keywords. Releases before 0.10 have no expert tensor
    parallelism of its own (``expert_tensor_parallel_size``): their experts split over TP,
    which is what an expert TP equal to TP asks for, and nothing else can be traced."""
    from megatron.core import parallel_state

    sizes = dict(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, expert_model_parallel_size=ep)
    if "expert_tensor_parallel_size" in inspect.signature(parallel_state.initialize_model_parallel).parameters:
        return {**sizes, "expert_tensor_parallel_size": expert_tp}
    if expert_tp != tp:
        raise _unsupported(f"expert TP {expert_tp} under TP {tp}",
                           "it has no expert tensor parallelism of its own (experts split over TP)")
    return sizes


def config_options(config_class: Any, options: dict[str, Any], implied: dict[str, Any]) -> dict[str, Any]:
    """``options`` for ``TransformerConfig`` less those the release lacks, where the value
    asked for is ``implied[option]``, what the release does without it (an older release
    without ``moe_layer_freq`` makes every layer MoE, which 1 asks for); a lacking option
    asked with another value cannot be traced with this release."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(config_class)}
    lacking = [name for name in options if name not in known]
    refused = [f"{name}={options[name]!r}" for name in lacking if name not in implied or options[name] != implied[name]]
    if refused:
        raise _unsupported(f"this model ({', '.join(refused)})",
                           f"its TransformerConfig has no {', '.join(n.split('=')[0] for n in refused)}")
    return {name: value for name, value in options.items() if name in known}


def _experts_need_ffn_width() -> bool:
    """Whether the release's ``SequentialMLP`` (the experts without grouped GEMM) refuses
    ``moe_ffn_hidden_size`` other than ``ffn_hidden_size`` (0.10 and 0.11 assert it)."""
    path = _megatron_file("core/transformer/moe/experts.py")
    return path is not None and b"moe_ffn_hidden_size == self.config.ffn_hidden_size" in path.read_bytes()


def experts_as_wide_as_ffn(config_class: Any, options: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Releases before 0.10 have no ``moe_ffn_hidden_size``: their experts are
    ``ffn_hidden_size`` wide; 0.10 and 0.11 have it but their experts (``SequentialMLP``,
    the CPU's: no grouped GEMM) refuse any other width. Where every layer is MoE, only the
    experts read ``ffn_hidden_size`` (a shared expert takes its own width), so it takes the
    experts' width and the model is the one asked for. A model with dense layers of another
    width cannot be traced with 0.10 or 0.11 (before 0.10 ``config_options`` refuses it:
    ``moe_layer_freq`` is lacking too)."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(config_class)}
    if "moe_ffn_hidden_size" not in options or ("moe_ffn_hidden_size" in known and not _experts_need_ffn_width()):
        return options, None
    if options["moe_ffn_hidden_size"] == options["ffn_hidden_size"]:
        return {k: v for k, v in options.items() if k in known or k != "moe_ffn_hidden_size"}, None
    if options.get("moe_layer_freq", 1) != 1:
        if "moe_ffn_hidden_size" not in known:
            return options, None  # config_options names what is lacking
        raise _unsupported(
            f"experts {options['moe_ffn_hidden_size']} wide beside dense layers {options['ffn_hidden_size']} wide",
            "its experts without grouped GEMM (SequentialMLP) must be as wide as the dense MLP")
    options = dict(options)
    options["ffn_hidden_size"] = options["moe_ffn_hidden_size"]
    if "moe_ffn_hidden_size" not in known:
        del options["moe_ffn_hidden_size"]
    return options, "experts_as_wide_as_ffn"


def moe_router(mlp: Any, router: type) -> str | None:
    """Have the MoE layer of the spec ``mlp`` route with ``router`` (a ``TopKRouter``).
    From 0.16 the spec names the router (``MoESubmodules.router``; from 0.18 the spec is a
    builder, ``functools.partial``, holding those submodules); before, ``MoELayer`` builds
    megatron's ``TopKRouter`` by name, and that name in its module becomes ``router``
    (``moe_router_by_name``: every MoE layer of the process then routes with it)."""
    import dataclasses
    import functools

    if isinstance(mlp, functools.partial):
        submodules = mlp.keywords.get("submodules")
    else:
        submodules = getattr(mlp, "submodules", None)
    if dataclasses.is_dataclass(submodules) and "router" in {f.name for f in dataclasses.fields(submodules)}:
        submodules.router = router
        return None
    from megatron.core.transformer.moe import moe_layer

    if not hasattr(moe_layer, "TopKRouter"):
        raise _unsupported("an MoE layer with balanced routing",
                           "its MoE layer neither takes a router nor builds TopKRouter")
    moe_layer.TopKRouter = router
    return "moe_router_by_name"


def _cpu_tensors_named_cuda():
    """A torch function mode in which ``Tensor.type()`` names a CPU tensor as its CUDA
    kind: the 0.8 distributed optimizer sorts parameters by those names
    (``torch.cuda.FloatTensor``, ...) and rejects any other."""
    import torch
    from torch.overrides import TorchFunctionMode

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                return name if name.startswith("torch.cuda.") else name.replace("torch.", "torch.cuda.", 1)
            return func(*args, **kwargs)

    return Mode()


def param_gather(ddp: Any) -> tuple[Any, str | None]:
    """A callable issuing what the distributed optimizer's step issues to gather the
    updated parameters (synchronously); build it before the traced step, call it after."""
    if hasattr(ddp, "start_param_sync"):
        return (lambda: ddp.start_param_sync(force_sync=True)), None
    import warnings

    import torch
    from megatron.core.optimizer import OptimizerConfig, distrib_optimizer, get_megatron_optimizer

    if not distrib_optimizer.HAVE_APEX_OR_TE:
        # It refuses to run without apex's or Transformer Engine's fused Adam, though
        # megatron's optimizer module falls back to torch's AdamW, which it says is a
        # drop-in replacement; the gather does not depend on the update rule.
        distrib_optimizer.HAVE_APEX_OR_TE = True
        distrib_optimizer.Adam = torch.optim.AdamW
    config = OptimizerConfig(optimizer="adam", lr=1e-4, params_dtype=torch.float32, use_distributed_optimizer=True)
    with warnings.catch_warnings(), _cpu_tensors_named_cuda():
        warnings.simplefilter("ignore")  # "falling back to torch optimizers": the point here
        optimizer = get_megatron_optimizer(config, [ddp])

    def gather() -> None:
        # The step without gradient clipping (its norm all-reduce is not traced in any
        # release): copy gradients in, update, copy parameters out, gather them.
        with torch.no_grad(), _cpu_tensors_named_cuda():
            optimizer.prepare_grads()
            optimizer.step_with_ready_grads()

    return gather, "param_gather_in_optimizer"
