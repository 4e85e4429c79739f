"""Counting wrappers on ``torch.distributed``: every collective a process issues.

Why wrappers on the public functions, installed before megatron is imported: megatron's
``tensor_parallel`` modules bind ``torch.distributed.all_gather_into_tensor`` and
``reduce_scatter_tensor`` to module globals at import time (``dist_all_gather_func``), so a
wrapper installed later would never see those calls. Only the names in the
``torch.distributed`` namespace are replaced; torch's own internals call the functions of
``distributed_c10d`` directly, so nothing is counted twice.

Sizes follow the workload files' convention: ``elements`` is the whole (unsharded) tensor
a collective works on: the gathered output of an all-gather, the input of a
reduce-scatter, the tensor of an all-reduce, broadcast or point-to-point message. ``bytes``
is ``elements`` times the element size of the dtype that really travelled.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# torch.distributed function -> (collective, argument holding the whole tensor, how to size it)
#   "tensor": the argument is one tensor; "list": a list of tensors, summed.
WRAPPED: dict[str, tuple[str, str, str]] = {
    "all_reduce": ("allreduce", "tensor", "tensor"),
    "all_gather_into_tensor": ("allgather", "output_tensor", "tensor"),
    "_all_gather_base": ("allgather", "output_tensor", "tensor"),
    "all_gather": ("allgather", "tensor_list", "list"),
    "reduce_scatter_tensor": ("reducescatter", "input", "tensor"),
    "_reduce_scatter_base": ("reducescatter", "input", "tensor"),
    "reduce_scatter": ("reducescatter", "input_list", "list"),
    "all_to_all_single": ("alltoall", "input", "tensor"),
    "all_to_all": ("alltoall", "input_tensor_list", "list"),
    "broadcast": ("broadcast", "tensor", "tensor"),
    "send": ("send", "tensor", "tensor"),
    "recv": ("recv", "tensor", "tensor"),
    "isend": ("send", "tensor", "tensor"),
    "irecv": ("recv", "tensor", "tensor"),
}


@dataclass(frozen=True)
class Call:
    """One collective call as the wrapper saw it (before any attribution)."""

    op: str  # the torch.distributed function called (all_reduce, all_gather_into_tensor, ...)
    collective: str  # allreduce | allgather | reducescatter | alltoall | broadcast | send | recv
    group: Any  # the ProcessGroup object, or None for the default group
    elements: int
    bytes: int
    peer: int | None  # global rank of the other end of a send / recv
    async_op: bool


def _size(value: Any, how: str) -> tuple[int, int]:
    tensors = list(value) if how == "list" else [value]
    return sum(t.numel() for t in tensors), sum(t.numel() * t.element_size() for t in tensors)


def describe(name: str, original: Callable, args: tuple, kwargs: dict) -> Call:
    """Bind a call's arguments to the function's signature and size its whole tensor."""
    collective, arg, how = WRAPPED[name]
    bound = inspect.signature(original).bind(*args, **kwargs)
    values = bound.arguments
    elements, nbytes = _size(values[arg], how)
    peer = values.get("dst", values.get("src")) if collective in ("send", "recv") else None
    async_op = bool(values.get("async_op", name in ("isend", "irecv")))
    return Call(name, collective, values.get("group"), elements, nbytes, peer, async_op)


_INSTALLED: dict[str, Callable] = {}


def install(on_call: Callable[[Call], None]) -> None:
    """Replace the functions of ``WRAPPED`` in ``torch.distributed``.

    ``on_call`` is called with each ``Call`` before the real function runs. ``isend`` and
    ``irecv`` are replaced in ``distributed_c10d`` too: ``P2POp`` checks its operation
    against those globals, and ``batch_isend_irecv`` calls each ``P2POp``'s operation, so
    batched pipeline messages are counted once each, by the same wrappers. Installing
    twice only changes the callback.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    global _callback
    _callback = on_call
    if _INSTALLED:
        return
    for name in WRAPPED:
        original = getattr(dist, name, None)
        if original is None:
            continue
        _INSTALLED[name] = original
        wrapped = _wrapper(name, original, _IMPLEMENTATIONS.get(name, lambda f: f)(original))
        setattr(dist, name, wrapped)
        if name in ("isend", "irecv"):
            setattr(c10d, name, wrapped)


_callback: Callable[[Call], None] = lambda call: None  # noqa: E731


def uneven_all_gather(original: Callable) -> Callable:
    """``all_gather`` into a list of outputs, also of different sizes, which gloo refuses
    ("ProcessGroupGloo::allgather: invalid tensor size"; megatron's MoE dispatcher gathers
    the tokens each expert-TP rank received, ``_gather_along_first_dim`` with split sizes):
    each rank's input is padded to the largest output along the first dimension, gathered,
    and cut to each output's size. Outputs of one size take the original call unchanged."""
    import torch

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        if len({t.shape for t in tensor_list}) <= 1:
            return original(tensor_list, tensor, group=group, async_op=async_op)
        rows = max(t.shape[0] for t in tensor_list)
        padded = torch.zeros((rows, *tensor.shape[1:]), dtype=tensor.dtype)
        padded[: tensor.shape[0]] = tensor
        gathered = [torch.empty_like(padded) for _ in tensor_list]
        original(gathered, padded, group=group)
        for out, full in zip(tensor_list, gathered):
            out.copy_(full[: out.shape[0]])
        return None

    return all_gather


# What a wrapped function runs in place of torch's, where gloo lacks what megatron calls.
_IMPLEMENTATIONS: dict[str, Callable[[Callable], Callable]] = {"all_gather": uneven_all_gather}


_inside = threading.local()


def _wrapper(name: str, original: Callable, implementation: Callable | None = None) -> Callable:
    """The counting version of ``original`` (which describes the call), running
    ``implementation`` (default: ``original`` itself).

    A call made while another wrapped call runs is not counted again: ``send`` calls the
    (wrapped) ``isend`` of ``distributed_c10d``, and with a ``TorchFunctionMode`` active
    every function re-dispatches to itself through ``handle_torch_function``.
    """

    run = implementation or original

    def wrapped(*args, **kwargs):
        if getattr(_inside, "depth", 0):
            return original(*args, **kwargs)
        _callback(describe(name, original, args, kwargs))
        _inside.depth = 1
        try:
            return run(*args, **kwargs)
        finally:
            _inside.depth = 0

    wrapped.__name__ = name
    wrapped.__qualname__ = name
    wrapped.__doc__ = original.__doc__
    wrapped.__wrapped__ = original
    return wrapped
