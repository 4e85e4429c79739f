"""AICB's DeepSeek frame (``--frame DeepSeek``), emulated byte for byte on both of its paths.

Reference: aliyun/aicb at 23eec3c48ca2d2d93dd888a4c7b22ab4421e782f: the mocked model
``workload_generator/mocked_model/training/MockedDeepSeek.py`` (``DeepSeekV3Model``,
``DeepSeekMLA``, ``DeepSeekMoE``, ``FP8_FACTOR``), the frame's flags and checks in
``utils/utils.py`` (``get_deepseek_params``, ``get_params``), and the generator
``workload_generator/SimAI_training_workload_generator.py``, whose two paths (``workload_generate``
and ``workload_generate_aiob``) are the Megatron frame's (``aicb``), walking other modules.

What AICB does with this frame, kept on purpose because the aicb schedule measures it:

* its default path crashes with SP on (``'NoneType' object has no attribute 'keys'``: the MLA
  down projections look up compute times in a table the default path does not have), and
  ``get_params`` refuses ``--moe_enable`` without SP, so only the AIOB path with SP writes
  expert-parallel traffic; on the AIOB path with SP but without ``--moe_enable`` the first MoE
  layer crashes (the generator sets its EP attributes only with ``--moe_enable``);
* the forward EP dispatch alone is scaled by DeepEP's FP8 factor, (1 + 4/128) / 2 = 33/64;
* the shared experts' MLP is counted twice: inside the MoE layer (so in the DP_EP gradient
  rows) and again as its own ``mlp_column``/``mlp_row`` (or ``mlp_layer``) module (so in the
  dense DP gradient rows); it is one MLP as wide as a routed expert, whatever the number of
  shared experts, and dense layers take that width too (AICB has one ``--ffn_hidden_size``);
* every MLA linear's TP collective is sized on the hidden size (2bsh), as the dense frame's;
  the two down projections are unsharded and write compute only;
* with PP, ``get_params`` floors the layers to ``num_layers // pp`` and the model numbers them
  from 0 on every stage, so every stage starts with ``--n_dense_layers`` dense layers;
* AIOB compute times of the MLA linears are the per-layer keys of AICB's DeepSeek AIOB model
  (``aicb.PER_LAYER_KEYS``), 0 when the file has none of them.

AICB's own scripts (``scripts/megatron_gpt.sh -m deepseek671`` ...) pass the dense FFN width as
``--hidden_size`` and the experts' as ``--ffn_hidden_size``; commsweep passes the model's
hidden size (``arguments.to_aicb_argv``), so the emulation sees what those flags say.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aiob.profile_file import AiobProfile
from ..base.errors import ConfigError
from ..setup.arguments import deepseek_flags
from ..setup.training import TrainingSetup
from . import aicb
from . import format as wformat
from .aicb import Module
from .row_names import AICB_MLA_KV_COLUMN, AICB_MLA_KV_LORA, AICB_MLA_Q_COLUMN, AICB_MLA_Q_LORA, AICB_MOE_LAYER

# DeepEP's bytes per bf16 element in FP8 with one fp32 scale per 128 (MockedDeepSeek.FP8_FACTOR).
FP8_FACTOR = (1 + 4 / 128) / 2


@dataclass(frozen=True)
class Frame:
    """The DeepSeek model as AICB's flags describe it (``arguments.deepseek_flags``)."""

    ffn: int  # --ffn_hidden_size: dense layers, each routed expert and the shared MLP
    experts: int  # --num_experts (AICB's default 1)
    n_dense: int  # --n_dense_layers, counted from 0 on every stage
    shared: bool  # --n_shared_expert above 0
    q_lora: int  # --q_lora_rank (0: no query latent, as AICB's scripts spell it)
    kv_lora: int
    nope: int
    rope: int
    v: int

    @classmethod
    def of(cls, setup: TrainingSetup, num_experts: int | None = None) -> "Frame":
        m = setup.model
        flags = deepseek_flags(m)
        experts = num_experts if num_experts is not None else (m.num_experts or 1)
        return cls(
            ffn=m.expert_ffn_hidden_size, experts=experts, n_dense=flags["n_dense_layers"],
            shared=flags["n_shared_expert"] > 0, q_lora=flags["q_lora_rank"], kv_lora=flags["kv_lora_rank"],
            nope=flags["qk_nope_dim"], rope=flags["qk_rope_dim"], v=flags["v_head_dim"],
        )

    def is_dense(self, layer: int) -> bool:
        """AICB's ``use_dense=(id < n_dense_layers)``, ``id`` the layer's index on its stage."""
        return layer < self.n_dense


