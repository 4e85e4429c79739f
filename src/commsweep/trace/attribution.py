"""Which phase and which Megatron module issued a collective.

Forward: a stack of the modules whose forward is running (forward pre-hooks and hooks);
the innermost one issued the call.

Backward: autograd runs the backward of a node created in forward; the collective
belongs to the module whose forward created that node. Every autograd node carries a
sequence number that grows as nodes are created, so each module's forward is recorded as
the span of sequence numbers created inside it, and a backward call is attributed to the
innermost span holding ``torch._C._current_autograd_node()``'s number. This needs no
change to megatron and follows megatron's own autograd functions (the SP re-gather for
the weight gradient is issued by linear_qkv's node, not by whatever ran before it).

After backward (gradient finalisation, the parameter gather) no module runs: the call is
attributed to the innermost megatron function on the Python stack.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from .collectives import Call
from .records import TraceRecord

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def _probe_sequence_nr() -> int | None:
    """The sequence number the next autograd node will get (one is created to find it)."""
    import torch

    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True) * 1
    return probe.grad_fn._sequence_nr() if probe.grad_fn is not None else None


def megatron_caller() -> str:
    """The innermost megatron function on the stack, as ``package.module.Qualified.name``."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("megatron.core."):
            return name.removeprefix("megatron.core.") + "." + frame.f_code.co_qualname
        frame = frame.f_back
    return "unknown"


class Attribution:
    """Turns the wrappers' ``Call``s into ``TraceRecord``s while a step runs."""

    def __init__(self, group_name: Callable[[Any], tuple[str, int]], *, rank: int, stage: int, layer_offset: int):
        self.group_name = group_name
        self.rank = rank
        self.stage = stage
        self.layer_offset = layer_offset
        # Model chunks other than the stage's only one: module-name prefix -> its first layer.
        self.chunk_offsets: dict[str, int] = {}
        self.records: list[TraceRecord] = []
        self.after_backward = False
        self._stack: list[tuple[str, int]] = []  # running modules: name, sequence number at entry
        self._spans: list[tuple[int, int, str]] = []
        self.enabled = False

    # -- module hooks ----------------------------------------------------------------
    def attach(self, model, prefix: str = "", layer_offset: int | None = None) -> None:
        """Hook every submodule of ``model`` (names relative to it; the root is ''); a model
        chunk of an interleaved stage with ``prefix`` on its names and its first layer."""
        if prefix:
            self.chunk_offsets[prefix] = self.layer_offset if layer_offset is None else layer_offset
        for name, module in model.named_modules():
            name = prefix + name if name or not prefix else ""
            module.register_forward_pre_hook(self._pre_hook(name))
            module.register_forward_hook(self._post_hook(name))

    def _pre_hook(self, name: str):
        def hook(module, args):
            self._stack.append((name, _probe_sequence_nr() or 0))

        return hook

    def _post_hook(self, name: str):
        def hook(module, args, output):
            _, start = self._stack.pop()
            self._spans.append((start, _probe_sequence_nr() or 0, name))

        return hook

    # -- the callback the wrappers call ----------------------------------------------
    def module_of_node(self, sequence_nr: int) -> str | None:
        best: tuple[int, int, str] | None = None
        for span in self._spans:
            if span[0] <= sequence_nr <= span[1] and (best is None or span[0] >= best[0]):
                best = span
        return best[2] if best else None

    def on_call(self, call: Call) -> None:
        if not self.enabled:
            return
        import torch

        node = torch._C._current_autograd_node()
        if node is not None:
            phase = "backward"
            module = self.module_of_node(node._sequence_nr())
        elif self.after_backward:
            phase, module = "after_backward", None
        else:
            phase = "forward"
            module = self._stack[-1][0] if self._stack else None
        if not module:  # outside any submodule (the root model, or no module at all)
            module = megatron_caller()
        group, size = self.group_name(call.group)
        if call.collective in ("send", "recv"):
            # Megatron sends one direction of a 2-stage pipeline over the world group, only
            # to overlap the two directions; the message still goes to a pipeline neighbour.
            phase = self.pipeline_phase(call)
            group, size = self.group_name(self._pipeline_group())
        offset = self.layer_offset
        for prefix, first in self.chunk_offsets.items():
            if module.startswith(prefix):
                module, offset = module.removeprefix(prefix), first
        match = _LAYER.search(module)
        layer = int(match.group(1)) + offset if match else None
        self.records.append(TraceRecord(
            op=call.op, collective=call.collective, group=group, group_size=size,
            elements=call.elements, bytes=call.bytes, phase=phase, module=module, layer=layer,
            rank=self.rank, stage=self.stage, async_op=call.async_op,
        ))

    def pipeline_phase(self, call: Call) -> str:
        """A pipeline message is forward when it goes downstream (activations), backward
        when it goes upstream (gradients); the pipeline schedule issues both outside autograd."""
        downstream = call.peer is not None and self._is_next(call)
        return "forward" if downstream else "backward"

    @staticmethod
    def _pipeline_group():
        from megatron.core import parallel_state as ps

        return ps.get_pipeline_model_parallel_group()

    def _is_next(self, call: Call) -> bool:
        import torch.distributed as dist

        ranks = dist.get_process_group_ranks(self._pipeline_group())
        me, p = ranks.index(self.rank), len(ranks)
        if self.chunk_offsets:  # interleaved: the last stage's chunk hands on to the first's next
            # (p > 2: with two stages each is both neighbours, and a message's direction is unknown)
            return call.peer == ranks[(me + 1) % p] if call.collective == "send" else call.peer == ranks[me - 1]
        if call.collective == "send":
            return me + 1 < len(ranks) and call.peer == ranks[me + 1]
        return me > 0 and call.peer == ranks[me - 1]  # a recv from upstream carries activations
