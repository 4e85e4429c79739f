"""Sweep expansion, naming, validation and the config schema."""

from __future__ import annotations

import copy

import pytest
import yaml

from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.setup.config_schema import validate_config

from conftest import REPO


def config(**axes) -> dict:
    cfg = {"sweep": {"model": ["gpt-7b"], "tp": [1, 2], "sp": [False, True], **axes}}
    validate_config(cfg)
    return cfg


def test_every_combination_is_a_point():
    points, invalid = sweep.expand(config(schedule=["aicb", "megatron"], network=["netA"]))
    assert invalid == []
    assert len(points) == 2 * 2 * 2
    assert len({p.point_key for p in points}) == 8


def test_defaults_are_filled_from_the_schema():
    cfg = {"sweep": {"tp": [2]}}
    validate_config(cfg)
    assert cfg["sweep"]["world_size"] == [16]
    assert cfg["networks"]["netA"]["nic_gbps"] == 48.5
    assert cfg["simulator"]["overlap"]["pp"] == 1
    assert cfg["skip_invalid"] is False


def test_keys_name_their_values_and_share_work():
    cfg = config(network=["netA", "netB"], aiob=[True])
    cfg["networks"]["netB"] = {"gpus_per_server": 8, "nics_per_server": 4, "nvlink_gbps": 200, "nic_gbps": 25}
    points, _ = sweep.expand(cfg)
    p = next(p for p in points if p.tp == 2 and p.sp and p.network == "netB")
    assert p.point_key == "gpt-7b_ws16_tp2_pp1_ep1_sp1_mb1_gb16_seq2048_megatron_aiob__netB"
    assert p.workload_key == "gpt-7b_ws16_tp2_pp1_ep1_sp1_mb1_gb16_seq2048_megatron_aiob"
    assert p.profile_key == "gpt-7b_H100-SXM_tp2_ep1_sp1_mb1_seq2048"
    # Two networks, one workload; the profile ignores DP and the schedule.
    assert len({q.workload_key for q in points}) == len(points) // 2


@pytest.mark.parametrize(
    "axes, words",
    [
        ({"tp": [3]}, "tp=3 does not divide the 32 attention heads"),
        ({"world_size": [12], "tp": [8]}, "world_size=12 is not divisible by tp*pp=8"),
        ({"global_batch": [4]}, "fewer than one micro-batch per iteration"),
        ({"global_batch": [24]}, "not a multiple of micro_batch*dp"),
        ({"ep": [2]}, "ep=2 needs an MoE model"),
        ({"pp": [3], "world_size": [24]}, "pp=3 does not divide num_layers=32"),
        ({"model": ["mixtral-8x7b"], "ep": [3]}, "ep=3 does not divide the 8 experts"),
        ({"model": ["mixtral-8x7b"], "schedule": ["megatron"], "tp": [2], "sp": [False]},
         "megatron-core refuses MoE with tensor parallelism but without sequence parallelism"),
        ({"model": ["mixtral-8x7b"], "schedule": ["aicb"], "sp": [False]}, "AICB refuses MoE without sequence parallelism"),
    ],
)
def test_invalid_points_name_the_point_and_the_rule(axes, words):
    base = {"tp": [1], "sp": [False]}
    base.update(axes)
    cfg = config(**base)
    with pytest.raises(ConfigError) as info:
        sweep.points_from_config(cfg)
    message = str(info.value)
    assert words in message
    assert "model=" in message and "tp=" in message  # the point is named


def test_skip_invalid_drops_and_lists():
    cfg = config(tp=[1, 3])
    cfg["skip_invalid"] = True
    points, invalid = sweep.points_from_config(cfg)
    assert {p.tp for p in points} == {1}
    assert all(bad.values["tp"] == 3 for bad in invalid)
    table = sweep.table_csv(points, invalid)
    assert "skipped: tp=3 does not divide" in table


