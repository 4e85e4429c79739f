"""AICB-compatible command-line arguments for one training setup.

``commsweep generate``, ``audit``, ``profile`` and ``trace`` take AICB's own argument names
(``--world_size=16 --tensor_model_parallel_size=2 ...``) with AICB's defaults, so an AICB
command line works unchanged. A few extensions describe what AICB cannot (GQA, RoPE,
norms, tied or untied embeddings) for the Megatron schedule; AICB's own command line
(``to_aicb_argv``, what a real AICB is given) never has them, as AICB's parser rejects
flags it does not know; ``--model NAME`` fills every model
field from a preset. ``to_aicb_argv`` and ``to_commsweep_argv`` go the other way.

AICB's parser takes a flag's unambiguous prefix (argparse's default), and AICB's own scripts
rely on it (``scripts/megatron_gpt.sh`` passes ``--n_dense_layer=3`` for DeepSeek models).
commsweep's parsers take no prefix of their own flags, and resolve a prefix among AICB's
flags alone (``resolve_aicb_prefixes``), so that a prefix means what it means to AICB:
commsweep's extensions neither make it ambiguous nor catch it. (One word differs from AICB:
``--model``, commsweep's preset, which AICB refuses as a prefix of two of its flags.)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Collection, Sequence

from ..base.errors import ConfigError
from ..base.flags import add_flag
from .models import ModelSpec, preset
from .training import CP_COMM_TYPES, FSDP_STRATEGIES, TrainingSetup

# Every option string of AICB's parser (aliyun/aicb, commit 23eec3c48ca2, utils/utils.py:
# get_params and the get_*_params it calls), in its order: what an AICB flag's prefix is
# resolved among, as AICB resolves it.
AICB_FLAGS = (
    "-h", "--help", "--frame", "--gpu_type", "--world_size", "--tensor_model_parallel_size",
    "--pipeline_model_parallel", "--context-parallel-size", "--pp_rank", "--global_batch", "--micro_batch",
    "--epoch_num", "--computation_enable", "--dtype", "--ffn_hidden_size", "--enable_visual", "--workload_only",
    "--model_name", "--hidden_size", "--num_layers", "--seq_length", "--num_attention_heads", "--vocab_size",
    "--max_position_embeddings", "--add_bias_linear", "--use_flash_attn", "--swiglu",
    "--stage", "--amp_enabled", "--reduce_bucket_size", "--allgather_bucket_size", "--contiguous_gradients",
    "--param_persistence_threshold", "--model_persistence_threshold", "--max_live_parameters",
    "--prefetch_bucket_size",
    "--enable_sequence_parallel", "--use-distributed-optimizer", "--make_vocab_size_divisible_by",
    "--overlap_grad_reduce",
    "--begin_size", "--end_size", "--test_comm", "--iter_num", "--multi_all_reduce_enable",
    "--overlap_version",
    "--moe_enable", "--expert_model_parallel_size", "--num_experts", "--moe_router_topk", "--moe_grouped_gemm",
    "--activation_func",
    "--aiob_enable", "--comp_filepath", "--gated_linear_unit", "--bias_gelu_fusion", "--openai_gelu", "--onnx_safe",
    "--squared_relu", "--recompute_activations",
    "--n_dense_layers", "--n_shared_expert", "--qk_rope_dim", "--qk_nope_dim", "--q_lora_rank", "--kv_lora_rank",
    "--v_head_dim",
)

# AICB arguments that do not change a Megatron training workload; accepted for compatibility.
_IGNORED_VALUED = ("--gpu_type", "--dtype", "--gated_linear_unit", "--activation_func")
_IGNORED_FLAGS = (
    "--computation_enable", "--enable_visual", "--workload_only", "--use_flash_attn",
    "--use-distributed-optimizer", "--overlap_grad_reduce", "--bias_gelu_fusion", "--openai_gelu",
    "--onnx_safe", "--squared_relu", "--moe_grouped_gemm", "--overlap_version",
    "--amp_enabled", "--contiguous_gradients",
)
# AICB's DeepSpeed and collective-test options, its --pp_rank and --epoch_num (integers in
# AICB too): its parser accepts them on every command line, and they do not touch a Megatron workload.
_IGNORED_INTS = (
    "--stage", "--reduce_bucket_size", "--allgather_bucket_size", "--param_persistence_threshold",
    "--model_persistence_threshold", "--max_live_parameters", "--prefetch_bucket_size",
    "--begin_size", "--end_size", "--iter_num", "--multi_all_reduce_enable", "--pp_rank", "--epoch_num",
)
# AICB's DeepSeek frame (``get_deepseek_params``): its flags and defaults. Under
# ``--frame=Megatron`` AICB ignores them, and so does commsweep.
DEEPSEEK_DEFAULTS = {
    "n_dense_layers": 3, "n_shared_expert": 2, "qk_rope_dim": 64, "qk_nope_dim": 128,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "v_head_dim": 128,
}
FRAMES = ("Megatron", "DeepSeek")


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """Add AICB's training arguments (its names and defaults) and commsweep's extensions."""
    _add_aicb_arguments(parser)
    _add_architecture_arguments(parser)
    _add_moe_arguments(parser)
    resolve_aicb_prefixes_in(parser)


def _add_aicb_arguments(parser: argparse.ArgumentParser) -> None:
    """AICB's own training and DeepSeek arguments (ignored ones accepted, as AICB accepts them)."""
    a = parser.add_argument_group("training setup (AICB's argument names)")
    a.add_argument("--frame", default=None,
                   help="AICB's frame: Megatron, or DeepSeek (multi-latent attention; default: the model's)")
    # No `choices`: listing the presets would read them on every start (see models.presets).
    a.add_argument("--model", metavar="PRESET",
                   help="fill every model field from a preset (gpt-7b, llama-70b, ...; docs/config.md lists them)")
    a.add_argument("--model_name", help="label of the model (AICB puts it in its file name)")
    a.add_argument("--world_size", type=int, default=1)
    a.add_argument("--tensor_model_parallel_size", type=int, default=1)
    a.add_argument("--pipeline_model_parallel", type=int, default=1)
    a.add_argument("--context-parallel-size", type=int, default=1, dest="context_parallel_size")
    a.add_argument("--expert_model_parallel_size", type=int, default=1)
    a.add_argument("--global_batch", type=int, default=4)
    a.add_argument("--micro_batch", type=int, default=1)
    a.add_argument("--seq_length", type=int, default=None, help="default 2048")
    a.add_argument("--num_layers", type=int, default=None, help="default 24")
    a.add_argument("--hidden_size", type=int, default=None, help="default 1024")
    a.add_argument("--num_attention_heads", type=int, default=None, help="default: num_layers (as AICB)")
    a.add_argument("--ffn_hidden_size", type=int, default=None, help="default 4*h, or AICB's swiglu size")
    a.add_argument("--vocab_size", type=int, default=None, help="default 32000")
    a.add_argument("--max_position_embeddings", type=int, default=None, help="default 4096")
    a.add_argument("--make_vocab_size_divisible_by", type=int, default=128)
    a.add_argument("--swiglu", action="store_true", default=None)
    a.add_argument("--add_bias_linear", action="store_true", default=None)
    a.add_argument("--enable_sequence_parallel", action="store_true")
    a.add_argument("--recompute_activations", action="store_true")
    a.add_argument("--moe_enable", action="store_true", default=None)
    a.add_argument("--num_experts", type=int, default=None)
    a.add_argument("--moe_router_topk", type=int, default=None)
    for name in _IGNORED_VALUED:
        a.add_argument(name, default=None, help=argparse.SUPPRESS)
    for name in _IGNORED_FLAGS:
        a.add_argument(name, action="store_true", help=argparse.SUPPRESS)
    for name in _IGNORED_INTS:
        a.add_argument(name, type=int, default=None, help=argparse.SUPPRESS,
                       **({"choices": (1, 2, 3)} if name == "--stage" else {}))
    a.add_argument("--test_comm", default=None, help=argparse.SUPPRESS)
    d = parser.add_argument_group("AICB's DeepSeek frame (--frame DeepSeek; AICB's defaults)")
    for name, default in DEEPSEEK_DEFAULTS.items():
        d.add_argument(f"--{name}", type=int, default=None, help=f"default {default}")