def frame_module(setup: TrainingSetup):
    """The module emulating the AICB frame of ``setup``: this one (``--frame DeepSeek``) for a
    model with multi-latent attention, else ``aicb`` (``--frame Megatron``). Both offer
    ``problems``, ``unsupported`` and ``generate``."""
    import sys

    return sys.modules[__name__] if setup.model.is_mla else aicb


# -- what AICB accepts -----------------------------------------------------------------


def problems(
    setup: TrainingSetup,
    *,
    aiob: bool = False,
    moe_enable: bool | None = None,
    num_experts: int | None = None,
    dtype: str = "bfloat16",
    moe_grouped_gemm: bool = False,
) -> list[str]:
    """Why AICB refuses or crashes on this setup under ``--frame DeepSeek`` (empty when it
    writes a file), in AICB's order: ``get_params``'s asserts, the mocked model's
    ``divide`` asserts as it is built, then the generator's crashes on the path taken.

    ``aiob``: the AIOB path (``--aiob_enable``); ``moe_enable``: AICB's ``--moe_enable``
    (default: whether the model is MoE, as ``to_aicb_argv`` passes it); ``num_experts``,
    ``dtype``, ``moe_grouped_gemm`` as for the Megatron frame (``aicb.problems``).
    """
    m = setup.model
    moe_enable = m.is_moe if moe_enable is None else moe_enable
    f = Frame.of(setup, num_experts)
    out = aicb.problems(setup, num_experts=f.experts, dtype=dtype, moe_grouped_gemm=moe_grouped_gemm,
                        moe_enable=moe_enable, divides=False, aiob=aiob)
    if out:
        return out
    t, per_stage = setup.tp, aicb.layers_per_stage(setup)
    if per_stage > 0:
        heads = m.num_attention_heads
        widths = [
            ("query up projection", heads * (f.nope + f.rope),
             "heads x (qk_nope_dim + qk_rope_dim)"),
            ("key/value up projection", heads * (f.nope + f.v), "heads x (qk_nope_dim + v_head_dim)"),
            ("attention output layer", heads * f.v, "heads x v_head_dim"),
        ]
        # Dense layers come first: layer 0's MLP is built (and checked) before any MoE layer's.
        moe = not all(f.is_dense(i) for i in range(per_stage))
        mlp = [("MLP", f.ffn, "ffn_hidden_size")] if f.is_dense(0) else []
        if moe:
            mlp.append(("MoE layer", f.ffn * (f.experts // setup.ep), "ffn_hidden_size x local experts"))
            if f.shared:
                mlp.append(("shared experts' MLP", f.ffn, "ffn_hidden_size"))
        for what, width, spelled in widths + mlp:
            if width % t:
                return [f"AICB's DeepSeek {what} needs tp={t} to divide {spelled} = {width} (its divide() asserts)"]
        # The crashes are in the micro-batch loop: with no micro-batch (a global batch below
        # micro_batch x dp, which AICB floors to 0) it never runs.
        if setup.num_microbatches < 1:
            return out
        if setup.sp and not aiob:
            out.append(
                "AICB's default path crashes on the DeepSeek frame with --enable_sequence_parallel "
                "('NoneType' object has no attribute 'keys': its MLA down projections look up AIOB compute "
                "times); use --aiob_enable, or leave SP off"
            )
        elif setup.sp and moe and not moe_enable:
            out.append(
                "AICB's AIOB path crashes on a DeepSeek MoE layer with --enable_sequence_parallel but without "
                "--moe_enable ('SIMAI_workload' object has no attribute 'expert_model_parallel_size')"
            )
    return out


def unsupported(setup: TrainingSetup, *, aiob: bool = False) -> list[str]:
    """The sweep's schedule check: AICB's refusals and crashes on this path, then the
    Megatron options no AICB frame has."""
    return problems(setup, aiob=aiob) + aicb.megatron_only(setup)


# -- AICB's mocked model ---------------------------------------------------------------


def modules(setup: TrainingSetup, num_experts: int | None = None) -> list[Module]:
    """``get_model_details`` over ``DeepSeekV3Model``: the modules AICB counts, in walk order.

    With SP the walk lists the linear layers one by one: per layer the query down projection,
    its norm (``fused``), the query up projection, the same for keys and values, the output
    layer, the MLP's norm, then a dense MLP's two linears or the MoE layer (shared experts'
    weights included) followed by the shared MLP's two linears again; last the output layer.
    Without SP it lists whole blocks: ``attention_layer_mla``, ``mlp_layer`` or
    ``mlp_moelayer`` (then the shared MLP again as ``mlp_layer``), and no output layer.
    """
    m, f = setup.model, Frame.of(setup, num_experts)
    t, h, s = setup.tp, m.hidden_size, setup.seq_length
    heads = m.num_attention_heads

    def bias(n: int) -> int:
        return n if m.add_bias_linear else 0

    vocab_part = setup.padded_vocab // t
    q_up, kv_up, o_in = heads * (f.nope + f.rope) // t, heads * (f.nope + f.v) // t, heads * f.v // t
    attention = [
        Module(AICB_MLA_Q_LORA, h * f.q_lora + bias(f.q_lora)),
        Module("fused", 2 * f.q_lora),
        Module(AICB_MLA_Q_COLUMN, f.q_lora * q_up + bias(q_up)),
        Module(AICB_MLA_KV_LORA, h * (f.kv_lora + f.rope) + bias(f.kv_lora + f.rope)),
        Module("fused", 2 * f.kv_lora),
        Module(AICB_MLA_KV_COLUMN, f.kv_lora * kv_up + bias(kv_up)),
        Module("attention_o_row", h * o_in + bias(h)),
    ]
    part = f.ffn // t
    mlp = [Module("mlp_column", h * part + bias(part)), Module("mlp_row", part * h + bias(h))]
    experts = 3 * h * (f.ffn * (f.experts // setup.ep) // t)
    shared = mlp if f.shared else []
    moe = Module(AICB_MOE_LAYER, experts + sum(x.params for x in shared))
    out = [Module("embedding_layer", 4 * vocab_part * h + s * h)]
    for layer in range(aicb.layers_per_stage(setup)):
        if setup.sp:
            out += [*attention, Module("fused", 2 * h), *(mlp if f.is_dense(layer) else [moe, *shared])]
        else:
            out.append(Module("attention_layer_mla", sum(x.params for x in attention)))
            block = [Module("mlp_layer", sum(x.params for x in mlp))]
            out += block if f.is_dense(layer) else [moe, *(block if f.shared else [])]
    if setup.sp:
        out.append(Module("final_column", h * vocab_part + bias(vocab_part)))
    return out


def parameter_counts(setup: TrainingSetup) -> tuple[int, int]:
    """(P, P_moe): AICB's ``_get_total_params`` over the DeepSeek model (shared experts in both)."""
    return aicb.parameter_counts(setup, modules(setup))


# -- writing ---------------------------------------------------------------------------


def generate(setup: TrainingSetup, profile: AiobProfile | None = None, *, num_experts: int | None = None,
             **checks) -> wformat.Workload:
    """The workload AICB writes for ``setup`` under ``--frame DeepSeek``: its default path,
    or its AIOB path given a profile. Raises ConfigError with AICB's reason when AICB
    would refuse or crash. ``checks``: see :func:`problems`."""
    reasons = problems(setup, aiob=profile is not None, num_experts=num_experts, **checks)
    if reasons:
        raise ConfigError("; ".join(reasons), key="arguments")
    mods = modules(setup, num_experts)
    if profile is None:
        rows = aicb.default_rows(setup, mods, dispatch_scale=FP8_FACTOR)
    else:
        rows = aicb.aiob_rows(setup, profile, mods, dispatch_scale=FP8_FACTOR)
    return wformat.Workload(header=aicb._header(setup, setup.num_microbatches), rows=tuple(rows))
