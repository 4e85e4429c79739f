"""Context parallelism in the time model: a CP rank's kernels, the exchange Transformer
Engine hides or waits for, the memory it keeps, and the runs file's CP columns."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.aiob import gpus
from commsweep.aiob import megatron_kernels as mk
from commsweep.analysis import predict, validate
from commsweep.base.errors import CommsweepError, InputError
from commsweep.setup import memory
from commsweep.setup.models import ModelSpec
from commsweep.setup.training import TrainingSetup
from commsweep.workload import megatron
from commsweep.workload import megatron_context_parallel as cp

H100 = gpus.gpu("H100-SXM")
NEMO = mk.software("nemo")
# A small Llama-style model: 4 layers, 1024 wide, 16 heads in 4 key/value groups.
MODEL = ModelSpec(name="tiny-llama", num_layers=4, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
                  vocab_size=32000, max_position_embeddings=8192, num_query_groups=4, swiglu=True,
                  position_embedding="rope", normalization="rmsnorm", add_bias_linear=False, tie_embeddings=False)
DGX_H100 = predict.Cluster(gpus_per_server=8, nics_per_server=8, nvlink_gbps=450, nic_gbps=50)


def setup(cp_size: int = 1, kind: str = "p2p", tp: int = 1, world: int = 8, **changes) -> TrainingSetup:
    base = TrainingSetup(model=MODEL, world_size=world, tp=tp, pp=1, sp=tp > 1, micro_batch=1, global_batch=16,
                         seq_length=8192, cp=cp_size, cp_comm_type=kind,
                         hierarchical_cp=(2, cp_size // 2) if kind == "a2a+p2p" else None)
    return NEMO.configure(dataclasses.replace(base, **changes))


def attention_kernels(s: TrainingSetup) -> tuple[tuple[mk.Kernel, ...], tuple[mk.Kernel, ...]]:
    lk = mk.kernels(s, NEMO)
    return lk.attention_core, lk.attention_core_bwd


@pytest.mark.parametrize("kind,c", [("p2p", 2), ("p2p", 4), ("all_gather", 4), ("a2a", 4), ("a2a+p2p", 4)])
def test_a_cp_rank_does_its_share_of_the_causal_attention_in_te_s_pieces(kind, c):
    """Every variant does 1/c of the causal attention's FLOPs; the ring in c (or r) steps,
    the all-gather in two chunks, the all-to-all in one kernel over the whole sequence."""
    whole = sum(k.flops for k in attention_kernels(setup())[0] if k.kind == "fused_attention")
    fwd, bwd = attention_kernels(setup(c, kind))
    steps = [k for k in fwd if k.kind == "fused_attention"]
    assert sum(k.flops for k in steps) == pytest.approx(whole / c)
    assert sum(k.flops for k in bwd if k.kind == "fused_attention") == pytest.approx(2.5 * whole / c)
    assert len(steps) == {"p2p": c, "all_gather": 2, "a2a": 1, "a2a+p2p": c // 2}[kind]
    # each kernel's efficiency is read at the sequence it runs over
    assert steps[0].m == {"p2p": 8192 // c, "all_gather": 8192 // c, "a2a": 8192, "a2a+p2p": 2 * 8192 // c}[kind]


def test_a_cp_rank_s_gemms_and_optimizer_see_its_share():
    """The GEMMs run over s/c tokens; the distributed optimizer's shard is 1/(d c)."""
    plain, two = mk.kernels(setup(), NEMO), mk.kernels(setup(2), NEMO)
    qkv = [k for k in plain.parts["attention_qkv"].fwd if k.kind == "gemm"][0]
    qkv2 = [k for k in two.parts["attention_qkv"].fwd if k.kind == "gemm"][0]
    assert qkv2.m * 2 == qkv.m == 8192
    params = 10**8
    # 8 GPUs: d 8 at CP 1, d 4 x c 2 at CP 2: the same shard
    assert mk.optimizer_us(setup(), H100, NEMO, params) == mk.optimizer_us(setup(2), H100, NEMO, params)
    assert mk.optimizer_us(setup(world=2), H100, NEMO, params) > mk.optimizer_us(setup(2, world=4), H100, NEMO, params)


def test_the_ring_hides_each_exchange_behind_a_step_and_waits_for_the_last_dkv():
    s = setup(4)
    kv, _ = cp._chunk_bytes(s)
    gbps = 100.0
    x = kv / (gbps * 1e9) * 1e6  # one KV exchange, us
    assert cp.exposed_us(s, (10 * x, 10 * x), gbps) == pytest.approx((0.0, x))  # long steps: only the last dKV
    fwd, bwd = cp.exposed_us(s, (x / 2, x / 2), gbps)
    assert fwd == pytest.approx(3 * x / 2)  # c - 1 exchanges, each x / 2 longer than its step
    assert bwd == pytest.approx(x / 2 + 2 * (2 * x - x / 2) + x)  # KV, then KV + dKV twice, then dKV alone
    assert cp.exposed_us(setup(), (1.0, 1.0), gbps) == (0.0, 0.0)