def _add_architecture_arguments(parser: argparse.ArgumentParser) -> None:
    """Architecture fields beyond AICB's arguments (GQA, RoPE, RMSNorm, untied embeddings, biases)."""
    # commsweep's own flags: hyphens, the first underscore spellings kept as aliases (flags.py).
    x = parser.add_argument_group("architecture beyond AICB's arguments (Megatron schedule)")
    add_flag(x, "--num-query-groups", type=int, default=None, help="GQA key/value heads")
    add_flag(x, "--position-embedding", choices=("learned", "rope"), default=None)
    x.add_argument("--normalization", choices=("layernorm", "rmsnorm"), default=None)
    # Either way: a SwiGLU model's default is untied (as LLaMA's), any other's tied (as GPT's),
    # and ``to_commsweep_argv`` writes whichever differs from that default.
    tie = x.add_mutually_exclusive_group()
    add_flag(tie, "--untie-embeddings", action="store_true", default=None,
             help="an output layer of its own (default with --swiglu)")
    add_flag(tie, "--tie-embeddings", dest="untie_embeddings", action="store_false", default=None,
             help="the output layer shares the input embedding's weights (default without --swiglu)")
    add_flag(x, "--add-qkv-bias", action="store_true", default=None, help="biases on q, k and v only (Qwen)")


