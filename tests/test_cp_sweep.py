"""Context parallelism answered by the sweep: the cp axes, their refusals, the generate job,
the audit's CP causes adding up on a real CP point, and the CP group's volumes."""

from __future__ import annotations

import pytest

from commsweep.analysis import audit, causes, volumes
from commsweep.base import paths
from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.setup.arguments import to_commsweep_argv
from commsweep.workload.generate import build
from commsweep.workload.stage import GENERATE, workload_text
from test_causes import default_config, point_totals, run_sweep


def llama(**axes) -> dict:
    config = default_config(model=["llama-7b"], tp=[2], sp=[True], aiob=[False], network=["netA"],
                            seq_length=[4096], global_batch=[16])
    config["sweep"].update(axes)
    return config


def test_cp_1_keeps_the_keys_and_tables_of_a_sweep_without_the_axis():
    plain, _ = sweep.expand(llama())
    with_axis, _ = sweep.expand(llama(cp=[1]))
    assert [p.point_key for p in plain] == [p.point_key for p in with_axis]
    assert sweep.table_csv(plain) == sweep.table_csv(with_axis)
    assert all(p.cp is None for p in with_axis)


def test_a_cp_axis_names_points_above_1_only_and_lists_cp_1_once():
    points, invalid = sweep.expand(llama(cp=[1, 2], cp_comm_type=["p2p", "a2a", "all_gather"]))
    assert not invalid
    plain = {p.point_key for p in sweep.expand(llama())[0]}
    ones = [p for p in points if p.cp == 1]
    assert {p.point_key for p in ones} == plain and {p.cp_comm_type for p in ones} == {"p2p"}
    keys = {p.point_key for p in points if p.cp == 2}
    assert "llama-7b_ws16_tp2_pp1_ep1_sp1_mb1_gb16_seq4096_cp2_megatron__netA" in keys
    assert "llama-7b_ws16_tp2_pp1_ep1_sp1_mb1_gb16_seq4096_cp2a2a_aicb__netA" in keys
    assert "llama-7b_ws16_tp2_pp1_ep1_sp1_mb1_gb16_seq4096_cp2ag_megatron__netA" in keys
    header = sweep.table_csv(points).splitlines()[0].split(",")
    assert header[header.index("nic_gbps") + 1:header.index("nic_gbps") + 3] == ["cp", "cp_comm_type"]
    assert len(points) == 2 * (1 + 3)
    cp2 = next(p for p in points if p.cp == 2 and p.schedule == "megatron" and p.cp_comm_type == "p2p")
    assert (cp2.setup.cp, cp2.setup.dp, cp2.setup.num_microbatches) == (2, 4, 4)


def test_an_aicb_point_at_cp_2_is_aicb_ignoring_cp():
    points, _ = sweep.expand(llama(cp=[2]))
    aicb = next(p for p in points if p.schedule == "aicb")
    assert aicb.ignores_cp and "(AICB ignores CP)" in aicb.describe()
    megatron = next(p for p in points if p.schedule == "megatron")
    job = GENERATE.job(megatron, llama(cp=[2]), (None,), ("w.txt",))
    assert job.setup.cp == 2  # Megatron's job carries CP, and its command line says so
    argv = GENERATE.argv(job)
    assert "--context-parallel-size=2" in argv and "--cp-comm-type=p2p" in argv
    # AICB's job is what AICB runs: the setup without CP, no CP flags.
    job = GENERATE.job(aicb, llama(cp=[2]), (None,), ("w.txt",))
    assert job.setup.cp == 1 and not [a for a in GENERATE.argv(job) if "context-parallel" in a]
    from dataclasses import replace

    assert workload_text(job) == build(replace(aicb.setup, cp=1), "aicb").render()
    assert build(aicb.setup, "aicb").header.ga == 2  # 16 / (1 x DP 8): DP took the CP ranks


@pytest.mark.parametrize("axes, key, message", [
    (dict(cp=[0]), "sweep.cp", "values must be positive integers, got 0"),
    (dict(cp=[2], cp_comm_type=["a2a+p2p"]), "sweep.cp_comm_type", "a2a+p2p needs hierarchical sizes"),
])
def test_bad_cp_values_name_their_key(axes, key, message):
    config = llama()
    config["sweep"].update(axes)  # past the schema, as a config built in Python would be
    with pytest.raises(ConfigError) as err:
        sweep.expand(config)
    assert err.value.key == key and message in str(err.value)


