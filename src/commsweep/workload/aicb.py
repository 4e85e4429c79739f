"""AICB's two workload generators, emulated byte for byte: its default path and its AIOB path.

Reference: aliyun/aicb at 23eec3c48ca2d2d93dd888a4c7b22ab4421e782f:
``workload_generator/SimAI_training_workload_generator.py`` (``workload_generate`` and
``workload_generate_aiob``), the mocked model it walks
(``workload_generator/mocked_model/training/MockedMegatron.py``) and its argument checks
and AIOB-file aggregation (``utils/utils.py``: ``get_params``, ``extract_averages``).

AICB does not describe what Megatron communicates; it writes what its own rules say, quirks
included, and that is what this module reproduces, because the point of the aicb schedule
is to measure those quirks against the Megatron schedule. The quirks kept on purpose:

* the parameter count P walks AICB's mocked modules: a word embedding 4x too large, a
  position embedding of ``seq_length`` rows, ``qkv`` always 3h wide (no GQA), fc1 h x f
  (no swiglu doubling), and with SP the output layer and one fused layernorm per layer;
* the header's ``vpp`` holds the layers per stage, ``pp_comm`` is a Python float with SP;
* the default path writes TP collectives even with TP = 1 and ``embedding_norm`` once per
  micro-batch; the AIOB path drops backward all-reduces without SP and writes the SP
  backward reduce-scatter of column layers with size 0;
* compute times in the AIOB path come from AICB's lookup table, including its stale
  variables (``embedding_layer``'s weight-gradient time is whatever the previous layer set)
  and ``int(x / 2)`` halving.

Everything is pure Python over the setup; nothing of AICB is imported or needed. This module
is AICB's Megatron frame and the generator's two paths; its DeepSeek frame (multi-latent
attention) walks other modules through the same paths (``aicb_deepseek``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aiob import profile_file
from ..aiob.profile_file import AiobProfile
from ..base.errors import ConfigError
from ..setup.training import TrainingSetup
from . import format as wformat
from .row_names import AICB_GRAD_NORM, AICB_LAYERNORM, AICB_MOE_LAYER

# AICB's ``Work_Item`` defaults: placeholder -1 (SimAI's dependency) and process_time 100.
_PLACEHOLDER = -1
_PROCESS_TIME = 100

# Keys ``extract_averages`` always puts in its table (DeepSeek MLA per-layer times), 0 unless
# the AIOB file has a section of that name.
PER_LAYER_KEYS = profile_file.MLA_SECTIONS


@dataclass(frozen=True)
class Module:
    """One entry of AICB's ``get_model_details``: a mocked module's name and parameter count."""

    name: str
    params: int


# -- what AICB accepts -----------------------------------------------------------------


def problems(
    setup: TrainingSetup,
    *,
    num_experts: int | None = None,
    dtype: str = "bfloat16",
    moe_grouped_gemm: bool = False,
    moe_enable: bool | None = None,
    divides: bool = True,
    aiob: bool = False,
) -> list[str]:
    """Why AICB would refuse this setup (empty when it runs), in AICB's order of checks.

    These are AICB's own asserts (``get_params`` and the ``divide`` calls of its mocked
    layers), not Megatron's rules: AICB floors ``global_batch / (micro_batch * dp)`` and
    ``num_layers / pp``, ignores whether TP divides the heads or the sequence, and so on.
    Values below 1 are refused too; AICB would divide by zero or write nonsense.

    ``num_experts`` is AICB's ``--num_experts`` when it differs from the model's (AICB
    checks it against EP even for a dense model; its default is 1). ``dtype`` and
    ``moe_grouped_gemm`` are AICB's ``--dtype`` and ``--moe_grouped_gemm``, which only
    matter for two of its asserts. ``moe_enable`` is AICB's ``--moe_enable`` (default: whether
    the model is MoE, as ``to_aicb_argv`` passes it). ``divides=False`` stops after
    ``get_params``'s asserts, before the Megatron frame's layers (another frame checks its own).
    ``aiob`` (AICB's AIOB path) changes nothing in this frame; it is taken for the DeepSeek
    frame's sake (``aicb_deepseek.problems``).
    """
    out = _below_one(setup)
    if out:
        return out
    t, p = setup.tp, setup.pp
    if setup.world_size % (t * p):
        return [f"world_size={setup.world_size} is not divisible by tp*pp={t * p} (AICB asserts it)"]
    out = _option_problems(setup, num_experts, dtype, moe_grouped_gemm, moe_enable)
    if out or not divides:
        return out
    return _divide_problems(setup)


def _below_one(setup: TrainingSetup) -> list[str]:
    """The sizes below 1, which AICB would divide by or write as nonsense."""
    m = setup.model
    positive = {
        "world_size": setup.world_size, "tensor_model_parallel_size": setup.tp,
        "pipeline_model_parallel": setup.pp, "expert_model_parallel_size": setup.ep,
        "micro_batch": setup.micro_batch, "global_batch": setup.global_batch,
        "seq_length": setup.seq_length, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "num_attention_heads": m.num_attention_heads, "ffn_hidden_size": _ffn(m),
        "vocab_size": m.vocab_size, "make_vocab_size_divisible_by": setup.make_vocab_size_divisible_by,
    }
    if m.is_moe:
        positive.update(num_experts=m.num_experts, moe_router_topk=m.moe_topk)
    return [f"{name} must be at least 1 (got {value})" for name, value in positive.items()
            if value is None or value < 1]


def _option_problems(setup: TrainingSetup, num_experts: int | None, dtype: str, moe_grouped_gemm: bool,
                     moe_enable: bool | None) -> list[str]:
    """``get_params``'s asserts on MoE, expert parallelism and the data type."""
    m = setup.model
    out: list[str] = []
    if (m.is_moe if moe_enable is None else moe_enable) and not setup.sp:
        out.append("AICB refuses MoE without sequence parallelism: --moe_enable needs "
                   "--enable_sequence_parallel (moe must be enabled with sequence parallel)")
    experts = num_experts if num_experts is not None else (m.num_experts if m.is_moe else 1)
    if setup.ep > 1:
        if experts % setup.ep:
            out.append(
                f"AICB asserts the number of experts ({experts}) is a multiple of "
                f"expert_model_parallel_size={setup.ep}"
            )
        if dtype == "float16":
            out.append("AICB refuses expert parallelism with --dtype=float16")
    if moe_grouped_gemm and dtype != "bfloat16":
        out.append(f"AICB's --moe_grouped_gemm needs --dtype=bfloat16 (got {dtype})")
    return out


def _divide_problems(setup: TrainingSetup) -> list[str]:
    """The mocked layers' divide() asserts, in construction order (the first that fails); with
    no layer on a stage (pp > num_layers) AICB builds none and checks nothing."""
    if layers_per_stage(setup) <= 0:
        return []
    m, t = setup.model, setup.tp
    q = _query_width(setup)
    if (3 * q) % t:
        return [f"AICB's qkv layer needs tp={t} to divide 3*{q} (3 x heads x (hidden // heads))"]
    if q % t:
        return [f"AICB's attention output layer needs tp={t} to divide {q} (heads x (hidden // heads))"]
    if m.is_moe:
        width = _ffn(m) * (m.num_experts // setup.ep)
        if width % t:
            return [f"AICB's MoE layer needs tp={t} to divide ffn_hidden_size x local experts = {width}"]
        return []
    if _ffn(m) % t:
        return [f"AICB's MLP needs tp={t} to divide ffn_hidden_size={_ffn(m)}"]
    return []


def _ffn(m) -> int:
    """AICB's ``--ffn_hidden_size`` for this model (``arguments.to_aicb_argv``): for an MoE
    model its experts' width, the only FFN AICB's MoE layers have."""
    return m.expert_ffn_hidden_size if m.is_moe else m.ffn_hidden_size


def unsupported(setup: TrainingSetup, *, aiob: bool = False) -> list[str]:
    """Configurations AICB itself refuses, with its reason (the sweep's schedule check),
    and Megatron options AICB has no argument for. ``aiob``: on AICB's AIOB path (the
    Megatron frame's checks do not depend on it; the DeepSeek frame's do)."""
    out = problems(setup)
    out += megatron_only(setup)
    return out


def megatron_only(setup: TrainingSetup) -> list[str]:
    """Megatron options no AICB frame has an argument for."""
    out = []
    if setup.recompute_mode == "full":
        out.append("AICB has no full recomputation (only --recompute_activations); use the megatron schedule")
    if setup.virtual_pipeline > 1:
        out.append("AICB has no interleaved pipeline schedule; use the megatron schedule")
    if setup.stage_layout is not None:
        out.append("AICB has no uneven pipeline stages (it splits the layers evenly); use the megatron schedule")
    return out


# -- AICB's mocked model ---------------------------------------------------------------


def layers_per_stage(setup: TrainingSetup) -> int:
    """AICB's ``num_layers`` after ``get_params`` floors it by pp (also the header's vpp)."""
    return setup.model.num_layers // setup.pp if setup.pp > 1 else setup.model.num_layers


def _query_width(setup: TrainingSetup) -> int:
    """MegatronAttention's projection width: heads x (hidden // heads), whatever the GQA."""
    m = setup.model
    return (m.hidden_size // m.num_attention_heads) * m.num_attention_heads


def modules(setup: TrainingSetup) -> list[Module]:
    """``SIMAI_workload.get_model_details``: the mocked modules AICB counts, in its walk order.

    With SP the walk lists the linear layers one by one (and a fused layernorm per layer
    and the output layer, ``final_column``); without SP it lists whole attention and MLP
    blocks and skips the output layer.
    """
    m = setup.model
    t, h, s = setup.tp, m.hidden_size, setup.seq_length
    bias = m.add_bias_linear
    q = _query_width(setup)
    vocab_part = setup.padded_vocab // t
    # MegatronEmbedding: word embedding (4 * V'/t, h) and position embedding (s, h).
    embedding = Module("embedding_layer", 4 * vocab_part * h + s * h)
    qkv = h * (3 * q // t) + (3 * q // t if bias else 0)
    proj = h * (q // t) + (h if bias else 0)
    fc1 = h * (m.ffn_hidden_size // t) + (m.ffn_hidden_size // t if bias else 0)
    fc2 = (m.ffn_hidden_size // t) * h + (h if bias else 0)
    out = [embedding]
    per_stage = layers_per_stage(setup)
    if setup.sp:
        if m.is_moe:
            assert m.num_experts is not None
            expert_width = _ffn(m) * (m.num_experts // setup.ep) // t
            mlp = [Module(AICB_MOE_LAYER, 2 * h * expert_width)]
        else:
            mlp = [Module("mlp_column", fc1), Module("mlp_row", fc2)]
        layer = [Module("attention_column", qkv), Module("attention_row", proj), Module("fused", 2 * h), *mlp]
        for _ in range(per_stage):
            out.extend(layer)
        out.append(Module("final_column", h * vocab_part + (vocab_part if bias else 0)))
    else:
        for _ in range(per_stage):
            out += [Module("attention_layer", qkv + proj), Module("mlp_layer", fc1 + fc2)]
    return out


def parameter_counts(setup: TrainingSetup, mods: list[Module] | None = None) -> tuple[int, int]:
    """(P, P_moe): AICB's ``_get_total_params`` over ``mods`` (default: the Megatron frame's
    modules); P_moe sums the modules named ``*moe*``."""
    mods = modules(setup) if mods is None else mods
    return sum(x.params for x in mods), sum(x.params for x in mods if "moe" in x.name)


# -- the AIOB compute-time table -------------------------------------------------------


def compute_cache(profile: AiobProfile, *, recompute: bool = False) -> dict[str, int]:
    """The dict ``extract_averages`` returns for an AIOB file, keys in AICB's order.

    Aggregated attention/MLP/gradient times, then every other section's average (a section
    may overwrite an aggregate of the same name, as in AICB), then the per-layer keys.
    """
    times = profile_file.aicb_compute_times(profile, recompute=recompute)
    cache = {
        "attention_forward": times.attention,
        "attention_backward": times.attention,
        "mlp_forward": times.mlp,
        "mlp_backward": times.mlp,
        "grad_forward": times.grad_forward,
        "grad_backward": times.grad_backward,
    }
    cache.update(times.other)
    per_layer = dict.fromkeys(PER_LAYER_KEYS, 0)
    for name, op in profile.sections:
        if name in per_layer:
            per_layer[name] = round(float(op.avg) * 1000)
    cache.update(per_layer)
    return cache


def lookup(cache: dict[str, int], phase: str, stage: str) -> int:
    """``_get_aiob_compute_time``: a stage's time, or 1 when the table has none.

    An exact key wins; otherwise ``grad`` maps to ``grad_<phase>``, ``embedding`` to
    ``Emb``, ``final`` to the attention time, anything else to ``<stage>_<phase>``.
    """
    if stage in cache:
        return cache[stage]
    if stage == "grad":
        key = f"grad_{phase}"
    elif stage == "embedding":
        key = "Emb"
    elif stage == "final":
        key = f"attention_{phase}"
    else:
        key = f"{stage}_{phase}"
    return cache.get(key, 1)


# -- writing ---------------------------------------------------------------------------


def _row(name: str, fwd=(1, "NONE", 0), ig=(1, "NONE", 0), wg=(1, "NONE", 0)) -> wformat.Row:
    return wformat.Row(name, _PLACEHOLDER, *fwd, *ig, *wg, _PROCESS_TIME)


def _header(setup: TrainingSetup, ga: int) -> wformat.Header:
    """AICB's ``dump_file`` header: pp_comm 2bsh (a float divided by t with SP) when pp > 1."""
    value: int | float = 2 * setup.micro_batch * setup.seq_length * setup.model.hidden_size
    if setup.sp:
        value /= setup.tp
    pp_comm = f"{value}" if setup.pp != 1 else "0"
    vpp = layers_per_stage(setup)
    text = (
        f"{wformat.MODE} model_parallel_NPU_group: {setup.tp} ep: {setup.ep} pp: {setup.pp} vpp: {vpp} "
        f"ga: {ga} all_gpus: {setup.world_size} checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_comm}"
    )
    return wformat.Header(
        tp=setup.tp, ep=setup.ep, pp=setup.pp, vpp=vpp, ga=ga, all_gpus=setup.world_size,
        pp_comm=int(value) if setup.pp != 1 else 0, text=text,
    )


def _tail(setup: TrainingSetup) -> list[wformat.Row]:
    """Once per iteration, compute 0: three cross-entropy and four optimizer all-reduces."""
    zero = (0, "NONE", 0)
    ce = 4 * setup.seq_length * setup.micro_batch
    rows = [_row(f"cross_entropy{i}", (0, "ALLREDUCE", ce), zero, zero) for i in (1, 2, 3)]
    rows += [_row(f"optimizer{i}", (0, "ALLREDUCE", 4), zero, zero) for i in (1, 2, 3, 4)]
    return rows


def _moe_grad_rows(moe_params: int) -> list[wformat.Row]:
    return [
        _row("moe_grad_norm1", wg=(1, "ALLGATHER_DP_EP", 2 * moe_params)),
        _row("moe_grad_norm2", wg=(1, "REDUCESCATTER_DP_EP", 4 * moe_params)),
    ]


def _moe_sizes(setup: TrainingSetup, u: int, dispatch_scale: float | None) -> tuple[int, int, int, int]:
    """(EP all-gather, forward dispatch all-to-all, other all-to-alls, TP all-gather/reduce-scatter)
    bytes. ``dispatch_scale`` (the DeepSeek frame's FP8 factor) scales the forward dispatch
    alone, truncated as AICB's ``int(size * factor)``."""
    m = setup.model
    assert m.num_experts is not None
    a2a = u * m.moe_topk // setup.tp
    dispatch = a2a if dispatch_scale is None else int(a2a * dispatch_scale)
    return 2 * setup.ep * m.num_experts * setup.tp, dispatch, a2a, u * m.moe_topk


def default_rows(setup: TrainingSetup, mods: list[Module] | None = None, *,
                 dispatch_scale: float | None = None) -> list[wformat.Row]:
    """``workload_generate``: every compute 1 (0 in the tail), TP collectives whatever t is.

    ``mods``: the frame's modules (default: the Megatron frame's); ``dispatch_scale``: see
    ``_moe_sizes``.
    """
    ga = setup.num_microbatches
    u = setup.activation_bytes
    mods = modules(setup) if mods is None else mods
    total, moe_params = parameter_counts(setup, mods)
    recompute = setup.recompute
    rows = [_row(AICB_GRAD_NORM, (1, "ALLGATHER", 2 * total), wg=(1, "REDUCESCATTER", 4 * total))]
    if not setup.sp:
        rows.append(_row(AICB_LAYERNORM, ig=(1, "ALLREDUCE", 2 * total)))
    if setup.ep != setup.dp:
        rows += _moe_grad_rows(moe_params)
    body: list[wformat.Row] = []
    for mod in mods:
        name = mod.name
        # Recompute doubles the forward size of the attention lines (both layouts).
        fwd_size = 2 * u if recompute and "attention" in name else u
        if setup.sp:
            if "embedding" in name:
                body.append(_row(name, (1, "NONE", u), (1, "NONE", u)))
            if "row" in name:
                body.append(_row(name, (1, "REDUCESCATTER", fwd_size), (1, "NONE", u)))
            if "column" in name:
                body.append(_row(name, (1, "ALLGATHER", fwd_size)))
            if "moelayer" in name:
                gather, dispatch, a2a, tp_size = _moe_sizes(setup, u, dispatch_scale)
                body += [
                    _row(name, (1, "ALLGATHER", gather)),
                    _row(name, (1, "ALLTOALL_EP", dispatch), (1, "ALLTOALL_EP", a2a)),
                    _row(name, (1, "ALLGATHER", tp_size), (1, "REDUCESCATTER", tp_size)),
                    _row(name, (1, "REDUCESCATTER", tp_size), (1, "ALLGATHER", tp_size)),
                    _row(name, (1, "ALLTOALL_EP", a2a), (1, "ALLTOALL_EP", a2a)),
                ]
        else:
            body.append(_row(name, (1, "ALLREDUCE", fwd_size), (1, "ALLREDUCE", u)))
    # The tied-embedding all-reduce sits inside AICB's micro-batch loop: once per micro-batch.
    body.append(_row("embedding_norm", (1, "ALLREDUCE", 2 * setup.model.vocab_size * setup.model.hidden_size)))
    return rows + body * ga + _tail(setup)


def aiob_rows(setup: TrainingSetup, profile: AiobProfile, mods: list[Module] | None = None, *,
              dispatch_scale: float | None = None) -> list[wformat.Row]:
    """``workload_generate_aiob`` followed by AICB's pass that zeroes the size of NONE comms.

    The compute times follow AICB's variables step by step, because two of them leak from
    one line into the next: ``embedding_layer``'s weight-gradient time is the gradient
    time on the first micro-batch and the last layer's backward time on later ones.
    ``mods`` and ``dispatch_scale`` as for ``default_rows``.

    Long because it follows AICB's ``workload_generate_aiob`` branch by branch, in the order
    AICB writes its lines, so that a reader can compare the two side by side; the times
    carried from one module to the next would be hidden state if the loop were split.
    """
    cache = compute_cache(profile, recompute=setup.recompute)
    ga = setup.num_microbatches
    u = setup.activation_bytes
    t, ep, sp, recompute = setup.tp, setup.ep, setup.sp, setup.recompute
    mods = modules(setup) if mods is None else mods
    total, moe_params = parameter_counts(setup, mods)
    dense_params = total - moe_params
    fwd_time = lookup(cache, "forward", "grad")
    bwd_time = lookup(cache, "backward", "grad")
    rows = [
        _row("grad_gather", wg=(1, "ALLGATHER", 2 * dense_params)),
        _row("grad_param_comm", wg=(1, "REDUCESCATTER", 4 * dense_params)),
        _row("grad_param_compute", ig=(fwd_time + bwd_time, "NONE", 0)),
    ]
    if not sp:
        rows.append(_row(AICB_LAYERNORM, ig=(1, "ALLREDUCE", 2 * total)))
    rows.append(_row("embedding_grads", ig=(1, "NONE" if t == 1 else "ALLREDUCE", u)))
    if ep != setup.dp:
        rows += _moe_grad_rows(moe_params)

    def block_times(name: str, exact: int | None) -> tuple[int, int]:
        if exact is not None:
            return exact, exact
        stage = name.split("_")[0]
        return lookup(cache, "forward", stage), lookup(cache, "backward", stage)

    for _ in range(ga):
        for mod in mods:
            name = mod.name
            # A table entry named after the module overrides the block time (1 means none).
            exact = lookup(cache, "", name)
            exact = None if exact == 1 else exact
            if sp:
                if "embedding" in name:
                    comm = "NONE" if t == 1 else "ALLREDUCE"
                    rows.append(_row(name, (lookup(cache, "", "embedding"), comm, u), (1, "NONE", 0), (bwd_time, "NONE", 0)))
                if "attention_linear" in name:
                    # The DeepSeek frame's unsharded MLA down projections: compute only.
                    fwd_time, bwd_time = block_times(name, exact)
                    if recompute:
                        fwd_time *= 2
                    rows.append(_row(name, (fwd_time, "NONE", 0), (bwd_time, "NONE", 0), (bwd_time, "NONE", 0)))
                if "row" in name or "column" in name:
                    fwd_time, bwd_time = block_times(name, exact)
                    if recompute and "attention" in name:
                        fwd_time *= 2
                    fwd_time = int(fwd_time / 2)
                    bwd_time = int(bwd_time / 2)
                    if "row" in name:
                        fwd_comm, bwd_comm, bwd_size = "REDUCESCATTER", "ALLGATHER", u
                    else:
                        fwd_comm, bwd_comm, bwd_size = "ALLGATHER", "REDUCESCATTER", 0
                    if t == 1:
                        fwd_comm = bwd_comm = "NONE"
                    rows.append(_row(name, (fwd_time, fwd_comm, u), (bwd_time, bwd_comm, bwd_size), (bwd_time, "NONE", 0)))
                elif "moelayer" in name:
                    fwd_time, bwd_time = block_times(name, exact)
                    gather_comm, a2a_comm, tp_gather, tp_scatter = "ALLGATHER", "ALLTOALL_EP", "ALLGATHER", "REDUCESCATTER"
                    if ep == 1:
                        a2a_comm = "NONE"
                    if t == 1:
                        if ep == 1:
                            gather_comm = "NONE"
                        tp_gather = tp_scatter = "NONE"
                    gather, dispatch, a2a, tp_size = _moe_sizes(setup, u, dispatch_scale)
                    rows += [
                        _row(name, (fwd_time, gather_comm, gather), (bwd_time, "NONE", 0)),
                        _row(name, (1, a2a_comm, dispatch), (1, a2a_comm, a2a)),
                        _row(name, (1, tp_gather, tp_size), (1, tp_scatter, tp_size)),
                        _row(name, (1, tp_scatter, tp_size), (1, tp_gather, tp_size)),
                        _row(name, (1, a2a_comm, a2a), (1, a2a_comm, a2a)),
                    ]
            else:
                comm = "NONE" if t == 1 else "ALLREDUCE"
                # AICB doubles the forward time of attention here for recompute, but the
                # value is overwritten below before it is written: no effect.
                if "embedding" in name:
                    rows.append(_row(name, (lookup(cache, "", "embedding"), comm, u), (1, "NONE", 0), (bwd_time, "NONE", 0)))
                else:
                    fwd_time, bwd_time = block_times(name, exact)
                    rows.append(_row(name, (fwd_time, comm, u), (bwd_time, "NONE", 0), (bwd_time, "NONE", 0)))
    rows += _tail(setup)
    return [_zero_none_sizes(row) for row in rows]


def _zero_none_sizes(row: wformat.Row) -> wformat.Row:
    """AICB's last pass: a forward or backward comm of NONE gets size 0 (the dp column keeps its)."""
    fwd_size = 0 if row.fwd_comm == "NONE" else row.fwd_size
    ig_size = 0 if row.ig_comm == "NONE" else row.ig_size
    if fwd_size == row.fwd_size and ig_size == row.ig_size:
        return row
    return wformat.Row(
        row.name, row.dependency, row.fwd_compute, row.fwd_comm, fwd_size, row.ig_compute, row.ig_comm,
        ig_size, row.wg_compute, row.wg_comm, row.wg_size, row.update_time,
    )


def generate(setup: TrainingSetup, profile: AiobProfile | None = None, **checks) -> wformat.Workload:
    """The workload AICB writes for ``setup``: its default path, or its AIOB path given a profile.

    ``checks`` are passed to :func:`problems` (AICB's ``--num_experts``, ``--dtype``,
    ``--moe_grouped_gemm``). Raises ConfigError with AICB's reason when AICB would refuse.
    """
    reasons = problems(setup, **checks)
    if reasons:
        raise ConfigError("; ".join(reasons), key="arguments")
    rows = default_rows(setup) if profile is None else aiob_rows(setup, profile)
    return wformat.Workload(header=_header(setup, setup.num_microbatches), rows=tuple(rows))
