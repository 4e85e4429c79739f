"""FSDP in the memory model: what each strategy shards over DP x CP, and the gathered units,
against hand counts on the tiny Llama of the FSDP schedule's tests."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.orchestration import sweep
from commsweep.setup import memory
from commsweep.workload import megatron, megatron_fsdp
from test_megatron_fsdp import tiny

# tiny-llama (4 layers, hidden 64, 8 heads in 2 groups of 8, FFN 176 SwiGLU, vocabulary padded
# to 1,024) on one TP rank: a layer is linear_qkv 96 x 64, linear_proj 64 x 64, linear_fc1
# 352 x 64, linear_fc2 64 x 176 and two norms of 64: 44,160; the stage adds the embedding and
# the output layer (1,024 x 64 each) and the final norm: 4 x 44,160 + 131,136 = 307,776.
UNIT, PARAMS = 44_160, 307_776


def states(fsdp: str, **kw) -> tuple[int, int, int]:
    s = tiny(fsdp, world_size=4, **kw)
    assert (megatron_fsdp.unit_parameters(s), megatron.local_parameters(s, 0)) == (UNIT, PARAMS)
    m = memory.estimate(s, {0: PARAMS}, fsdp_unit=UNIT)
    return m.weights, m.gradients, m.optimizer


def test_each_strategy_shards_what_it_says_over_dp():
    # DP 4, fp32 main gradients (megatron's default), Adam's 12 bytes per parameter.
    n = 4
    assert states("no_shard") == (2 * PARAMS, 4 * PARAMS, 12 * PARAMS)
    assert states("optim") == (2 * PARAMS, 4 * PARAMS, 12 * PARAMS // n)
    assert states("optim_grads") == (2 * PARAMS, 4 * PARAMS // n + 4 * UNIT, 12 * PARAMS // n)
    # The prefetch (at least 5 x 10^8 elements) reaches every one of the 4 layers.
    assert states("optim_grads_params") == (2 * PARAMS // n + 2 * UNIT * 4, 4 * PARAMS // n + 4 * UNIT,
                                            12 * PARAMS // n)
    # torch FSDP2: bf16 weights and gradients, the running layer and the next gathered.
    assert states("torch_fsdp2") == (2 * PARAMS // n + 2 * UNIT * 2, 2 * PARAMS // n + 2 * UNIT, 12 * PARAMS // n)


def test_dp_x_cp_is_the_shard():
    s = tiny("optim", world_size=8, global_batch=8)
    cp = dataclasses.replace(s, cp=2)
    one, two = (memory.fsdp_states(x, PARAMS, UNIT, 4)[2] for x in (s, cp))
    assert (s.dp, cp.dp, cp.cp) == (8, 4, 2)
    assert one == two == -(-12 * PARAMS // 8)


@pytest.mark.parametrize("unit,layers,alive", [
    (300_000_000, 80, 3),   # 1 + ceil(5e8 / 3e8) = 1 + 2
    (100_000_000, 80, 6),   # 1 + 5
    (600_000_000, 80, 2),   # a unit above 5e8: the prefetch size is the unit itself, one ahead
    (100_000_000, 3, 3),    # no more than the stage's layers
])
def test_megatron_fsdps_prefetch_sets_the_gathered_units(unit, layers, alive):
    assert memory.gathered_units(tiny("optim_grads_params", world_size=4), unit, layers) == alive


def test_only_the_model_states_change():
    plain = memory.estimate(tiny("none", world_size=4), {0: PARAMS})
    sharded = memory.estimate(tiny("optim_grads_params", world_size=4), {0: PARAMS}, fsdp_unit=UNIT)
    assert sharded.activations == plain.activations
    assert sharded.total < plain.total


def test_the_sweeps_fits_verdict_counts_fsdp():
    from test_causes import default_config

    config = default_config(model=["llama-7b"], tp=[2], sp=[True], aiob=[False], network=["netA"],
                            seq_length=[2048], global_batch=[16], schedule=["megatron"])
    ddp = next(p for p in sweep.points_from_config(config)[0])
    config["sweep"]["fsdp"] = ["optim_grads_params"]
    fsdp = next(p for p in sweep.points_from_config(config)[0])
    gib = {p.setup.fsdp: sweep.memory_verdict(p.setup, "H100-SXM")[0] for p in (ddp, fsdp)}
    s = fsdp.setup
    want = memory.estimate(s, {0: megatron.local_parameters(s, 0)}, flash_attention=True, dropout=True,
                           fsdp_unit=megatron_fsdp.unit_parameters(s)).total_gib
    assert gib["optim_grads_params"] == pytest.approx(want)
    assert gib["optim_grads_params"] < gib["none"]