def _add_moe_arguments(parser: argparse.ArgumentParser) -> None:
    """MoE fields beyond AICB's arguments, in Megatron's spellings."""
    e = parser.add_argument_group("MoE beyond AICB's arguments (Megatron's spellings; docs/moe.md)")
    add_flag(e, "--expert-tensor-parallel-size", type=int, default=None, help="expert TP (default: TP)")
    add_flag(e, "--moe-ffn-hidden-size", type=int, default=None,
             help="one expert's FFN width (default: --ffn_hidden_size)")
    add_flag(e, "--moe-shared-expert-intermediate-size", type=int, default=None,
             help="the shared experts' total FFN width (default: no shared expert)")
    add_flag(e, "--moe-shared-expert-gate", action="store_true", default=None)
    add_flag(e, "--moe-layer-freq", type=int, default=None, help="one MoE layer every N layers (default 1)")
    add_flag(e, "--moe-first-k-dense", type=int, default=None,
             help="the first k layers dense (default 0; with --frame DeepSeek, AICB's --n_dense_layers)")
    add_flag(e, "--moe-aux-loss-coeff", type=float, default=None, help="load-balancing loss (default 0)")


class AmbiguousPrefix(ValueError):
    """A prefix of several of AICB's flags: AICB refuses it, and so does commsweep."""


def resolve_aicb_prefixes(argv: Sequence[str], own: Collection[str]) -> list[str]:
    """``argv`` with each prefix of one of AICB's flags written out, as AICB's parser reads it.

    ``own`` is every option string the command's parser knows (AICB's flags, commsweep's).
    A word is left as it is when it is one of them (``--name`` or ``--name=value``: an exact
    flag wins, as in argparse), when it is no prefix of an AICB flag (argparse then says
    it is unrecognized), or when the AICB flag it stands for is not this command's. A prefix
    of several AICB flags raises AmbiguousPrefix with argparse's words. After ``--``
    nothing is an option, as argparse reads it.
    """
    out: list[str] = []
    for i, word in enumerate(argv):
        if word == "--":
            return out + list(argv[i:])
        name, eq, value = word.partition("=")
        if not word.startswith("--") or word in own or name in own:
            out.append(word)
            continue
        matches = [flag for flag in AICB_FLAGS if flag.startswith(name)]
        if len(matches) > 1:
            raise AmbiguousPrefix(f"ambiguous option: {word} could match {', '.join(matches)}")
        out.append(matches[0] + eq + value if matches and matches[0] in own else word)
    return out


