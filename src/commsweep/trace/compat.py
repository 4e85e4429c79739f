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
* ``cuda_stream_on_cpu`` (0.19): the DDP wrapper asks for the current CUDA stream
  before each gradient reduction, to wait on CUDA-graph events there are none of; the
  CPU's stream stands in (recorded only when megatron called it).
* ``stale_parallel_state`` (0.8 to 0.12): ``destroy_model_parallel`` leaves the ranks
  of the position-embedding group set; a trace runs several setups in one process, so
  ranks left from an earlier setup are cleared once the next setup's groups are made.
* ``cpu_rng_tracker`` (every release): megatron's model-parallel RNG tracker saves and
  restores CUDA RNG states. 0.16 offers an inference tracker that does not; 0.8 has none,
  so the same do-nothing tracker is installed directly (dropout is off: no draw is made).
* ``layer_spec_norm_default`` (0.8 to 0.11): ``get_gpt_layer_local_spec`` takes no
  ``normalization``; the norms are replaced by ``SequenceParallelNorm`` either way.
* ``param_gather_in_optimizer`` (0.8): the distributed optimizer, not the DDP
  wrapper, all-gathers the updated parameters, at the end of its step; the optimizer is
  built (torch's AdamW stands in for the fused Adam of apex or Transformer Engine) and
  its step run without gradient clipping, whose norm all-reduce no release's trace keeps.
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


def cuda_stream_on_cpu() -> None:
    """``torch.cuda.current_stream`` is the CPU's (whose waits do nothing): 0.19's DDP
    waits on the current stream for CUDA-graph events before every gradient reduction."""
    import torch

    torch.cuda.current_stream = used_stand_in("cuda_stream_on_cpu", torch.cpu.current_stream)


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


def local_layer_spec(normalization: str) -> tuple[Any, str | None]:
    """megatron's local (non Transformer-Engine) GPT layer spec."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if "normalization" in inspect.signature(get_gpt_layer_local_spec).parameters:
        return get_gpt_layer_local_spec(normalization=normalization), None
    return get_gpt_layer_local_spec(), "layer_spec_norm_default"


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
