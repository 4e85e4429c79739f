"""The distributed optimizer's buckets as sweep axes (sweep.overlap_grad_reduce,
overlap_param_gather, ddp_bucket_size): points, keys, tables, refusals, the run's digest, the
simulate job, and the difference by cause splitting AICB's one DP row from Megatron's buckets."""

from __future__ import annotations

import copy

import pytest

from commsweep.analysis.audit_csv import AuditRow
from commsweep.analysis.causes.difference import parts
from commsweep.analysis.causes.simulated import Simulated
from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.orchestration.provenance import config_digest
from commsweep.setup.points import PointRow
from commsweep.simulate.stage import SIMULATE
from test_causes import default_config


def llama(**axes) -> dict:
    config = default_config(model=["llama-7b"], tp=[2], sp=[True], aiob=[False], network=["netA"],
                            seq_length=[4096], global_batch=[16])
    config["sweep"].update(axes)
    return config


def test_the_defaults_keep_the_keys_tables_and_digest_of_a_sweep_without_the_axes():
    bare = llama()
    for key in ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size"):
        bare["sweep"].pop(key, None)
    plain, _ = sweep.expand(bare)
    with_axes, _ = sweep.expand(llama(overlap_grad_reduce=[False], overlap_param_gather=[False]))
    assert [p.point_key for p in plain] == [p.point_key for p in with_axes]
    assert sweep.table_csv(plain) == sweep.table_csv(with_axes)
    assert all(p.buckets is None and not p.setup.overlap_grad_reduce for p in with_axes)
    assert config_digest(bare) == config_digest(llama(overlap_grad_reduce=[False], overlap_param_gather=[False],
                                                      ddp_bucket_size=None))
    assert config_digest(bare) != config_digest(llama(overlap_grad_reduce=[True]))


def test_the_axes_name_points_where_overlap_is_on_and_list_the_point_without_it_once():
    points, invalid = sweep.expand(llama(overlap_grad_reduce=[False, True], overlap_param_gather=[False, True],
                                         ddp_bucket_size=[None, 1000000]))
    assert not invalid
    megatron = {p.point_key.split("_megatron")[0].split("seq4096")[1]: p for p in points if p.schedule == "megatron"}
    assert sorted(megatron) == ["", "_ogr", "_ogr_bkt1000000", "_ogr_opg", "_ogr_opg_bkt1000000"]
    one = megatron["_ogr_opg_bkt1000000"].setup
    assert (one.overlap_grad_reduce, one.overlap_param_gather, one.ddp_bucket_size) == (True, True, 1_000_000)
    assert one.problems() == []
    header = sweep.table_csv(points).splitlines()[0].split(",")
    assert header[header.index("nic_gbps") + 1:header.index("nic_gbps") + 4] == list(
        ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size"))
    rows = {PointRow.of(p).point: PointRow.of(p) for p in points}
    row = rows[megatron["_ogr"].point_key]
    assert (row.overlap_grad_reduce, row.overlap_param_gather, row.ddp_bucket_size) == (True, False, None)
    assert rows[megatron["_ogr_bkt1000000"].point_key].ddp_bucket_size == 1_000_000


@pytest.mark.parametrize("axes, key, message", [
    (dict(overlap_param_gather=[True]), "sweep.overlap_param_gather", "needs overlap_grad_reduce"),
    (dict(ddp_bucket_size=[1000]), "sweep.ddp_bucket_size", "needs overlap_grad_reduce"),
    (dict(overlap_grad_reduce=[True], ddp_bucket_size=[0]), "sweep.ddp_bucket_size", "positive integers"),
    (dict(overlap_grad_reduce=["yes"]), "sweep.overlap_grad_reduce", "true or false"),
])
def test_bad_values_are_refused_naming_the_key(axes, key, message):
    config = llama()
    config["sweep"].update(axes)
    with pytest.raises(ConfigError, match=message) as err:
        sweep.expand(config)
    assert err.value.key == key


def test_only_megatrons_simulation_hides_the_buckets():
    config = llama(overlap_grad_reduce=[True], overlap_param_gather=[False, True])
    points, _ = sweep.expand(config)
    jobs = {(p.schedule, p.setup.overlap_param_gather): SIMULATE.job(p, config, ("w",), ("e", "c", "t"))
            for p in points}
    assert jobs[("megatron", False)].bucket_overlap == "grads"
    assert jobs[("megatron", True)].bucket_overlap == "grads+params"
    assert {jobs[("aicb", False)].bucket_overlap, jobs[("aicb", True)].bucket_overlap} == {"none"}
    plain = llama()
    job = SIMULATE.job(sweep.expand(plain)[0][0], plain, ("w",), ("e", "c", "t"))
    assert "--bucket-overlap" not in SIMULATE.argv(job)


def _finding(kind: str, bucket: int, expected: int, found: int | None = None) -> AuditRow:
    return AuditRow(None, "iteration/dp", "wg", kind, "reducescatter", "DP", expected,
                    "reducescatter" if found is not None else "", "DP" if found is not None else "", found,
                    found_name="grad_param_comm" if found is not None else "",
                    expected_name=f"dp_grad_reducescatter_bucket{bucket}",
                    cause="dp_sync_sized_by_mock_params" if kind == "size" else "dp_buckets")


def test_aicbs_one_row_against_the_buckets_splits_into_its_bytes_and_the_buckets_exposed_time():
    """AICB's 1200 MB row (exposed 12 ms) against three buckets of 300 + 400 + 400 MB
    (exposed 0.5, 1 and 1 ms): its parameter count takes 100 MB and the 1 ms its row spends
    on them (12 * 100 / 1200); dp_buckets takes 11 - 2.5 = 8.5 ms and no bytes; the parts add
    up to the findings' own difference."""
    mb = 1 << 20
    items = [_finding("size", 0, 300 * mb, 1200 * mb), _finding("missing", 1, 400 * mb),
             _finding("missing", 2, 400 * mb)]
    found = Simulated(by_collective={("wg", "reducescatter", "DP", 1200 * mb): 12_000_000})
    expected = Simulated(by_collective={("wg", "reducescatter", "DP", 300 * mb): 500_000,
                                        ("wg", "reducescatter", "DP", 400 * mb): 1_000_000})
    got = {p.cause: (p.bytes, p.exposed_ns) for p in parts(items, found, expected)}
    assert got == {"dp_sync_sized_by_mock_params": (100 * mb, 1_000_000), "dp_buckets": (0, 8_500_000)}
    assert sum(b for b, _ in got.values()) == 1200 * mb - 1100 * mb
    assert sum(e for _, e in got.values()) == 12_000_000 - 2_500_000
    # untimed: the same bytes, no time
    assert {p.cause: p.bytes for p in parts(copy.deepcopy(items), None, None)} == {
        "dp_sync_sized_by_mock_params": 100 * mb, "dp_buckets": 0}
