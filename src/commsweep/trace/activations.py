"""The activations one megatron-core transformer layer really keeps for its backward pass.

``memory.layer_activations`` derives them from Korthikanti et al.'s count; this measures
them: one layer of megatron-core's local GPT spec (``trace.model``'s, TP 1, on the CPU),
one forward pass under ``torch.autograd.graph.saved_tensors_hooks``, and the bytes of every
distinct tensor storage autograd saves (a view of the layer's input or of another saved
tensor is counted once). The layer runs in fp32 on the CPU, so its bytes are twice a
16-bit run's: ``measure`` reports them per 16-bit value (bool masks, none without dropout,
would count as they are).

Run as ``python -m commsweep.trace.activations --layers L --hidden H --heads A --ffn F
--seq S --micro-batch B [--swiglu]`` in a fresh process (it initialises a one-rank gloo
group and megatron's parallel state): prints one JSON object, ``{"saved_bytes_16bit": N,
"tensors": K}``. Needs torch and megatron-core (``pip install '.[megatron]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence

from ..setup.models import ModelSpec
from ..setup.training import TrainingSetup


def measure(setup: TrainingSetup) -> dict[str, int]:
    """Saved bytes (per 16-bit value) of one transformer layer's forward for ``setup``
    (TP 1; the setup's micro batch and sequence). Initialises a one-rank gloo group."""
    import torch
    import torch.distributed as dist

    from . import model as tm  # patches torch.cuda for the CPU; imports megatron

    if not dist.is_initialized():
        import atexit
        import shutil

        folder = tempfile.mkdtemp(prefix="commsweep-activations-")
        atexit.register(shutil.rmtree, folder, True)  # the group's file store, gone with the process
        store = os.path.join(folder, "store")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    with tm.CudaFactoriesOnCpu():
        tm.ps.initialize_model_parallel(**tm.compat.parallel_sizes(1, 1, 1, 1))
        tm.compat.cpu_rng_tracker()
        torch.manual_seed(1234)
        config = tm.transformer_config(setup)
        spec = tm.layer_spec(config, 1).layer_specs[0]
        from megatron.core.transformer.spec_utils import build_module

        layer = build_module(spec, config=config, layer_number=1)
        s, b, h = setup.seq_length, setup.micro_batch, setup.model.hidden_size
        x = torch.randn(s, b, h, requires_grad=True)
        mask = torch.triu(torch.ones(b, 1, s, s, dtype=torch.bool), diagonal=1)
        rope = None
        if setup.model.position_embedding == "rope":
            from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

            rope = RotaryEmbedding(setup.model.head_dim, rotary_percent=1.0)(s)
        storages: dict[int, tuple[int, str]] = {}
        # Not activations: the weights (autograd saves them for the input gradient), the
        # mask and the rotary table (inputs shared by every layer).
        shared = {p.untyped_storage().data_ptr() for p in layer.parameters()}
        shared |= {t.untyped_storage().data_ptr() for t in (mask, rope) if t is not None}

        def pack(t: torch.Tensor) -> torch.Tensor:
            key = t.untyped_storage().data_ptr()
            if key not in shared:
                size = max(storages.get(key, (0, ""))[0], t.untyped_storage().nbytes())
                storages[key] = (size, f"{t.dtype} {tuple(t.shape)}")
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = layer(x, attention_mask=mask, rotary_pos_emb=rope)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()  # the saved tensors were what backward needs: it runs
        tm.ps.destroy_model_parallel()
    if os.environ.get("COMMSWEEP_ACTIVATIONS_LIST"):
        for size, what in storages.values():
            sys.stderr.write(f"{size:>12} {what}\n")
    fp32 = sum(size for size, _ in storages.values())
    return {"saved_bytes_16bit": fp32 // 2, "tensors": len(storages)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--swiglu", action="store_true", help="a Llama-style layer (SwiGLU, RMSNorm, RoPE, no biases)")
    ns = p.parse_args(argv)
    llama = ns.swiglu
    model = ModelSpec(name="measured", num_layers=1, hidden_size=ns.hidden, num_attention_heads=ns.heads,
                      ffn_hidden_size=ns.ffn, vocab_size=128, max_position_embeddings=ns.seq, swiglu=llama,
                      position_embedding="rope" if llama else "learned",
                      normalization="rmsnorm" if llama else "layernorm", add_bias_linear=not llama)
    setup = TrainingSetup(model=model, world_size=1, micro_batch=ns.micro_batch, global_batch=ns.micro_batch,
                          seq_length=ns.seq)
    sys.stdout.write(json.dumps(measure(setup)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