def test_unknown_model_and_network_are_config_errors():
    with pytest.raises(ConfigError, match="sweep.network: unknown network 'netZ'"):
        sweep.expand(config(network=["netZ"]))
    with pytest.raises(ConfigError, match="unknown model 'gpt-9b'"):
        sweep.expand(config(model=["gpt-9b"]))


def test_custom_model_from_a_preset():
    cfg = config(model=["gpt-7b-short"])
    cfg["models"] = {"gpt-7b-short": {"base": "gpt-7b", "num_layers": 4}}
    points, _ = sweep.expand(cfg)
    assert points[0].setup.model.num_layers == 4
    assert points[0].setup.model.hidden_size == 4096


def test_bad_custom_model_field_names_the_key():
    cfg = config(model=["m"])
    cfg["models"] = {"m": {"base": "gpt-7b", "layers": 4}}
    with pytest.raises(ConfigError, match=r"models\.m\.layers: unknown key; expected one of base, source, num_layers"):
        sweep.expand(cfg)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["sweep"].__setitem__("tp", [0]), "sweep.tp[0]"),
        (lambda c: c["sweep"].__setitem__("tp", "2"), "sweep.tp"),
        (lambda c: c["sweep"].__setitem__("sp", ["yes"]), "sweep.sp[0]"),
        (lambda c: c["sweep"].__setitem__("schedule", ["aicbx"]), "sweep.schedule[0]"),
        (lambda c: c.__setitem__("colour", 1), "colour"),
        (lambda c: c["sweep"].__setitem__("colour", 1), "sweep.colour"),
        (lambda c: c["networks"]["netA"].pop("nic_gbps"), "networks.netA.nic_gbps"),
        (lambda c: c["networks"]["netA"].__setitem__("nic_gbps", -1), "networks.netA.nic_gbps"),
    ],
)
def test_schema_errors_name_the_key(mutate, key):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg = copy.deepcopy(cfg)
    mutate(cfg)
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, source="c.yaml")
    assert str(info.value).startswith(f"c.yaml: {key}: ")


def test_a_bandwidth_simai_reads_as_zero_names_its_key():
    """1e-50 GB/s is positive, but SimAI reads it as float32: 0. The network says so, naming the key."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["networks"]["netB"]["nvlink_gbps"] = 1e-50
    validate_config(cfg)
    with pytest.raises(ConfigError, match=r"^networks\.netB\.nvlink_gbps: must be a positive number, got 1e-50$"):
        sweep.expand(cfg)


def test_default_config_is_valid():
    cfg = sweep.load_config(REPO / "config" / "config.yaml")
    points, invalid = sweep.points_from_config(cfg)
    assert points and not invalid


def test_load_config_reports_yaml_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sweep:\n  tp: [1, 2\n")
    # The file, line and column where YAML found the problem.
    with pytest.raises(ConfigError, match=r"c\.yaml:3:1: invalid YAML: expected ',' or ']', but got '<stream end>'"):
        sweep.load_config(path)
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        sweep.load_config(path)


def test_the_timeline_draws_an_audited_aicb_point_on_the_aiob_path_or_the_one_named():
    cfg = config(schedule=["megatron", "aicb"], aiob=[False, True])
    points, _ = sweep.expand(cfg)
    audited = sweep.audited_points(points)
    assert audited == points  # dense points: the Megatron schedule describes each
    chosen = sweep.timeline_point(points, audited, cfg)
    assert (chosen.schedule, chosen.aiob, chosen.tp) == ("aicb", True, 2)
    named = points[0].point_key
    assert sweep.timeline_point(points, audited, {**cfg, "analysis": {"timeline_point": named}}) is points[0]
    with pytest.raises(ConfigError, match=r"^analysis\.timeline_point: 'nowhere' is not a point of this sweep"):
        sweep.timeline_point(points, audited, {**cfg, "analysis": {"timeline_point": "nowhere"}})
    with pytest.raises(ConfigError, match="has no audit"):
        sweep.timeline_point(points, audited[1:], {**cfg, "analysis": {"timeline_point": named}})