def test_invalid_cp_points_say_why():
    _, invalid = sweep.expand(llama(cp=[4], tp=[8]))
    assert {r for bad in invalid for r in bad.reasons} == {"world_size=16 is not divisible by tp*cp*pp=32"}
    # Megatron's point is valid (DP 4, one micro-batch); AICB, without CP, has DP 8 and no micro-batch.
    points, invalid = sweep.expand(llama(cp=[2], global_batch=[4]))
    assert [p.schedule for p in points] == ["megatron"]
    [bad] = invalid
    assert bad.values["schedule"] == "aicb" and bad.values["cp"] == 2
    assert bad.reasons == ("AICB ignores CP, and without it global_batch=4 gives fewer than one micro-batch per "
                           "iteration (needs at least micro_batch*dp = 1*8 = 8)",)
    with pytest.raises(ConfigError, match=r"1 invalid sweep point\(s\)"):
        sweep.points_from_config(llama(cp=[2], global_batch=[4]))


@pytest.fixture(scope="module")
def cp2(tmp_path_factory):
    """A CP 2 setting (the ring) made as the rules make it: AICB's default path and Megatron's schedule."""
    results = tmp_path_factory.mktemp("cp2") / "results"
    run_sweep(results, llama(cp=[2]))
    return results


def test_the_causes_add_up_on_a_cp_point(cp2):
    found = causes.sweep_causes(cp2 / "sweep.csv", paths.PointFiles.under(cp2))
    [pc] = found
    assert pc.point.cp == 2 and pc.partner.endswith("_cp2_megatron__netA")
    megatron = next(p for p in sweep.points_from_config(llama(cp=[2]))[0] if p.schedule == "megatron")
    exchange = sum(v.payload_bytes for v in volumes.context_parallel(megatron.setup))
    # llama-7b: 32 layers x 4 micro-batches x (1 forward + 2 backward) ring steps of one KV chunk
    # (2 x 2048 tokens x 16 heads x 128 x 2 bytes = 16 MiB).
    assert exchange == 32 * 4 * 3 * 16 * 2**20
    want_bytes, want_ns = point_totals(cp2, pc.point.cells, {"workload": megatron.workload_key,
                                                            "point": megatron.point_key})
    assert sum(r.bytes for r in pc.rows) == want_bytes - exchange
    assert sum(r.exposed_ns for r in pc.rows) == want_ns  # the exchange included, as Megatron's simulation prices it
    assert "unattributed" not in {r.cause for r in pc.rows}
    ring = [r for r in pc.rows if r.cause == "cp_attention_exchange_missing"]
    # Without compute (no AIOB) nothing hides the ring: each step sends 16 MiB over NVLink (CP 2
    # x TP 2 on one server of netA), 360 GiB/s: 43,403 ns.
    step = round(16 * 2**20 / (360 * 2**30) * 1e9)
    assert {(r.phase, r.collective, r.group, r.rows, r.exposed_ns) for r in ring} == {
        ("fwd", "sendrecv", "CP", 128, -128 * step), ("ig", "sendrecv", "CP", 256, -256 * step)}
    assert sum(r.bytes for r in ring) == -exchange

    def total(cause):
        return sum(r.bytes for r in pc.rows if r.cause == cause)

    # AICB's 2 micro-batches of whole sequences against Megatron's 4 of half: what it has is twice
    # Megatron's, the rest is missing.
    assert total("cp_microbatches_merged") < 0 < total("cp_sized_on_whole_sequence")


def test_the_megatron_workload_misses_the_exchange_too(cp2):
    megatron = next(p for p in sweep.points_from_config(llama(cp=[2]))[0] if p.schedule == "megatron")
    from commsweep.workload import format as wf

    findings = audit.audit(wf.read(paths.workload_file(cp2, megatron.workload_key)), megatron.setup)
    assert {f.cause for f in findings} == {"cp_attention_exchange_missing"}
    assert sum(-f.delta_bytes for f in findings) == sum(v.payload_bytes
                                                        for v in volumes.context_parallel(megatron.setup))


def test_the_cp_groups_volumes_by_comm_type():
    points, _ = sweep.expand(llama(cp=[2], cp_comm_type=["a2a"], schedule=["megatron"]))
    table = {(v.phase, v.collective, v.group): v for v in volumes.context_parallel(points[0].setup)}
    assert set(table) == {("fwd", "alltoall", "CP"), ("ig", "alltoall", "CP")}
    # Q, K, V and O forward, per layer and micro-batch: 32 x 4 x 4 all-to-alls on 2 GPUs.
    assert table[("fwd", "alltoall", "CP")].count == 512 and table[("fwd", "alltoall", "CP")].group_size == 2
    assert volumes.context_parallel(sweep.expand(llama())[0][0].setup) == []


