"""The shipped data-parallel sweep (config/data-parallel.yaml): its plan, and its landing page
saying per setting what AICB's workloads miss with megatron's overlapped buckets, FSDP and
FP8 parameter gathers, every number a sum of difference_by_cause.csv's rows."""

from __future__ import annotations

import pytest

from commsweep.orchestration import cli, sweep
from conftest import REPO

CONFIG = REPO / "config" / "data-parallel.yaml"


def test_the_data_parallel_sweeps_plan():
    from commsweep.analysis import causes
    from commsweep.setup.points import PointRow

    points, invalid = sweep.points_from_config(sweep.load_config(CONFIG))
    assert len(points) == 90 and len(invalid) == 38
    reasons = {r for bad in invalid for r in bad.reasons}
    # Sequence 32768 without CP fits neither way: 108.2 GiB with the distributed optimizer,
    # 90.2 GiB with FSDP's sharded weights and gradients.
    assert reasons == {"needs 108.2 GiB per GPU; the H100-SXM has 80 GiB (2 GiB kept free)",
                       "needs 90.2 GiB per GPU; the H100-SXM has 80 GiB (2 GiB kept free)",
                       "the megatron schedule does not model fp8_param_gather with the distributed "
                       "optimizer's buckets (overlap_grad_reduce)"}
    # Every data-parallel group spans both servers: TP 2 x CP on 8-GPU servers, 16 GPUs.
    assert all(p.setup.world_size // (p.setup.tp * p.setup.cp) * p.setup.tp * p.setup.cp > p.net.gpus_per_server
               and p.setup.tp * p.setup.cp < p.net.gpus_per_server for p in points)
    megatron = [p.setup for p in points if p.schedule == "megatron"]
    assert {(s.fsdp, s.fp8_param_gather, s.overlap_grad_reduce, s.overlap_param_gather) for s in megatron} == {
        ("none", False, False, False), ("none", False, True, True), ("none", True, False, False),
        ("optim_grads_params", False, False, False), ("optim_grads_params", False, True, True),
        ("optim_grads_params", True, False, False), ("optim_grads_params", True, True, True)}
    partners = causes.megatron_partners([PointRow.of(p) for p in points])
    # AICB writes the FP8 settings with overlapped buckets too (it ignores both); they have no partner.
    alone = {p.setup.fsdp for p in points if p.schedule == "aicb" and p.point_key not in partners}
    assert len(partners) == 42 and sum(p.schedule == "aicb" for p in points) == 48 and alone == {"none"}
    assert all(p.setup.fp8_param_gather and p.setup.overlap_grad_reduce
               for p in points if p.schedule == "aicb" and p.point_key not in partners)


def _page_config() -> dict:
    from test_causes import config_of

    config = config_of(CONFIG.read_text())
    config["sweep"].update(cp=[1], seq_length=[8192], aiob=[True], fp8_param_gather=[False])
    return config


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The sweep's sequence-8192 points without CP on AICB's AIOB path, made as the rules make
    them, with their difference by cause and landing page."""
    from commsweep.analysis import answer
    from test_causes import run_sweep

    config = _page_config()
    results = tmp_path_factory.mktemp("dp") / "results"
    run_sweep(results, config)
    # Megatron's overlapped points again, simulated as the sweep's rule simulates them (its buckets hidden).
    from commsweep.base import paths
    from commsweep.simulate.stage import SIMULATE

    for p in sweep.points_from_config(config)[0]:
        if p.schedule == "megatron" and p.setup.overlap_grad_reduce:
            out = paths.point_dir(results, p.point_key)
            job = SIMULATE.job(p, config, (paths.workload_file(results, p.workload_key),),
                               (out / "EndToEnd.csv", out / "collectives.csv", out / "times.csv"))
            assert cli.main([str(a) for a in SIMULATE.argv(job)]) == 0
    table = results / "difference_by_cause.csv"
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(table)]) == 0
    answer.write(table, results / "sweep.csv", results / "answer.md")
    return results


def test_the_page_says_per_setting_what_overlap_and_fsdp_change(page):
    from commsweep.analysis import causes

    from test_answer import check_numbers

    text = (page / "answer.md").read_text()
    assert check_numbers(text, causes.read_csv(page / "difference_by_cause.csv")) > 20
    verdicts = {line.split("**")[1]: next_line for line, next_line in zip(text.splitlines(), text.splitlines()[1:])
                if line.startswith("* **")}
    base = "llama3-8b, TP 2, SP on, no FSDP, "
    assert "Of the DP sync" not in verdicts[base + "no DP overlap"]
    assert "Of the DP sync: `dp_buckets` 0 bytes (+" in verdicts[base + "grad-reduce and param-gather overlap"]
    for overlap in ("no DP overlap", "grad-reduce and param-gather overlap"):
        fsdp = verdicts[f"llama3-8b, TP 2, SP on, FSDP optim_grads_params, {overlap}"]
        # The per-layer gathers no workload file holds are priced by the simulation (their exposed part).
        assert "`fsdp_param_gathers_missing` −53.04 GiB (−" in fsdp and "no time" not in fsdp
        assert "`fsdp_grad_reducescatters_missing` −59.89 GiB" in fsdp and "0.00 ms" not in fsdp
    assert "**With FSDP or FP8 parameter gathers AICB writes the distributed optimizer's sync in bf16.**" in text
    assert "**With megatron's overlapped buckets AICB counts the DP sync whole.**" in text



def test_the_audit_table_of_an_fsdp_point_lists_its_gathers(page, tmp_path):
    """``commsweep audit --format table`` of AICB's FSDP point: its findings, then the per-layer
    gathers no workload file holds, the bytes the answer page counts as missing."""
    from commsweep.analysis import causes, volumes
    from commsweep.base import paths
    from commsweep.setup.arguments import to_commsweep_argv

    [point] = [p for p in sweep.points_from_config(_page_config())[0] if p.schedule == "aicb"
               and p.setup.fsdp == "optim_grads_params" and not p.setup.overlap_grad_reduce]
    out = tmp_path / "audit.txt"
    assert cli.main(["audit", str(paths.workload_file(page, point.workload_key)), *to_commsweep_argv(point.setup),
                     "--format", "table", "-o", str(out)]) == 0
    head, table = out.read_text().split("FSDP's per-layer parameter all-gathers Megatron issues per iteration "
                                        "(in no workload file):\n")
    assert "fsdp_param_gathers_missing" in head
    assert {line.split()[0] for line in table.splitlines()[2:] if line.strip()} == {"fwd", "ig"}
    missing = sum(r.bytes for r in causes.read_csv(page / "difference_by_cause.csv")
                  if r.point == point.point_key and r.cause == "fsdp_param_gathers_missing")
    assert missing < 0 and -missing == sum(v.payload_bytes for v in volumes.fsdp_gathers(point.setup))
