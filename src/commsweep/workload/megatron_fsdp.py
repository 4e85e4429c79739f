"""Fully sharded data parallelism in the Megatron schedule: megatron-fsdp and torch FSDP2.

megatron-core (NVIDIA/Megatron-LM core_v0.16.1) shards data parallelism two ways:

* **megatron-fsdp** (Megatron-LM's ``--use-megatron-fsdp``,
  ``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``, ``FullyShardedDataParallel``,
  over the DP x CP group). ``--data-parallel-sharding-strategy`` says what is sharded
  (``megatron_fsdp/megatron_fsdp.py``, ``MegatronFSDP.__init__`` and ``_register_fsdp_hooks``):

  - ``no_shard``: nothing; the gradients are all-reduced bucket by bucket in the last
    micro-batch's backward pass (``is_delay_grad_reduce``), no parameter is gathered;
  - ``optim``: the optimizer state; gradients reduce-scattered bucket by bucket in the last
    micro-batch, parameters all-gathered once per iteration (``start_param_sync``), as the
    distributed optimizer does;
  - ``optim_grads``: and the gradients; each bucket is reduce-scattered in *every* micro-batch's
    backward pass once its last gradient is ready (``_process_post_backward_gradients``:
    ``grad_reduce_every_bprop``); parameters still gathered once per iteration;
  - ``optim_grads_params``: and the parameters; the FSDP units are the transformer layers
    (``FullyShardedDataParallel.__init__``: ``fsdp_unit_modules = [TransformerLayer]``); in every
    micro-batch each layer's parameters are all-gathered before its forward
    (``_pre_forward_param_unshard``), released after it (``_post_forward``), all-gathered again
    before its backward (``_pre_backward_param_unshard``), and its gradients reduce-scattered
    after it; the parameters outside any unit (embedding, final norm, output layer) are
    reduce-scattered once their gradients are ready, in every micro-batch, and gathered once per
    iteration, before the first micro-batch's forward: only a unit's bucket is released after
    its forward and backward (``release_module_parameters``); the others stay gathered until
    ``finish_grad_sync`` resets the pipeline (``AllGatherPipeline.all_gather_params`` gathers an
    empty bucket only).

  Buckets (``megatron_fsdp/param_and_grad_buffer.py``, ``_get_parameter_groups``): parameters
  are grouped, in registration order, by dtype (FP8 weights apart from bf16), expert or not, and
  FSDP unit; a group outside any unit is cut once it holds the suggested bucket size
  (Megatron-LM's ``training.py`` ``get_model``: ``max(40M, 1M x DP x CP)`` parameters with
  ``--overlap-grad-reduce``, else no limit) and a shared (tied, pp > 1) embedding gets a bucket of
  its own; each bucket's parameters are sorted by row size, packed (``build_data_parallel_buffer_index``)
  and the bucket padded to a multiple of DP x CP x its chunk factor (the rows' least common multiple).
* **torch FSDP2** (``--use-torch-fsdp2``, ``megatron/core/distributed/torch_fully_sharded_data_parallel.py``,
  ``TorchFullyShardedDataParallel.__init__``): ``fully_shard`` on each transformer layer, the
  embedding and the output layer (``ColumnParallelLinear``), then on the whole model (the root,
  here the final norm). Each unit's parameters are all-gathered before its forward and again
  before its backward (megatron passes ``reshard_after_forward=True`` to every ``fully_shard``,
  the root's included, whose backward gather comes first) and its gradients reduce-scattered
  after its backward, in every micro-batch (megatron's ``no_sync`` is a no-op for it:
  ``data_parallel_base.py``); the root's and the embedding's (whose input needs no gradient)
  last, in FSDP2's final callback. Each parameter is sharded on its
  first dimension, padded to a multiple of DP x CP rows. Parameters and gradients are bf16
  (no mixed-precision policy: the model is already bf16).

FP8 parameter gathers (``--fp8-param-gather``: megatron's ``fp8_param``, TransformerEngine's
``fp8_model_init``, ``megatron/core/fp8_utils.py``): the transformer layers' linear weights are
FP8 tensors, 1 byte per element; the distributed optimizer gathers them from a ``torch.uint8``
buffer of their own (``distributed/distributed_data_parallel.py``, ``DistributedDataParallel.__init__``),
megatron-fsdp from a ``float8`` bucket of their own. Norms, biases, the embedding and the output
layer stay bf16; the gradients keep their type.

SimAI's rows carry a DP collective in the weight-gradient column only: each per-micro-batch
reduce-scatter is a row of its own, written just before the rows of the unit it follows (SimAI
runs rows backwards in the backward pass). The per-layer all-gathers of the forward and
backward passes cannot be rows: they are unexpressed, each anchored to the row before whose
forward (or input-gradient) compute megatron issues it, which the Chakra export follows, and
which a sweep's simulation adds their exposed part to (``in_rows``; the file unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..setup.training import FSDP_STRATEGIES, TrainingSetup
from .format import Workload
from .megatron_blocks import BF16, FP32, Block, Build, Comm, Rows, Unexpressed

FP8 = 1
EMBEDDING, OUTPUT = -1, 1 << 30  # positions of the parts outside the transformer layers
NOTE = ("FSDP's per-layer parameter all-gathers (forward and backward) have no SimAI column: they are "
        "not in the workload file (see docs/workload.md); simulate --fsdp-gathers prices them")


@dataclass(frozen=True)
class Param:
    """One parameter tensor of a rank: its shape on the rank, where it runs (a layer index,
    ``EMBEDDING`` or ``OUTPUT``), whether it is an FP8 weight (with fp8_param_gather) and
    whether it is a tied embedding shared across pipeline stages."""

    name: str
    shape: tuple[int, ...]
    position: int
    fp8: bool = False
    shared_embedding: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def row(self) -> int:
        """Elements of one row (``shape[1:].numel()``; 1 for a vector)."""
        return math.prod(self.shape[1:])


@dataclass(frozen=True)
class Bucket:
    """One bucket of FSDP's buffers: its padded size (what its collectives carry), its
    parameters, the FSDP unit (a layer index, or None), and where its parameters run."""

    numel: int
    params: int
    unit: int | None
    positions: tuple[int, ...]
    fp8: bool

    def gather_bytes(self) -> int:
        return self.numel * (FP8 if self.fp8 else BF16)


def problems(setup: TrainingSetup) -> list[str]:
    """What the schedule does not model with FSDP or FP8 gathers (empty when it does)."""
    s, out = setup, []
    if s.fsdp != "none":
        if s.model.is_moe or s.model.is_mla:
            out.append("the megatron schedule does not model FSDP with MoE or multi-latent attention layers")
        if s.virtual_pipeline > 1:
            out.append("the megatron schedule does not model FSDP with an interleaved pipeline")
    if s.fp8_param_gather:
        if s.model.is_moe or s.model.is_mla:
            out.append("the megatron schedule does not model fp8_param_gather with MoE or multi-latent attention layers")
        if s.fsdp == "none" and s.overlap_grad_reduce:
            out.append("the megatron schedule does not model fp8_param_gather with the distributed optimizer's "
                       "buckets (overlap_grad_reduce)")
    return out


# -- the parameters, with shapes -----------------------------------------------------------


def _norm(s: TrainingSetup, name: str, position: int) -> list[Param]:
    h = s.model.hidden_size
    out = [Param(f"{name}.weight", (h,), position)]
    return out + [Param(f"{name}.bias", (h,), position)] if s.model.normalization == "layernorm" else out


def _linear(name: str, rows: int, cols: int, position: int, bias: int | None, fp8: bool) -> list[Param]:
    out = [Param(f"{name}.weight", (rows, cols), position, fp8=fp8)]
    return out + [Param(f"{name}.bias", (bias,), position)] if bias is not None else out


def layer_params(s: TrainingSetup, layer: int) -> list[Param]:
    """A dense transformer layer's parameters on one TP rank, in registration order (input
    norm, linear_proj, linear_qkv, pre-MLP norm, linear_fc1, linear_fc2; the norms are fused
    into TransformerEngine's linear_qkv and linear_fc1 with the same shapes)."""
    m, t, fp8 = s.model, s.tp, s.fp8_param_gather
    h, kv = m.hidden_size, m.kv_groups * m.head_dim
    fc1 = m.ffn_hidden_size * (2 if m.swiglu else 1)
    bias = m.add_bias_linear
    return (_norm(s, "input_layernorm", layer)
            + _linear("self_attention.linear_proj", h, h // t, layer, h if bias else None, fp8)
            + _linear("self_attention.linear_qkv", (h + 2 * kv) // t, h, layer,
                      (h + 2 * kv) // t if bias or m.add_qkv_bias else None, fp8)
            + _norm(s, "pre_mlp_layernorm", layer)
            + _linear("mlp.linear_fc1", fc1 // t, h, layer, fc1 // t if bias else None, fp8)
            + _linear("mlp.linear_fc2", h, m.ffn_hidden_size // t, layer, h if bias else None, fp8))


def unit_parameters(s: TrainingSetup) -> int:
    """One FSDP unit's parameters on a rank (a transformer layer's, on one TP rank), for the
    memory model (``setup.memory.estimate``'s ``fsdp_unit``)."""
    return sum(p.numel for p in layer_params(s, 0))


def stage_params(s: TrainingSetup, stage: int) -> list[Param]:
    """Stage ``stage``'s parameters on one TP rank, in registration order (embedding, layers,
    final norm, output layer), as ``megatron_buckets.chunk_tensors`` lists them."""
    from .megatron_pipeline import stage_layers

    m, p = s.model, s.pp
    tied = m.tie_embeddings and p > 1
    word = (s.padded_vocab // s.tp, m.hidden_size)
    out: list[Param] = []
    if stage == 0:
        out.append(Param("embedding.word_embeddings.weight", word, EMBEDDING, shared_embedding=tied))
        if m.position_embedding == "learned":
            out.append(Param("embedding.position_embeddings.weight", (m.max_position_embeddings, m.hidden_size),
                             EMBEDDING))
    for layer in stage_layers(s, stage):
        out += layer_params(s, layer)
    if stage == p - 1:
        out += _norm(s, "decoder.final_layernorm", OUTPUT)
        if not m.tie_embeddings or p > 1:
            out.append(Param("output_layer.weight", word, OUTPUT, shared_embedding=tied))
    return out


# -- megatron-fsdp's buckets -------------------------------------------------------------------


def chunk_factor(params: Sequence[Param]) -> tuple[int, list[Param]]:
    """A bucket's chunk-size factor and its parameters in packing order: a transcription of
    ``_get_parameter_groups``' step 3 (parameters sorted by row size, largest first; the
    factor grows to the least common multiple of rows it cannot hold)."""
    ordered = sorted(params, key=lambda q: q.row, reverse=True)
    factor = ordered[0].row
    for q in ordered:
        if not (q.row == factor or (factor % q.row == 0 and q.numel % factor == 0) or q.numel < factor):
            factor = math.lcm(factor, q.row)
    return factor, ordered


def packed_size(numels: Sequence[int], factor: int) -> int:
    """The elements a bucket's parameters take before its end is padded: a transcription of
    ``build_data_parallel_buffer_index``, which starts each parameter on a row of ``factor``
    elements and fills the gaps with other parameters' remainders and small parameters."""
    fragments = [n for n in numels if n < factor]
    regular = [n for n in numels if n >= factor]
    data = 0
    while regular:
        n = regular.pop(0)
        if n % factor == 0:
            data += n
            continue
        data += (n // factor + 1) * factor
        remain = n % factor
        space = factor - remain
        partner = next((r for r in regular if r % factor and remain + r % factor <= factor), None)
        if partner is not None:
            regular.remove(partner)
            space -= partner % factor
            data += partner // factor * factor
        for f in list(fragments):
            if f <= space:
                space -= f
                fragments.remove(f)
    return data + sum(fragments)


def _bucket(params: list[Param], unit: int | None, s: TrainingSetup) -> Bucket:
    factor, ordered = chunk_factor(params)
    data = packed_size([q.numel for q in ordered], factor)
    if s.fsdp != "no_shard":
        divisor = s.dp_cp * factor
        data = -(-data // divisor) * divisor
    return Bucket(data, sum(q.numel for q in params), unit, tuple(dict.fromkeys(q.position for q in params)),
                  params[0].fp8)


def suggested_bucket_size(s: TrainingSetup) -> int | None:
    """Megatron-LM's ``get_model``: ``--ddp-bucket-size``, or max(40M, 1M x DP x CP) parameters
    with ``--overlap-grad-reduce``; no limit without it (MegatronFSDP turns overlap on for the
    sharded-gradient strategies later, but the size is already set)."""
    if not s.overlap_grad_reduce:
        return None
    return s.ddp_bucket_size if s.ddp_bucket_size is not None else max(40_000_000, 1_000_000 * s.dp_cp)


def stage_buckets(s: TrainingSetup, stage: int) -> list[Bucket]:
    """megatron-fsdp's buckets of stage ``stage``, in bucket order (``_get_parameter_groups``
    steps 1 and 2: groups by dtype and FSDP unit in registration order, a group outside any
    unit cut at the suggested size, a shared embedding alone)."""
    units = s.fsdp == "optim_grads_params"
    groups: dict[tuple[bool, int | None], list[Param]] = {}
    for q in stage_params(s, stage):
        unit = q.position if units and q.position not in (EMBEDDING, OUTPUT) else None
        groups.setdefault((q.fp8, unit), []).append(q)
    size = suggested_bucket_size(s)
    out: list[Bucket] = []
    for (_, unit), params in groups.items():
        current: list[Param] = []
        for q in params:
            if q.shared_embedding and s.fsdp != "no_shard":
                if current:
                    out.append(_bucket(current, unit, s))
                out.append(_bucket([q], unit, s))
                current = []
                continue
            current.append(q)
            if unit is None and size and sum(x.numel for x in current) >= size:
                out.append(_bucket(current, unit, s))
                current = []
        if current:
            out.append(_bucket(current, unit, s))
    return out


# -- torch FSDP2's units -----------------------------------------------------------------------


def torch_units(s: TrainingSetup) -> list[Bucket]:
    """torch FSDP2's units of the (only) stage, in forward order: the root (the final norm,
    gathered first), the embedding, each layer, the output layer; sizes as ``fully_shard``
    pads them (each parameter's first dimension to a multiple of DP x CP)."""
    d = s.dp_cp
    by_unit: dict[str, list[Param]] = {}
    for q in stage_params(s, 0):
        key = ("root" if q.name.startswith("decoder.final_layernorm") else
               "output" if q.position == OUTPUT else "embedding" if q.position == EMBEDDING else q.position)
        by_unit.setdefault(key, []).append(q)
    order = ["root", "embedding", *[k for k in by_unit if isinstance(k, int)], "output"]
    out = []
    for key in order:
        params = by_unit[key]
        numel = sum(-(-q.shape[0] // d) * d * q.row for q in params)
        # The root is gathered as the model's forward starts and reduced as its backward ends:
        # placed with the embedding, the first part.
        position = OUTPUT if key == "output" else EMBEDDING if key in ("root", "embedding") else key
        out.append(Bucket(numel, sum(q.numel for q in params), key if isinstance(key, int) else None,
                          (position,), False))
    return out


# -- rows ----------------------------------------------------------------------------------------


def _grad_bytes(s: TrainingSetup) -> int:
    if s.fsdp == "torch_fsdp2":
        return BF16
    return FP32 if s.grad_reduce_in_fp32 else BF16


def _label(b: Bucket, i: int) -> str:
    """A bucket's name in its rows: its layer (and ``_fp8`` for its FP8 weights), or its index."""
    return (f"layer{b.unit}" + ("_fp8" if b.fp8 else "")) if b.unit is not None else f"bucket{i}"


def iteration_rows(build: Build, stage: int) -> Rows:
    """FSDP's once-per-iteration rows (after the backward pass; SimAI runs them backwards):
    no_shard's gradient all-reduces and optim's reduce-scatters (the last micro-batch's), and
    optim's and optim_grads' parameter all-gathers, one row per bucket; the optimizer's compute
    on the row SimAI runs first."""
    s, out = build.setup, Rows()
    buckets = stage_buckets(s, stage) if s.fsdp in FSDP_STRATEGIES and s.dp_cp > 1 else []
    gathers = buckets if s.fsdp in ("optim", "optim_grads") else []
    for i in reversed(range(len(gathers))):
        b = gathers[i]
        out.blocks.append(Block(f"dp_fsdp_param_allgather_{_label(b, i)}", "fsdp.bucket.param_allgather",
                                wg=Comm("allgather", "DP", b.gather_bytes()),
                                **(build.timed("optimizer") if i == 0 else {})))
    if not gathers:
        out.blocks.append(Block("optimizer", "optimizer.step", **build.timed("optimizer")))
    op = {"no_shard": "allreduce", "optim": "reducescatter"}.get(s.fsdp)
    for i, b in enumerate(buckets if op else []):
        out.blocks.append(Block(f"dp_fsdp_grad_{op}_{_label(b, i)}", f"fsdp.bucket.grad_{op}",
                                wg=Comm(op, "DP", _grad_bytes(s) * b.numel)))
    return out


def _first(segment: Rows) -> str:
    return segment.blocks[0].name


def micro_batch_rows(build: Build, stage: int, mb: int, segments: Sequence[tuple[int, Rows]]) -> Rows:
    """One micro-batch's rows with FSDP's per-micro-batch collectives around the parts that
    need them. ``segments`` are the micro-batch's parts in forward order, each with its
    position (``EMBEDDING``, a layer index, ``OUTPUT``). Per bucket (megatron-fsdp) or unit
    (torch FSDP2): its reduce-scatter is a row just before the rows of the earliest part it
    holds (its gradients are complete once that part's backward ends); with sharded parameters
    its forward all-gather is unexpressed, anchored to the first row of the first part it
    holds (megatron-fsdp's buckets outside the layers: in the first micro-batch only), and a
    layer's (or FSDP2 unit's) backward all-gather to the last row of its part."""
    s = build.setup
    if s.fsdp in ("none", "no_shard", "optim") or s.dp_cp == 1:
        out = Rows()
        for _, rows in segments:
            out += rows
        return out
    buckets = torch_units(s) if s.fsdp == "torch_fsdp2" else stage_buckets(s, stage)
    sharded = s.fsdp in ("optim_grads_params", "torch_fsdp2")
    present = [pos for pos, _ in segments]
    before: dict[int, list[Block]] = {pos: [] for pos in present}
    notes: list[Unexpressed] = []
    rows_of = dict(segments)
    for i, b in enumerate(buckets):
        held = [pos for pos in present if pos in b.positions]
        if not held:
            continue
        first, last = rows_of[held[0]], rows_of[held[-1]]
        label, layer = _label(b, i), b.unit
        before[held[0]].append(Block(f"fsdp_grad_reducescatter_{label}", "fsdp.unit.grad_reducescatter", layer=layer,
                                     micro_batch=mb, wg=Comm("reducescatter", "DP", _grad_bytes(s) * b.numel)))
        if not sharded:
            continue
        gather = Comm("allgather", "DP", b.gather_bytes())
        if b.unit is None and s.fsdp != "torch_fsdp2" and mb > 0:
            continue  # megatron-fsdp keeps a bucket outside the units gathered until the iteration ends
        notes.append(Unexpressed("fsdp.unit.param_allgather", "fwd", gather, NOTE, layer=layer, micro_batch=mb,
                                 anchor=_first(first)))
        if b.unit is not None or s.fsdp == "torch_fsdp2":
            # Before the backward of the unit's last part (a layer: its last row); FSDP2's root,
            # resharded after forward too, as the backward pass starts (the micro-batch's last row).
            root = s.fsdp == "torch_fsdp2" and i == 0
            row = segments[-1][1].blocks[-1] if root else last.blocks[-1] if b.unit is not None else last.blocks[0]
            notes.append(Unexpressed("fsdp.unit.param_allgather", "ig", gather, NOTE, layer=layer, micro_batch=mb,
                                     anchor=row.name))
    out = Rows()
    for pos, rows in segments:
        # SimAI runs the backward pass from the last row up: the reduce-scatters written before
        # the part's rows run after them, the last written first: in bucket order (FSDP2's
        # root's, then the embedding's, in its final callback).
        out.blocks += before[pos][::-1]
        out += rows
    out.unexpressed += notes
    return out


# -- a sweep's simulation: the per-layer gathers in a workload's rows ----------------------


@dataclass(frozen=True)
class Gathers:
    """What pricing a stage's per-layer parameter all-gathers needs: the FSDP (``megatron``:
    megatron-fsdp's optim_grads_params; ``torch``: torch FSDP2) and the bytes of one
    transformer layer's gathers, one per bucket of the unit (with FP8 parameters its FP8
    bucket and its bf16 one; every layer of a stage is the same unit). Its ``text`` is
    ``simulate``'s ``--fsdp-gathers``, made at planning from a setup (``gathers``) and read
    back by ``parse``."""

    kind: str
    layer_bytes: tuple[int, ...]

    def text(self) -> str:
        return f"{self.kind}:layer_bytes={'+'.join(map(str, self.layer_bytes))}"

    @classmethod
    def parse(cls, text: str) -> Gathers:
        """``text`` as ``Gathers.text`` writes it; a ValueError saying what is wrong."""
        kind, _, rest = text.partition(":")
        name, _, value = rest.partition("=")
        sizes = value.split("+")
        if kind not in ("megatron", "torch") or name != "layer_bytes" or not all(x.isdigit() and int(x) > 0
                                                                                for x in sizes):
            raise ValueError(f"expected megatron:layer_bytes=N[+N] or torch:layer_bytes=N[+N], got {text!r}")
        return cls(kind, tuple(map(int, sizes)))


def gathers(s: TrainingSetup, stage: int) -> Gathers | None:
    """The per-layer gathers of stage ``stage`` (None unless parameters are sharded over more
    than one rank: optim_grads_params or torch FSDP2 with DP x CP above 1)."""
    if s.fsdp not in ("optim_grads_params", "torch_fsdp2") or s.dp_cp == 1:
        return None
    units = torch_units(s) if s.fsdp == "torch_fsdp2" else stage_buckets(s, stage)
    per_layer: dict[int, tuple[int, ...]] = {}
    for b in units:
        if b.unit is not None and 0 <= b.unit < OUTPUT:
            per_layer[b.unit] = per_layer.get(b.unit, ()) + (b.gather_bytes(),)
    if not per_layer:
        return None
    assert len(set(per_layer.values())) == 1, per_layer  # the stage's layers are one unit each, alike
    return Gathers("torch" if s.fsdp == "torch_fsdp2" else "megatron", next(iter(per_layer.values())))


@dataclass(frozen=True)
class RowGather:
    """One layer's all-gather as a simulation adds it: the row whose compute carries its
    exposed part (the layer's first row forward, its last row for the backward's gather),
    the phase, the bytes, its time and exposed part in whole ns."""

    row: int
    name: str
    phase: str
    bytes: int
    time_ns: int
    exposed_ns: int


def layer_runs(workload: Workload) -> list[tuple[int, list[int]]]:
    """The workload's transformer layers in row order, each occurrence (one layer, one
    micro-batch) as (layer, its rows' indices): consecutive rows of one layer, a new one
    where a row of no layer comes between or a row's name comes again (the next micro-batch)."""
    from .row_names import layer_of

    runs: list[tuple[int, list[int]]] = []
    names: set[str] = set()
    for index, row in enumerate(workload.rows):
        layer = layer_of(row.name)
        if layer is None:
            continue
        last = runs[-1] if runs else None
        if last is not None and last[0] == layer and last[1][-1] == index - 1 and row.name not in names:
            last[1].append(index)
        else:
            runs.append((layer, [index]))
            names = set()
        names.add(row.name)
    return runs


def in_rows(workload: Workload, g: Gathers, gather_ns: tuple[int, ...]) -> tuple[Workload, list[RowGather]]:
    """``workload`` (a Megatron workload commsweep wrote for a setup whose gathers are ``g``)
    with what its per-layer all-gathers expose added to the rows they are issued before, as
    megatron-fsdp prefetches them (NVIDIA/Megatron-LM core_v0.16.1,
    ``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py``:
    ``_pre_forward_param_unshard`` and ``_pre_backward_param_unshard`` call
    ``AllGatherPipeline.all_gather_params`` of ``param_and_grad_buffer.py`` with ``prefetch``,
    which issues the next unit's gather, in forward or backward order, with the unit's own);
    torch FSDP2 issues the next layer's gather as its forward starts and prefetches the next
    backward unit (``fully_shard``'s default implicit forward and backward prefetching).
    ``gather_ns``: each of a layer's all-gathers (``g.layer_bytes``) over DP x CP as the
    simulation times it; a layer waits for them all, one after the other on the stream.

    Each pass of a micro-batch waits whole for its first layer's gather (forward: the first
    layer's, before its first row; backward: the last layer's, before its last row, which
    SimAI's backward runs first); every other layer's hides behind the compute of the layer
    before it in that pass (forward: its forward compute; backward: its input- and
    weight-gradient compute), and shows only where it is longer. A phase's gathers are
    given one exposed time in the table (their mean, whole ns), as a collective's time is one
    number per point there; the rows' compute takes the true exposed times, less the
    rounding the mean drops (taken from the first), so both add up to the same."""
    rows = list(workload.rows)
    found: list[RowGather] = []
    added: dict[tuple[int, str], int] = {}
    runs = layer_runs(workload)
    for i, (layer, members) in enumerate(runs):
        fwd_before = runs[i - 1] if i and runs[i - 1][0] == layer - 1 else None
        fwd_hidden = sum(rows[j].fwd_compute for j in fwd_before[1]) if fwd_before else 0
        after = runs[i + 1] if i + 1 < len(runs) and runs[i + 1][0] == layer + 1 else None
        bwd_hidden = sum(rows[j].ig_compute + rows[j].wg_compute for j in after[1]) if after else 0
        for phase, anchor, hidden, first in (("fwd", members[0], fwd_hidden, fwd_before is None),
                                             ("ig", members[-1], bwd_hidden, after is None)):
            exposed = sum(gather_ns) if first else max(0, sum(gather_ns) - hidden)
            added[(anchor, phase)] = added.get((anchor, phase), 0) + exposed
            # What shows is the end of the last gathers: taken from the last bucket back.
            for nbytes, ns in reversed(list(zip(g.layer_bytes, gather_ns))):
                share = min(exposed, ns)
                exposed -= share
                found.append(RowGather(anchor, rows[anchor].name, phase, nbytes, ns, share))
    found = _uniform(found, added)
    for (anchor, phase), ns in added.items():
        field = f"{phase}_compute"
        rows[anchor] = replace(rows[anchor], **{field: getattr(rows[anchor], field) + ns})
    return replace(workload, rows=tuple(rows)), found


def _uniform(found: list[RowGather], added: dict[tuple[int, str], int]) -> list[RowGather]:
    """The gathers with one exposed time per phase and size (their mean); the rounding
    dropped is taken off the compute of the first such gather's row (``added``, in place)."""
    out = list(found)
    keys: dict[tuple[str, int], list[int]] = {}
    for k, r in enumerate(found):
        keys.setdefault((r.phase, r.bytes), []).append(k)
    for (phase, _), mine in keys.items():
        total = sum(found[k].exposed_ns for k in mine)
        mean = total // len(mine)
        first = found[mine[0]]
        added[(first.row, phase)] -= total - mean * len(mine)
        for k in mine:
            out[k] = replace(found[k], exposed_ns=mean)
    return out