def test_the_long_context_sweeps_plan():
    from commsweep.orchestration.batch import unit_of
    from commsweep.setup.points import PointRow
    from conftest import REPO

    config = sweep.load_config(REPO / "config" / "long-context.yaml")
    points, invalid = sweep.points_from_config(config)
    assert len(points) == 240 and len(invalid) == 400
    # a2a scatters a TP rank's 8/TP key/value groups over CP; TP x CP x PP beyond 16 GPUs; the
    # rest do not fit an H100 (skip_unfit).
    reasons = {r for bad in invalid for r in bad.reasons}
    assert {r for r in reasons if not r.startswith("needs ")} == {
        "the all-to-all of cp_comm_type a2a scatters the 1 query groups of a TP rank over 2 ranks: they must divide",
        "the all-to-all of cp_comm_type a2a scatters the 1 query groups of a TP rank over 4 ranks: they must divide",
        "world_size=16 is not divisible by tp*cp*pp=32", "world_size=16 is not divisible by tp*cp*pp=64"}
    # The 70B fits 64 GPUs at sequence 32768 only with PP 2 and CP 4 (a CP rank keeps s/cp tokens).
    assert {(p.setup.pp, p.setup.cp) for p in points
            if p.setup.model.name == "llama3-70b" and p.setup.seq_length == 32768} == {(2, 4)}
    partners = causes.megatron_partners([PointRow.of(p) for p in points])
    by_key = {p.point_key: p for p in points}
    aicb = [p for p in points if p.schedule == "aicb"]
    assert len(partners) == len(aicb) == 120 and sum(p.ignores_cp for p in aicb) == 94
    for key, partner in partners.items():
        mine, theirs = by_key[key], by_key[partner]
        assert (mine.setup.cp, mine.setup.cp_comm_type, mine.aiob) == (theirs.setup.cp, theirs.setup.cp_comm_type,
                                                                       theirs.aiob)
        assert unit_of(mine) == unit_of(theirs)  # one batch holds the pair


def test_the_audit_table_shows_the_cp_groups_volumes(cp2, tmp_path):
    from commsweep.orchestration import cli

    megatron = next(p for p in sweep.points_from_config(llama(cp=[2]))[0] if p.schedule == "megatron")
    out = tmp_path / "audit.txt"
    assert cli.main(["audit", str(paths.workload_file(cp2, megatron.workload_key)), *to_commsweep_argv(megatron.setup),
                     "--format", "table", "-o", str(out)]) == 0
    text = out.read_text()
    head, table = text.split("the context-parallel exchange Megatron sends per iteration (in no workload file):\n")
    assert "cp_attention_exchange_missing" in head
    lines = table.splitlines()
    assert lines[0].split() == ["phase", "collective", "group", "size", "count", "payload", "MiB", "wire", "MiB/rank"]
    assert lines[2].split() == ["fwd", "sendrecv", "CP", "2", "128", "2,048.00", "2,048.00"]
    assert lines[3].split() == ["ig", "sendrecv", "CP", "2", "256", "4,096.00", "4,096.00"]


def test_a_workload_of_neither_view_is_refused(cp2):
    """Audited with CP 4, Megatron's CP 2 workload has the micro-batches of neither view: CP 4's
    (8) nor AICB's, without CP (2). (AICB's own is the same for every CP: it is accepted.)"""
    from dataclasses import replace

    from commsweep.base.errors import InputError
    from commsweep.workload import format as wf

    aicb, megatron = sorted(sweep.points_from_config(llama(cp=[2]))[0], key=lambda p: p.schedule)
    with pytest.raises(InputError, match="field 'ga': the workload has 4 where the audited arguments give 8"):
        audit.audit(wf.read(paths.workload_file(cp2, megatron.workload_key)), replace(megatron.setup, cp=4))
    assert audit.audit(wf.read(paths.workload_file(cp2, aicb.workload_key)), replace(aicb.setup, cp=4))


def test_the_answer_page_says_what_aicb_misses_with_cp(cp2, tmp_path):
    from commsweep.analysis import answer
    from commsweep.setup.points import read_points

    table = tmp_path / "difference_by_cause.csv"
    table.write_text(causes.difference_by_cause(cp2 / "sweep.csv", paths.PointFiles.under(cp2)))
    rows = causes.read_csv(table)
    page = answer.to_markdown(answer.page(rows, {p.point: p for p in read_points(cp2 / "sweep.csv")}, {}))
    [paragraph] = [line for line in page.splitlines() if "miss the attention's CP exchange" in line]

    def said(cause):
        nbytes = sum(r.bytes for r in rows if r.cause == cause)
        return f"`{cause}` {answer.gib(nbytes)}"

    assert "llama-7b, TP 2, SP on, CP 2 (p2p) (AICB default path)" in paragraph
    assert said("cp_attention_exchange_missing") == "`cp_attention_exchange_missing` −6.00 GiB"  # 32 x 4 x 3 x 16 MiB
    for cause in causes.CP_CAUSES:
        assert said(cause) in paragraph