def resolve_aicb_prefixes_in(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` read AICB flags' prefixes as AICB does (``resolve_aicb_prefixes``).

    The command's parser is built with ``allow_abbrev=False``, so that no prefix reaches
    commsweep's own flags; argparse has no hook before it parses, so the parser's
    ``parse_known_args`` (what ``parse_args`` and a subcommand's parsing call) is wrapped:
    the words are resolved, then parsed as they were. The parser's flags are read when it
    parses, once every command's own flags are added.
    """
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        words = sys.argv[1:] if args is None else list(args)
        try:
            words = resolve_aicb_prefixes(words, parser._option_string_actions)
        except AmbiguousPrefix as err:
            parser.error(str(err))
        return parse(words, namespace)

    parser.parse_known_args = parse_known_args


def add_stage_argument(parser: argparse.ArgumentParser) -> None:
    """Which pipeline stage's view a megatron-schedule workload holds (generate, audit, timeline)."""
    add_flag(parser, "--pp-stage", default="first",
             help="with pp > 1: the pipeline stage whose view the workload holds (first, last, fullest: the "
                  "first stage holding the most layers, or an index; megatron schedule)")


def add_pipeline_arguments(g) -> None:
    """The interleaved schedule's and the uneven stages' flags (the megatron schedule, the trace)."""
    add_flag(g, "--virtual-pipeline", dest="virtual_pipeline", type=int, default=1,
             help="model chunks per pipeline stage: the interleaved 1F1B schedule (Megatron's "
                  "--virtual-pipeline-model-parallel-size; default 1, not interleaved)")
    add_flag(g, "--pipeline-model-parallel-layout", dest="pipeline_layout", default=None,
             help="uneven stages: which layers each (virtual) pipeline stage holds, megatron's layout string "
                  "(E the embedding, t a transformer layer, L the loss, | between stages, x*n and (..)*n "
                  "repeats; e.g. 'Et*3|t*4|t*4|t*3L'); its stages are pp x the virtual pipeline's")
    add_flag(g, "--decoder-first-pipeline-num-layers", dest="decoder_first_layers", type=int, default=None,
             help="uneven stages: the first pipeline stage's transformer layers (megatron's flag of that "
                  "name); the stages without such a flag share the rest")
    add_flag(g, "--decoder-last-pipeline-num-layers", dest="decoder_last_layers", type=int, default=None,
             help="uneven stages: the last pipeline stage's transformer layers (megatron's flag of that name)")


def add_schedule_arguments(parser: argparse.ArgumentParser) -> None:
    """Megatron's schedule options beyond AICB's arguments (the megatron schedule only)."""
    from ..base.flags import add_flag

    g = parser.add_argument_group("Megatron schedule beyond AICB's arguments")
    add_pipeline_arguments(g)
    add_flag(g, "--recompute-granularity", dest="recompute_granularity", choices=("selective", "full"), default=None,
             help="full: recompute every layer's forward, collectives included (implies recomputation); "
                  "selective: the attention core (as --recompute_activations)")
    add_flag(g, "--cp-comm-type", dest="cp_comm_type", choices=CP_COMM_TYPES, default="p2p",
             help="with --context-parallel-size above 1: how the attention exchanges the sequence "
                  "(megatron's --cp-comm-type; default p2p, the ring)")
    add_flag(g, "--hierarchical-context-parallel-sizes", dest="hierarchical_cp", type=int, nargs=2, default=None,
             metavar=("A2A", "P2P"), help="cp-comm-type a2a+p2p: the all-to-all group's size and the ring's")
    add_bucket_arguments(g)
    _add_fsdp_arguments(g)
    add_flag(g, "--megatron-version", metavar="VERSION", default=None,
             help="the megatron-core release whose collectives to follow, 0.8.0 to the newest traced (default); "
                  "releases differ in MoE layers only (docs/megatron-versions.md)")


def add_bucket_arguments(g) -> None:
    """The distributed optimizer's buckets and their overlap (``generate``'s and ``trace``'s)."""
    from ..base.flags import add_flag

    # The same switch as AICB's --overlap_grad_reduce (which AICB's own workload ignores).
    g.add_argument("--overlap-grad-reduce", dest="overlap_grad_reduce", action="store_true",
                   help="reduce the gradients bucket by bucket as the backward pass fills them (megatron's "
                        "--overlap-grad-reduce, AICB's --overlap_grad_reduce; one DP row per bucket)")
    add_flag(g, "--overlap-param-gather", dest="overlap_param_gather", action="store_true",
             help="with --overlap-grad-reduce: gather the parameters bucket by bucket in the next "
                  "forward pass (megatron's --overlap-param-gather)")
    add_flag(g, "--ddp-bucket-size", dest="ddp_bucket_size", type=int, default=None, metavar="PARAMS",
             help="with --overlap-grad-reduce: parameters per gradient bucket (default max(40M, 1M*DP))")


def _add_fsdp_arguments(g) -> None:
    """Megatron-LM's FSDP and FP8-gather flags, in its spellings (``workload/megatron_fsdp.py``)."""
    fsdp = g.add_mutually_exclusive_group()
    add_flag(fsdp, "--use-megatron-fsdp", dest="use_megatron_fsdp", action="store_true",
             help="megatron-core's FSDP (megatron-fsdp), sharded as --data-parallel-sharding-strategy says")
    add_flag(fsdp, "--use-torch-fsdp2", dest="use_torch_fsdp2", action="store_true",
             help="PyTorch's FSDP2 (fully_shard) on each transformer layer, the embedding and the output layer")
    add_flag(g, "--data-parallel-sharding-strategy", dest="data_parallel_sharding_strategy",
             choices=FSDP_STRATEGIES, default="no_shard",
             help="with --use-megatron-fsdp: no_shard, optim (optimizer state), optim_grads (and gradients, "
                  "reduce-scattered per bucket every micro-batch), optim_grads_params (and parameters, gathered "
                  "per layer in forward and backward); default no_shard")
    add_flag(g, "--fp8-param-gather", dest="fp8_param_gather", action="store_true",
             help="FP8 weights: the distributed optimizer's and FSDP's parameter all-gathers carry the linear "
                  "layers' weights in 1 byte instead of 2 (megatron's --fp8-param-gather)")


def _fsdp_of(ns: argparse.Namespace) -> str:
    """The setup's ``fsdp`` from Megatron-LM's flags."""
    if getattr(ns, "use_torch_fsdp2", False):
        return "torch_fsdp2"
    if getattr(ns, "use_megatron_fsdp", False):
        return getattr(ns, "data_parallel_sharding_strategy", "no_shard")
    return "none"


def add_aiob_arguments(parser: argparse.ArgumentParser) -> None:
    """AICB's AIOB switches: use a compute-time profile for the workload's compute fields."""
    parser.add_argument("--aiob_enable", action="store_true")
    parser.add_argument("--comp_filepath", default=None, help="AIOB compute-time file (AICB format)")


def _pick(value, default):
    return default if value is None else value


def frame_of(ns: argparse.Namespace) -> str:
    """AICB's ``--frame`` of the arguments: as given, else the preset's (DeepSeek for a
    multi-latent-attention preset), else Megatron; a ConfigError for a frame commsweep
    does not emulate or one the preset cannot be written in."""
    base = preset(ns.model) if ns.model is not None else None
    frame = ns.frame or ("DeepSeek" if base is not None and base.is_mla else "Megatron")
    if frame not in FRAMES:
        raise ConfigError(f"commsweep emulates --frame={' and --frame='.join(FRAMES)}, got {frame!r}", key="--frame")
    if frame == "Megatron" and base is not None and base.is_mla:
        raise ConfigError(f"{base.name} has multi-latent attention, which AICB's Megatron frame cannot build; "
                          "use --frame=DeepSeek", key="--frame")
    return frame


def _deepseek_fields(ns: argparse.Namespace, base: ModelSpec | None, expert_ffn: int) -> dict:
    """The DeepSeek frame's model fields: AICB's DeepSeek flags, else the (MLA) preset's
    values, else AICB's defaults. AICB's ``--q_lora_rank=0`` (its scripts' spelling of
    queries without a latent) is ``q_lora_rank: null``; AICB's one shared MLP is as wide as
    a routed expert, so ``--n_shared_expert=n`` is n such experts."""
    mla = base if base is not None and base.is_mla else None
    given = {name: getattr(ns, name) for name in DEEPSEEK_DEFAULTS}
    for name, value in given.items():
        low = 0 if name in ("q_lora_rank", "n_dense_layers", "n_shared_expert") else 1
        if value is not None and value < low:
            raise ConfigError(f"must be at least {low} (got {value})", key=f"--{name}")

    def pick(flag: str, field: str):
        if given[flag] is not None:
            return given[flag]
        return getattr(mla, field) if mla is not None else DEEPSEEK_DEFAULTS[flag]

    q_lora = given["q_lora_rank"] if given["q_lora_rank"] is not None else (
        mla.q_lora_rank if mla is not None else DEEPSEEK_DEFAULTS["q_lora_rank"])
    if ns.moe_shared_expert_intermediate_size is not None:
        shared = ns.moe_shared_expert_intermediate_size
    elif given["n_shared_expert"] is not None or mla is None:
        count = _pick(given["n_shared_expert"], DEEPSEEK_DEFAULTS["n_shared_expert"])
        shared = count * expert_ffn if count > 0 else None
    else:
        shared = mla.moe_shared_expert_intermediate_size
    first_k = ns.moe_first_k_dense if ns.moe_first_k_dense is not None else pick("n_dense_layers", "moe_first_k_dense")
    return dict(
        q_lora_rank=q_lora or None, kv_lora_rank=pick("kv_lora_rank", "kv_lora_rank"),
        qk_nope_head_dim=pick("qk_nope_dim", "qk_nope_head_dim"), qk_rope_head_dim=pick("qk_rope_dim", "qk_rope_head_dim"),
        v_head_dim=pick("v_head_dim", "v_head_dim"), moe_shared_expert_intermediate_size=shared,
        moe_first_k_dense=first_k,
    )


def model_from_args(ns: argparse.Namespace) -> ModelSpec:
    """The model the arguments describe: a preset, overridden by any explicit field.

    Under ``--frame=DeepSeek`` the model is AICB's DeepSeek model: multi-latent attention
    and MoE layers after the first dense ones, whether or not ``--moe_enable`` is given
    (AICB builds them either way; with ``num_experts`` 1 and top-1 by default).
    """
    frame = frame_of(ns)
    if ns.model is not None:
        base = preset(ns.model)
        name = base.name
    else:
        base = None
        name = ns.model_name or "custom"
    swiglu = bool(_pick(ns.swiglu, base.swiglu if base else False))
    hidden = _pick(ns.hidden_size, base.hidden_size if base else 1024)
    layers = _pick(ns.num_layers, base.num_layers if base else 24)
    ffn = _ffn_hidden_size(ns, base, hidden, swiglu)
    moe_fields = _moe_fields(ns, base, frame, ffn)
    llama_like = swiglu
    return ModelSpec(
        name=name,
        aicb_name=ns.model_name or (base.aicb_name if base else None),
        num_layers=layers,
        hidden_size=hidden,
        # AICB quirk kept for compatibility: without --num_attention_heads it uses num_layers.
        num_attention_heads=_pick(ns.num_attention_heads, base.num_attention_heads if base else layers),
        ffn_hidden_size=ffn,
        vocab_size=_pick(ns.vocab_size, base.vocab_size if base else 32000),
        max_position_embeddings=_pick(ns.max_position_embeddings, base.max_position_embeddings if base else 4096),
        num_query_groups=_pick(ns.num_query_groups, base.num_query_groups if base else None),
        swiglu=swiglu,
        position_embedding=_pick(ns.position_embedding, base.position_embedding if base else ("rope" if llama_like else "learned")),
        normalization=_pick(ns.normalization, base.normalization if base else ("rmsnorm" if llama_like else "layernorm")),
        add_bias_linear=bool(_pick(ns.add_bias_linear, base.add_bias_linear if base else False)),
        add_qkv_bias=bool(_pick(ns.add_qkv_bias, base.add_qkv_bias if base else False)),
        tie_embeddings=not _pick(ns.untie_embeddings, (not base.tie_embeddings) if base else llama_like),
        **moe_fields,
    )


def _ffn_hidden_size(ns: argparse.Namespace, base: ModelSpec | None, hidden: int, swiglu: bool) -> int:
    """The FFN width: the argument, else the preset's (when its shape is unchanged), else AICB's default."""
    if ns.ffn_hidden_size is not None:
        return ns.ffn_hidden_size
    if base is not None and ns.hidden_size is None and ns.swiglu is None:
        return base.ffn_hidden_size
    # AICB's default (utils.get_params): 4h, or 2/3 of that rounded down to 64 for swiglu.
    return int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden


def _moe_fields(ns: argparse.Namespace, base: ModelSpec | None, frame: str, ffn: int) -> dict:
    """The ModelSpec fields of the MoE layers (and DeepSeek's multi-latent attention)."""
    moe = frame == "DeepSeek" or bool(_pick(ns.moe_enable, base.is_moe if base else False))
    moe_base = base if base is not None and base.is_moe else None
    if moe:
        experts = _pick(ns.num_experts, moe_base.num_experts if moe_base else 1)
        topk = _pick(ns.moe_router_topk, moe_base.moe_topk if moe_base else 1)
    else:
        experts, topk = None, 2

    def moe_field(name: str, default):
        """An MoE field: the argument, else the MoE preset's value, else megatron's default."""
        if not moe:
            return default
        return _pick(getattr(ns, name), getattr(moe_base, name) if moe_base else default)

    if frame == "DeepSeek":
        expert_ffn = _pick(moe_field("moe_ffn_hidden_size", None), ffn)
        extra = _deepseek_fields(ns, base, expert_ffn)
    else:
        extra = dict(
            moe_shared_expert_intermediate_size=moe_field("moe_shared_expert_intermediate_size", None),
            moe_first_k_dense=moe_field("moe_first_k_dense", 0),
        )
    return dict(
        num_experts=experts,
        moe_topk=topk,
        moe_ffn_hidden_size=moe_field("moe_ffn_hidden_size", None),
        moe_shared_expert_gate=bool(moe_field("moe_shared_expert_gate", False)),
        moe_layer_freq=moe_field("moe_layer_freq", 1),
        moe_aux_loss_coeff=moe_field("moe_aux_loss_coeff", 0.0),
        **extra,
    )


def stage_layout_from_args(ns: argparse.Namespace, num_layers: int) -> tuple[int, tuple[int, ...] | None]:
    """The virtual pipeline's size and the uneven stages' layout from the pipeline flags;
    a ``ConfigError`` naming the flag of a malformed or contradictory one."""
    from . import pipeline_layout

    pp, virtual = ns.pipeline_model_parallel, getattr(ns, "virtual_pipeline", 1)
    text = getattr(ns, "pipeline_layout", None)
    first, last = getattr(ns, "decoder_first_layers", None), getattr(ns, "decoder_last_layers", None)
    if text is not None:
        flag = "--pipeline-model-parallel-layout"
        if first is not None or last is not None:
            raise ConfigError("cannot be combined with --decoder-first/last-pipeline-num-layers", key=flag)
        if pp < 2:
            raise ConfigError("needs pipeline parallelism (--pipeline_model_parallel above 1)", key=flag)
        try:
            layout = pipeline_layout.parse(text, pp, num_layers)
        except ValueError as err:
            raise ConfigError(str(err), key=flag) from None
        if virtual != 1 and virtual * pp != len(layout):
            raise ConfigError(f"has {len(layout)} stages, not pp x --virtual-pipeline = {pp * virtual}", key=flag)
        return len(layout) // pp, layout
    if first is None and last is None:
        return virtual, None
    flag = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
    try:
        return virtual, pipeline_layout.first_last(num_layers, pp, max(virtual, 1), first, last)
    except ValueError as err:
        raise ConfigError(str(err), key=flag) from None


def setup_from_args(ns: argparse.Namespace) -> TrainingSetup:
    """Validate the parsed arguments and build the setup; raise ConfigError naming the argument."""
    model = model_from_args(ns)
    cp = ns.context_parallel_size
    virtual, layout = stage_layout_from_args(ns, model.num_layers)
    setup = TrainingSetup(
        model=model,
        world_size=ns.world_size,
        tp=ns.tensor_model_parallel_size,
        pp=ns.pipeline_model_parallel,
        ep=ns.expert_model_parallel_size,
        sp=ns.enable_sequence_parallel,
        micro_batch=ns.micro_batch,
        global_batch=ns.global_batch,
        seq_length=_pick(ns.seq_length, 2048),
        recompute=ns.recompute_activations or getattr(ns, "recompute_granularity", None) is not None,
        make_vocab_size_divisible_by=ns.make_vocab_size_divisible_by,
        recompute_granularity=getattr(ns, "recompute_granularity", None) or "selective",
        virtual_pipeline=virtual,
        stage_layout=layout,
        # Megatron's default expert TP is TP: the same setup, written one way.
        etp=None if ns.expert_tensor_parallel_size in (None, ns.tensor_model_parallel_size)
        else ns.expert_tensor_parallel_size,
        cp=cp,  # the megatron schedule's (the aicb schedule's job sets it to 1, as AICB ignores it)
        cp_comm_type=getattr(ns, "cp_comm_type", "p2p") if cp != 1 else "p2p",
        hierarchical_cp=tuple(ns.hierarchical_cp) if cp != 1 and getattr(ns, "hierarchical_cp", None) else None,
        overlap_grad_reduce=getattr(ns, "overlap_grad_reduce", False),
        overlap_param_gather=getattr(ns, "overlap_param_gather", False),
        ddp_bucket_size=getattr(ns, "ddp_bucket_size", None),
        fsdp=_fsdp_of(ns),
        fp8_param_gather=getattr(ns, "fp8_param_gather", False),
    )
    return setup


def to_aicb_argv(setup: TrainingSetup) -> list[str]:
    """The setup as AICB's own command line (what ``scripts/megatron_gpt.sh`` would pass).

    Only fields AICB knows are written: GQA, RoPE and norms are invisible to it. Biases
    are passed (``--add_bias_linear``: AICB then counts them in its parameter total), and so
    is EP whenever it is not 1, so that AICB sees, and checks, exactly what the aicb
    schedule's emulation models.
    """
    m = setup.model
    argv = [
        f"--frame={'DeepSeek' if m.is_mla else 'Megatron'}",
        f"--world_size={setup.world_size}",
        f"--tensor_model_parallel_size={setup.tp}",
        f"--pipeline_model_parallel={setup.pp}",
        f"--global_batch={setup.global_batch}",
        f"--micro_batch={setup.micro_batch}",
        f"--num_layers={m.num_layers}",
        f"--seq_length={setup.seq_length}",
        f"--hidden_size={m.hidden_size}",
        "--epoch_num=1",
        f"--num_attention_heads={m.num_attention_heads}",
        f"--model_name={m.aicb_name or m.name}",
        f"--max_position_embeddings={m.max_position_embeddings}",
        f"--vocab_size={m.vocab_size}",
        # AICB's MoE layers take their experts' width from --ffn_hidden_size (it has no other).
        f"--ffn_hidden_size={m.expert_ffn_hidden_size if m.is_moe else m.ffn_hidden_size}",
        "--use-distributed-optimizer",
    ]
    if setup.make_vocab_size_divisible_by != 128:
        argv.append(f"--make_vocab_size_divisible_by={setup.make_vocab_size_divisible_by}")
    if m.swiglu:
        argv.append("--swiglu")
    if setup.sp:
        argv.append("--enable_sequence_parallel")
    if setup.recompute:
        argv.append("--recompute_activations")
    if m.add_bias_linear:
        argv.append("--add_bias_linear")
    if m.is_moe:
        argv += [
            "--moe_enable",
            f"--num_experts={m.num_experts}",
            f"--moe_router_topk={m.moe_topk}",
            f"--expert_model_parallel_size={setup.ep}",
        ]
    elif setup.ep != 1:
        argv.append(f"--expert_model_parallel_size={setup.ep}")
    if m.is_mla:
        argv += [f"--{flag}={value}" for flag, value in deepseek_flags(m).items()]
    return argv


def deepseek_flags(m: ModelSpec) -> dict[str, int]:
    """AICB's DeepSeek flags for an MLA model, as its own scripts spell them: no query latent
    is ``--q_lora_rank=0``; the shared experts are counted in routed experts' widths (AICB
    builds one shared MLP whatever the count, so only 0 or more matters)."""
    shared = m.moe_shared_expert_intermediate_size
    return {
        # A dense MLA model: every layer dense (AICB's DeepSeek model has no other way).
        "n_dense_layers": m.moe_first_k_dense if m.is_moe else m.num_layers,
        "n_shared_expert": max(1, shared // m.expert_ffn_hidden_size) if shared else 0,
        "qk_rope_dim": m.qk_rope_head_dim, "qk_nope_dim": m.qk_nope_head_dim,
        "q_lora_rank": m.q_lora_rank or 0, "kv_lora_rank": m.kv_lora_rank, "v_head_dim": m.v_head_dim,
    }


def to_commsweep_argv(setup: TrainingSetup) -> list[str]:
    """The setup as commsweep arguments: AICB's plus every architecture extension.

    Parsing the result with ``add_training_arguments`` gives back an equal setup.
    """
    m = setup.model
    argv = [a for a in to_aicb_argv(setup) if not a.startswith("--ffn_hidden_size=")]
    argv.append(f"--ffn_hidden_size={m.ffn_hidden_size}")
    if m.num_query_groups is not None:
        argv.append(f"--num-query-groups={m.num_query_groups}")
    argv.append(f"--position-embedding={m.position_embedding}")
    argv.append(f"--normalization={m.normalization}")
    if not m.tie_embeddings:
        argv.append("--untie-embeddings")
    elif m.swiglu:  # tied, where the parser's default is untied (model_from_args)
        argv.append("--tie-embeddings")
    if m.add_qkv_bias:
        argv.append("--add-qkv-bias")
    if setup.etp is not None:
        argv.append(f"--expert-tensor-parallel-size={setup.etp}")
    if m.is_moe:
        for name in ("moe_ffn_hidden_size", "moe_shared_expert_intermediate_size"):
            if getattr(m, name) is not None:
                argv.append(f"--{name.replace('_', '-')}={getattr(m, name)}")
        if m.moe_first_k_dense:
            argv.append(f"--moe-first-k-dense={m.moe_first_k_dense}")
        if m.moe_shared_expert_gate:
            argv.append("--moe-shared-expert-gate")
        if m.moe_layer_freq != 1:
            argv.append(f"--moe-layer-freq={m.moe_layer_freq}")
        if m.moe_aux_loss_coeff:
            argv.append(f"--moe-aux-loss-coeff={m.moe_aux_loss_coeff!r}")
    if setup.virtual_pipeline != 1:
        argv.append(f"--virtual-pipeline={setup.virtual_pipeline}")
    if setup.stage_layout is not None:
        from .pipeline_layout import text

        argv.append(f"--pipeline-model-parallel-layout={text(setup.stage_layout)}")
    if setup.recompute and setup.recompute_granularity != "selective":
        argv.append(f"--recompute-granularity={setup.recompute_granularity}")
    if setup.cp != 1:
        argv += [f"--context-parallel-size={setup.cp}", f"--cp-comm-type={setup.cp_comm_type}"]
        if setup.hierarchical_cp is not None:
            argv += ["--hierarchical-context-parallel-sizes", *map(str, setup.hierarchical_cp)]
    argv += ["--overlap-grad-reduce"] if setup.overlap_grad_reduce else []
    argv += ["--overlap-param-gather"] if setup.overlap_param_gather else []
    argv += [f"--ddp-bucket-size={setup.ddp_bucket_size}"] if setup.ddp_bucket_size is not None else []
    if setup.fsdp == "torch_fsdp2":
        argv.append("--use-torch-fsdp2")
    elif setup.fsdp != "none":
        argv += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy={setup.fsdp}"]
    argv += ["--fp8-param-gather"] if setup.fp8_param_gather else []
    return argv


def as_commanded(setup: TrainingSetup) -> TrainingSetup:
    """The setup its command line (``to_commsweep_argv``) stands for: what parsing that line
    gives back (``setup_from_args``), without writing and parsing it.

    A stage run in-process (a batch's task) must compute what its command computes, and the
    command line carries every model field (tests/test_arguments.py round-trips each one) but
    the labels: the model is named by its AICB name, and an expert TP equal to TP is no expert TP. tests/test_stages.py checks this against the parser for every preset and every
    point of the sweeps.
    """
    m = setup.model
    label = m.aicb_name or m.name
    model = dataclasses.replace(m, name=label, aicb_name=label)
    granularity = setup.recompute_granularity if setup.recompute else "selective"
    return dataclasses.replace(setup, model=model, recompute_granularity=granularity,
                               etp=None if setup.etp in (None, setup.tp) else setup.etp)


def same_setup(a: TrainingSetup, b: TrainingSetup) -> bool:
    """Equal apart from labels (the model's name and AICB name)."""
    strip = {"name": "", "aicb_name": None}
    return dataclasses.replace(a, model=dataclasses.replace(a.model, **strip)) == dataclasses.replace(
        b, model=dataclasses.replace(b.model, **strip)
    )
