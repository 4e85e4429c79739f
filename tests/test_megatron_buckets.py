"""The distributed optimizer's gradient buckets (workload/megatron_buckets.py) and the
data-parallel rows they give; the trace test runs megatron-core with overlap_grad_reduce."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.trace import compare, runner, scale
from commsweep.workload import megatron
from commsweep.workload.megatron_buckets import Tensor, default_bucket_size, split, stage_buckets
from commsweep.workload.megatron_parameters import dense_parameters, expert_parameters

MISSING = runner.missing_dependencies()


def test_split_pads_params_to_64_and_buckets_to_lcm_dp_128_in_reverse_order():
    """Tensors a=100, b=30, c=10 (registration order), bucket size 120, DP 3, distributed
    optimizer. Reverse order: c at 0..10; b starts at pad64(10) = 64, ends 94 (< 120, no
    close); a starts at pad64(94) = 128, ends 228 >= 120: bucket 0 ends at
    pad(228, lcm(3, 128) = 384) = 384, so 384 elements holding 140 parameters."""
    tensors = [Tensor("a", 100, 0), Tensor("b", 30, 1), Tensor("c", 10, 2)]
    (bucket,) = split(tensors, 120, 3)
    assert (bucket.numel, bucket.params, bucket.tensors, bucket.layers) == (384, 140, ("c", "b", "a"), (2, 1, 0))


def test_split_closes_a_bucket_once_it_reaches_the_size():
    """Sizes 256 each, bucket size 300, DP 2 (divisor lcm(2, 128) = 128). Reverse: t3 at
    0..256 (< 300); t2 at 256..512 >= 300: bucket 0 = 512. t1 at 512..768 (256 < 300);
    t0 at 768..1024 (512 >= 300): bucket 1 = 512. Without the distributed optimizer the same
    cut, no padding; without a size, one bucket of 1024."""
    tensors = [Tensor(f"t{i}", 256, i) for i in range(4)]
    assert [b.numel for b in split(tensors, 300, 2)] == [512, 512]
    assert [b.tensors for b in split(tensors, 300, 2)] == [("t3", "t2"), ("t1", "t0")]
    odd = [Tensor(f"t{i}", 100, i) for i in range(3)]
    # Plain DDP: 0..100, 100..200 (>= 150: bucket 200), 200..300 (bucket 100).
    assert [b.numel for b in split(odd, 150, 2, distributed_optimizer=False)] == [200, 100]
    # Distributed optimizer: 0..100, pad64 -> 128..228 (>= 150): pad(228, 128) = 256;
    # then 256..356 -> pad(356, 128) = 384: 128 elements.
    assert [b.numel for b in split(odd, 150, 2)] == [256, 128]
    assert [b.numel for b in split(tensors, None, 2)] == [1024]


def test_shared_embedding_gets_a_bucket_of_its_own():
    """A tied embedding with pp > 1 (shared_embedding) closes the bucket before it and its
    own, whatever the size: 10 | 50 | 10 with DP 1 -> 128, 128, 128 (each padded to 128)."""
    tensors = [Tensor("x", 10, 0), Tensor("emb", 50, shared_embedding=True), Tensor("y", 10, 1)]
    assert [(b.tensors, b.numel) for b in split(tensors, None, 1)] == [(("y",), 128), (("emb",), 128), (("x",), 128)]
    # Plain DDP reduces by all-reduce: no split.
    assert [b.tensors for b in split(tensors, None, 1, distributed_optimizer=False)] == [("y", "emb", "x")]


def test_default_bucket_size_is_megatrons():
    """max(40M, 1M * dp): 40M up to DP 40, then 1M per rank."""
    assert (default_bucket_size(8), default_bucket_size(40), default_bucket_size(64)) == (40_000_000, 40_000_000,
                                                                                          64_000_000)


SETUPS = {
    "gpt-13b": TrainingSetup(model=PRESETS["gpt-13b"], world_size=64, tp=4, pp=2, global_batch=64),
    "llama-70b": TrainingSetup(model=PRESETS["llama-70b"], world_size=256, tp=8, pp=4, sp=True, global_batch=256),
    "mixtral": TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=64, tp=2, pp=2, ep=4, global_batch=64),
    "vpp": TrainingSetup(model=PRESETS["llama-7b"], world_size=32, tp=2, pp=2, global_batch=64, virtual_pipeline=2),
}


@pytest.mark.parametrize("name", list(SETUPS))
def test_buckets_hold_every_parameter_once(name):
    base = SETUPS[name]
    for overlap in (False, True):
        s = dataclasses.replace(base, overlap_grad_reduce=overlap)
        for stage in range(s.pp):
            dense, experts = stage_buckets(s, stage), stage_buckets(s, stage, experts=True)
            assert sum(b.params for b in dense) == dense_parameters(s, stage)
            assert sum(b.params for b in experts) == expert_parameters(s, stage)
            for buckets, group in ((dense, s.dp_cp), (experts, s.expert_dp)):
                assert all(b.numel % group == 0 and b.numel % 128 == 0 for b in buckets)
                assert all(0 <= b.numel - b.params < 64 * len(b.tensors) + 128 * group for b in buckets)
            if overlap and stage == 0:
                size = default_bucket_size(s.dp)
                # a bucket closes once it reaches the size (padding included), or before a tied
                # embedding's bucket of its own
                for b, after in zip(dense, dense[1:]):
                    assert b.numel >= size or after.tensors == ("embedding.word_embeddings.weight",)
            if not overlap or stage > 0:
                # no bucketing: one per model chunk, and one more for a tied embedding with pp > 1
                tied = s.model.tie_embeddings and s.pp > 1 and stage in (0, s.pp - 1)
                assert len(dense) == s.virtual_pipeline + tied


def _dp_rows(sched):
    return [(b.name, b.wg) for b in sched.blocks if b.micro_batch is None and b.wg is not None and
            b.wg.group in ("DP", "DP_EP")]


@pytest.mark.parametrize("name", list(SETUPS))
def test_overlap_writes_one_row_per_bucket_of_the_padded_size(name):
    s = dataclasses.replace(SETUPS[name], overlap_grad_reduce=True)
    sched = megatron.schedule(s, stage=0)
    rows = _dp_rows(sched)
    dense = stage_buckets(s, 0)
    scatters = [c for n, c in rows if n.startswith("dp_grad_reducescatter")]
    gathers = [c for n, c in rows if n.startswith("dp_param_allgather")]
    # each reduce where its bucket fills (tests/test_buckets_placement.py), so with
    # interleaving the chunks' buckets interleave too; the gathers last bucket first
    assert sorted(c.bytes for c in scatters) == sorted(4 * b.numel for b in dense)
    assert [c.bytes for c in gathers] == [2 * b.numel for b in reversed(dense)]
    plain = _dp_rows(megatron.schedule(SETUPS[name], stage=0))
    for collective in ("reducescatter", "allgather"):
        for group in ("DP", "DP_EP"):
            ours = sum(c.bytes for _, c in rows if (c.collective, c.group) == (collective, group))
            theirs = sum(c.bytes for _, c in plain if (c.collective, c.group) == (collective, group))
            assert ours >= theirs and (ours > 0) == (theirs > 0)  # the same, plus the buckets' padding
    notes = [u for u in sched.unexpressed if u.in_rows and u.module == "ddp.grad_reducescatter"]
    assert len(notes) == len(dense) and "backward pass" in notes[0].why


def test_without_the_flags_the_rows_are_unchanged():
    s = SETUPS["gpt-13b"]
    names = [b.name for b in megatron.schedule(s, stage=0).blocks if b.micro_batch is None]
    assert "dp_grad_reducescatter" in names and not any("bucket" in n for n in names)


def test_bucket_options_are_checked():
    s = SETUPS["gpt-13b"]
    assert dataclasses.replace(s, ddp_bucket_size=10**6).problems() == [
        "ddp_bucket_size needs overlap_grad_reduce (without it megatron uses one bucket)"]
    assert any("overlap_param_gather" in p for p in dataclasses.replace(s, overlap_param_gather=True).problems())
    assert dataclasses.replace(s, overlap_grad_reduce=True, overlap_param_gather=True,
                               ddp_bucket_size=10**6).problems() == []


def _traced_setups() -> list[TrainingSetup]:
    """Two tiny setups of 4 processes, each with a bucket size of a third of stage 0's
    parameters: TP 2 x DP 2 with SP, and PP 2 x DP 2 of a tied-embedding GPT (stage 1 is
    not bucketed; each stage's copy of the embedding gets a bucket of its own), the second
    with overlap_param_gather too."""
    out = []
    for tp, pp in ((2, 1), (1, 2)):
        big = TrainingSetup(model=PRESETS["gpt-7b"], world_size=16 * tp * pp, tp=tp, pp=pp, sp=tp > 1, global_batch=64)
        small = scale.scaled_setup(big, dp=2)
        out.append(dataclasses.replace(small, overlap_grad_reduce=True, overlap_param_gather=pp > 1,
                                       ddp_bucket_size=dense_parameters(small, 0) // 3))
    return out


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_traced_buckets_match_the_schedules():
    """megatron-core with overlap_grad_reduce, the distributed optimizer and a small bucket
    size on 4 gloo processes, traced at its second step: on every stage, each bucket's
    reduce-scatter and all-gather, in megatron's order and of the buffer's padded size, as
    ``stage_buckets`` computes them; each reduce-scatter in the backward pass, after the
    layer the schedule places it after (TP 2: the layers' TP collectives tell), and with
    overlap_param_gather each all-gather in the forward pass where the schedule says; every
    row of the comparison matches."""
    setups = _traced_setups()
    for setup, trace in zip(setups, runner.run(setups, timeout=900)):
        for stage in range(setup.pp):
            expected = [b.numel for b in stage_buckets(setup, stage)]
            assert len(expected) >= (3 if stage == 0 else 1)
            records = [r for r in trace.rank_records(trace.first_rank_of_stage(stage))
                       if r.group == "DP" and r.group_size > 1]
            reduces = [r for r in records if r.collective == "reducescatter"]
            gathers = [r for r in records if r.collective == "allgather"]
            assert [r.elements for r in reduces] == expected, (setup.pp, stage)
            assert {r.phase for r in reduces} == {"backward"}
            if setup.overlap_param_gather:  # dispatched in forward, the first-needed bucket first
                assert sorted(r.elements for r in gathers) == sorted(expected)
                assert {r.phase for r in gathers} == {"forward"}
            else:
                assert [r.elements for r in gathers] == expected, (setup.pp, stage)
        rows = compare.compare(trace)
        assert {r.status for r in rows} == {"match"}, [r for r in rows if r.status != "match"]
        placed = [r.layer for r in rows if r.module == "ddp.grad_reducescatter"]
        assert (setup.tp == 1) == all(layer is None for layer in placed)


def _parse(argv):
    import argparse

    from commsweep.setup.arguments import add_schedule_arguments, add_training_arguments, setup_from_args

    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    add_schedule_arguments(parser)
    return setup_from_args(parser.parse_args(argv))


def test_bucket_flags_parse_and_round_trip_through_the_command_line():
    from commsweep.setup.arguments import same_setup, to_commsweep_argv

    base = ["--model=gpt-13b", "--world_size=64", "--tensor_model_parallel_size=4", "--global_batch=64"]
    s = _parse(base + ["--overlap-grad-reduce", "--overlap-param-gather", "--ddp-bucket-size=1000000"])
    assert (s.overlap_grad_reduce, s.overlap_param_gather, s.ddp_bucket_size) == (True, True, 1_000_000)
    assert same_setup(_parse(to_commsweep_argv(s)), s)
    # AICB's spelling is the same switch
    assert _parse(base + ["--overlap_grad_reduce"]).overlap_grad_reduce
    plain = _parse(base)
    assert not plain.overlap_grad_reduce and "--overlap-grad-reduce" not in to_commsweep_argv(plain)


def test_expert_buckets_keep_the_expert_group_note():
    """Mixtral with an expert TP of 1 under TP 2: the expert buckets' rows say that SimAI's
    DP_EP is not megatron's expert-data-parallel group (world/(etp*ep*pp) = 64/8 = 8 ranks,
    SimAI's dp/ep = 16/4 = 4)."""
    s = dataclasses.replace(SETUPS["mixtral"], etp=1, overlap_grad_reduce=True)
    notes = [u.why for u in megatron.schedule(s, stage=0).unexpressed if u.module == "ddp.expert_grad_reducescatter"]
    assert len(notes) == len(stage_buckets(s, 0, experts=True)) > 1
    assert all("= 8 ranks" in n and "dp/ep = 4" in n for n in notes)