@pytest.mark.parametrize("kind", ["all_gather", "a2a"])
def test_gathers_and_all_to_alls_wait_whole_and_grow_with_cp(kind):
    """Nothing hides them, however long the kernels: (c - 1)/c of the bytes through the link."""
    two, four = (cp.exposed_us(setup(c, kind), (1e9, 1e9), 100.0) for c in (2, 4))
    assert two[0] > 0 and two[1] > 0
    kv2, kv4 = cp._chunk_bytes(setup(2, kind))[0], cp._chunk_bytes(setup(4, kind))[0]
    # a rank's chunk halves from c 2 to 4; (c-1)/c * c chunks grows from 1 to 3/2 of a whole's
    scale = (3 / 4 * 4 * kv4) / (1 / 2 * 2 * kv2) if kind == "all_gather" else (3 / 4 * kv4) / (1 / 2 * kv2)
    assert four[0] == pytest.approx(two[0] * scale)


def test_the_cp_group_runs_on_nvlink_inside_a_server_and_on_the_nic_share_across():
    assert cp.link_gbps(setup(4, tp=2), 8, 8, 360.0, 48.0) == 360.0
    assert cp.link_gbps(setup(4, tp=4, world=16), 8, 4, 360.0, 48.0) == 24.0


def test_the_prediction_carries_the_exchange_in_the_attention_row():
    """What the attention waits for is added to its row's compute, nothing elsewhere."""
    s = setup(2, "all_gather")
    times = mk.row_times(s, H100, NEMO, parameters=megatron.local_parameters(s, 0))
    carried = predict.with_cp_exchange(times, s, DGX_H100)
    fwd, bwd = cp.exposed_us(s, times.cp_step_us, 450 * predict.NVLINK_EFFICIENCY)
    assert fwd > 0
    for kind, row in times.rows.items():
        added = (fwd, bwd, 0.0) if kind == "attention_proj" else (0.0, 0.0, 0.0)
        assert carried.rows[kind] == pytest.approx(tuple(a + b for a, b in zip(row, added)))
    assert predict.with_cp_exchange(times, setup(), DGX_H100) is times


def test_a_cp_rank_keeps_its_tokens_activations_and_shards_the_optimizer_over_dp_x_cp():
    params = {0: 10**9}
    one, two = (memory.estimate(s, params, dropout=False) for s in (setup(), setup(2)))
    assert two.optimizer == one.optimizer  # d 8 against d 4 x c 2
    assert two.activations * 2 == pytest.approx(one.activations, rel=1e-6)


def test_the_runs_file_reads_cp_and_counts_its_gpus(tmp_path):
    header = ",".join(validate.RUN_COLUMNS) + ",architecture,num_query_groups,precision,cp,cp_comm_type"
    row = ("tiny,4,1024,16,4096,8192,32000,{tp},1,{dp},1,16,none,false,1,H100-SXM,8,8,450,50,1.0,"
           "llama,4,bf16,{cp},{kind}")
    path = tmp_path / "runs.csv"
    path.write_text(header + "\n" + row.format(tp=2, dp=2, cp=2, kind="a2a") + "\n")
    run, = validate.read_runs(path)
    assert (run.setup.cp, run.setup.cp_comm_type, run.setup.world_size, run.setup.dp) == (2, "a2a", 8, 2)
    path.write_text(header + "\n" + row.format(tp=2, dp=2, cp=2, kind="a2a+p2p") + "\n")
    with pytest.raises(InputError, match="cp_comm_type") as err:
        validate.read_runs(path)
    assert err.value.line == 2
    path.write_text(header + "\n" + row.format(tp=1, dp=1, cp=3, kind="p2p") + "\n")
    with pytest.raises(InputError, match="2\\*cp=6"):
        validate.read_runs(path)


def test_unfused_attention_has_no_context_parallelism():
    s = dataclasses.replace(setup(2), distributed_optimizer=False)
    with pytest.raises(CommsweepError, match="fused attention"):
        mk.kernels(s, mk.software("2022"))


def test_a_cp_rank_s_aiob_times_are_a_share_of_the_whole_sequence_profile():
    """An AIOB profile times whole sequences (AICB has no CP); the Megatron schedule's CP
    rank takes every section at 1/c but the optimizer step."""
    from commsweep.aiob import roofline
    from commsweep.workload import megatron_times

    profile = roofline.profile(setup(), H100)[0]
    whole, two = (megatron_times.profile_times(profile, False, c) for c in (1, 2))
    assert two["optimizer"] == whole["optimizer"]
    for kind in ("attention_qkv", "attention_proj", "mlp_fc1", "output_layer"):
        assert two[kind] == pytest.approx(tuple(x / 2 for x in whole[kind]), abs=2)


def test_a_pipeline_with_cp_ranks_between_its_stages_crosses_servers_sooner():
    from commsweep.simulate import overlap

    s = TrainingSetup(model=MODEL, world_size=16, tp=2, pp=2, cp=2, global_batch=16)  # stages 8 ranks apart
    assert overlap.pipeline_link_gbps(s, 8, 8, 360.0, 48.0) == 48.0
