"""Uneven pipeline stages: how many transformer layers each virtual pipeline stage holds.

A layout is one count per virtual stage, in megatron's virtual-stage order: model chunk c
of pipeline rank i is virtual stage ``c * p + i``, and the layers are numbered along that
order (chunk 0 of every rank, then chunk 1, ...). Megatron spells it two ways:

* ``--pipeline-model-parallel-layout`` (in 0.16.1 and 0.19.2, not in 0.8.0;
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``, at 0.16.1:
  ``PipelineParallelLayerLayout.parse_str_to_list`` reads the string, ``__init__`` makes
  p x v stages of it, ``validate_layer_layout`` wants the embedding ``E`` first and the loss
  ``L`` last, each once, and as many ``t`` as the model's layers), e.g. ``Et*3|t*4|t*4|t*3L``
  or, interleaved, ``Ett|(tt|)*6tL``;
* ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  (``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build`` at
  0.16.1): the first (last) pipeline rank holds that many layers, split evenly over its v
  chunks, and the other ranks share the rest evenly.

The even split (megatron's default) is ``L / (p v)`` per virtual stage. Multi-token
prediction layers (``m``) are not modelled and refused.
"""

from __future__ import annotations

import re

# The layout string's letters (parse_str_to_list's char2layer_type) and what is modelled.
_LETTERS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


def parse(text: str, pp: int, num_layers: int) -> tuple[int, ...]:
    """The layer counts per virtual stage of a ``--pipeline-model-parallel-layout`` string,
    as megatron-core reads and checks it; ``ValueError`` saying what is wrong."""
    counts = stage_counts(text)
    if len(counts) % pp:
        raise ValueError(f"{text!r} has {len(counts)} stages, not a multiple of pp={pp}")
    if sum(counts) != num_layers:
        raise ValueError(f"{text!r} holds {sum(counts)} transformer layers (t), the model has {num_layers}")
    return counts


def stage_counts(text: str) -> tuple[int, ...]:
    """The layer counts of a layout string's stages, whatever the pipeline and the model;
    ``ValueError`` for a string megatron-core would not read."""
    flat = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):  # (..)*n first, then x*n
        flat = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), flat)
    stages = flat.split("|")
    bad = sorted({ch for ch in flat if ch not in _LETTERS and ch != "|"})
    if bad:
        raise ValueError(f"unknown layer letter(s) {''.join(bad)!r} in {text!r} (known: E, t, L; "
                         "m, multi-token prediction, is not modelled)")
    if "m" in flat:
        raise ValueError(f"{text!r} has multi-token prediction layers (m), which are not modelled")
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise ValueError(f"{text!r} must name the embedding (E) and the loss (L) exactly once each")
    if not stages[0].startswith("E"):
        raise ValueError(f"{text!r} must start with the embedding (E) in the first stage")
    if not stages[-1].endswith("L"):
        raise ValueError(f"{text!r} must end with the loss (L) in the last stage")
    return tuple(stage.count("t") for stage in stages)


def first_last(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> tuple[int, ...]:
    """The layer counts per virtual stage of ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers`` (either may be None), as
    ``get_num_layers_to_build`` splits them; ``ValueError`` saying what is wrong."""
    if pp < 2:
        raise ValueError("uneven first or last stages need pipeline parallelism (pp > 1)")
    per_rank = [None] * pp
    rest, left = num_layers, pp
    for rank, value, name in ((0, first, "first"), (pp - 1, last, "last")):
        if value is not None:
            if value < 0:
                raise ValueError(f"the {name} stage's layers must be at least 0 (got {value})")
            per_rank[rank] = value
            rest, left = rest - value, left - 1
    if rest < 0 or (left == 0 and rest != 0):
        raise ValueError(f"the first and last stages' layers do not add up to the model's {num_layers}")
    if left and rest % left:
        raise ValueError(f"the {rest} layers left are not divisible by the {left} other stages")
    per_rank = [left and rest // left if n is None else n for n in per_rank]
    for rank, n in enumerate(per_rank):
        if n % vpp:
            raise ValueError(f"stage {rank}'s {n} layers are not divisible by virtual_pipeline={vpp}")
    return tuple(per_rank[i] // vpp for _ in range(vpp) for i in range(pp))


def even(num_layers: int, pp: int, vpp: int) -> tuple[int, ...]:
    """Megatron's default: L / (p v) layers in every virtual stage."""
    return (num_layers // (pp * vpp),) * (pp * vpp)


def text(counts: tuple[int, ...]) -> str:
    """The ``--pipeline-model-parallel-layout`` string of ``counts``: E first, L last."""
    stages = ["t" * n if n < 2 else f"t*{n}" for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return "|".join(stages)


def key(counts: tuple[int, ...]) -> str:
    """A file-name-safe name of a layout: its counts joined by hyphens."""
    return "-".join(map(str, counts))


def chunk_layers(counts: tuple[int, ...], pp: int, stage: int, chunk: int) -> range:
    """The global layer ids that model chunk ``chunk`` of pipeline rank ``stage`` holds."""
    virtual = chunk * pp + stage
    start = sum(counts[:virtual])
    return range(start, start + counts[virtual])
