"""SimAI's packet-level simulator (SimAI_simulator, NS-3): its inputs written, its outputs read, its failures caught.

The writers and parsers run on the real runs recorded in ../shared/reference/simai/ns3
(skipped without them); the runner's plumbing (private directory, environment, watching,
judging) runs against a stand-in that replays one of those runs; the real simulator runs
when SIMAI_ROOT points at a SimAI checkout built with ``./scripts/build.sh -c ns3``.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import reference_files

from commsweep.base.errors import ConfigError
from commsweep.simulate.ns3 import checks, conf, outputs, runner, topology
from commsweep.workload import format as wf

NS3 = "simai/ns3"
SIMAI_ROOT = os.environ.get("SIMAI_ROOT")
needs_simai = pytest.mark.skipif(not SIMAI_ROOT, reason="set SIMAI_ROOT to a SimAI checkout built with "
                                 "'./scripts/build.sh -c ns3' to run SimAI_simulator and its topology generator")


def index(reference):
    with open(reference(NS3, "INDEX.csv"), newline="") as fh:
        return {row["run"]: row for row in csv.DictReader(fh)}


def quickstart_topology(gpus: int) -> topology.Topology:
    """SimAI's quickstart topology: gen_Topo_Template.py --ro -g N -gt H20 -bw 200Gbps -nvbw 2400Gbps."""
    return topology.generate(topology.resolve(None, ro=True, gpu=gpus, gpu_type="H20", bandwidth="200Gbps",
                                              nvlink_bw="2400Gbps"))


# -- topology ---------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [8, 16])
def test_topology_is_simai_generators_file(reference, gpus):
    """The quickstart's two topologies, as SimAI's generator wrote them, byte for byte (name too)."""
    topo = quickstart_topology(gpus)
    path = reference(NS3, "inputs", "topo", topo.file_name)
    assert topo.text == path.read_text()
    parsed = topology.read(path)
    assert (parsed.gpus, parsed.nodes, parsed.gpu_type, parsed.known_gpu_type) == (gpus, {8: 81, 16: 90}[gpus], "H20",
                                                                                    False)
    assert len(parsed.links) == int(path.read_text().split()[4])


TEMPLATES = [
    ("Spectrum-X", {}, dict(gpu=16)),
    ("Spectrum-X", {}, dict(gpu=8, gpu_per_server=4, nv_switch_per_server=2, asw_switch_num=5)),
    ("AlibabaHPN", {}, dict(gpu=16)),
    ("AlibabaHPN", dict(dp=True), dict(gpu=64)),
    ("DCN+", {}, dict(gpu=256, nics_per_aswitch=32)),
    ("DCN+", dict(dt=True), dict(gpu=16, error_rate="0.001", latency="0.001ms")),
    (None, dict(ro=True, dt=True, dp=True), dict(gpu=32, psw_switch_num=8)),
    (None, {}, dict(gpu=32)),
]


@needs_simai
@pytest.mark.parametrize("template,flags,params", TEMPLATES)
def test_topology_equals_the_generator_run(tmp_path, template, flags, params):
    """Each template against SimAI's own gen_Topo_Template.py run on the same flags."""
    p = topology.resolve(template, **flags, **params)
    argv = topology.hand_command(p).split()
    argv[1] = str(Path(SIMAI_ROOT) / argv[1])
    subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True)
    (written,) = tmp_path.iterdir()
    mine = topology.generate(p)
    assert (mine.file_name, mine.text) == (written.name, written.read_text())


@pytest.mark.parametrize("params,message", [
    (dict(gpu=12), "not a whole number of servers"),
    (dict(gpu=100000), "more than one pod"),
])
def test_topology_the_generator_cannot_make(params, message):
    with pytest.raises(topology.TopologyError, match=message):
        topology.generate(topology.resolve("Spectrum-X", **params))


def test_topology_reader_refuses_what_simai_misreads(reference):
    text = reference(NS3, "inputs", "topo", "Rail_Opti_SingleToR_8g_8gps_200Gbps_H20").read_text()
    lines = text.split("\n")
    with pytest.raises(topology.InputError, match="announces 528 links, the file has 527"):
        topology.parse("\n".join(lines[:-2]) + "\n")
    with pytest.raises(topology.InputError, match="t:4: field 'rate'"):
        topology.parse("\n".join(lines[:3] + [lines[3].replace("200Gbps", "200")] + lines[4:]), source="t")


# -- SimAI.conf and the knobs -------------------------------------------------------------


def test_conf_is_the_reference_runs_file(reference):
    """SimAI's shipped SimAI.conf with its paths in the run directory: what every reference run used."""
    for run in index(reference):
        assert conf.render(conf.Settings()) == reference(NS3, "runs", run, "SimAI.conf").read_text()


@needs_simai
def test_conf_defaults_are_simais_shipped_file():
    shipped = Path(SIMAI_ROOT, "astra-sim-alibabacloud", "inputs", "config", "SimAI.conf").read_text()
    assert conf.render(conf.Settings(), "/etc/astra-sim/simulation/") == shipped


def test_conf_settings_change_their_lines():
    text = conf.render(conf.Settings(cc_mode=3, buffer_mb=16, ecn=False, packet_payload=1000))
    assert {"CC_MODE 3", "BUFFER_SIZE 16", "ENABLE_QCN 0", "PACKET_PAYLOAD_SIZE 1000"} <= set(text.split("\n"))
    assert "/etc/astra-sim" not in text


@pytest.mark.parametrize("changes,key", [
    (dict(cc_mode=2), "ns3.cc_mode"), (dict(send_latency_us=3_000_000), "ns3.send_latency_us"),
    (dict(send_latency_us=1.5), "ns3.send_latency_us"), (dict(buffer_mb=0), "ns3.buffer_mb"),
])
def test_conf_refuses_what_simai_cannot_take(changes, key):
    with pytest.raises(conf.ConfigError, match=key):
        conf.Settings(**changes)


def test_environment_sets_send_latency_in_simais_unit_and_drops_inherited_knobs():
    env = conf.environment(conf.Settings(send_latency_us=6), {"PATH": "/bin", "AS_SEND_LAT": "6000", "AS_LOG_LEVEL": "DEBUG"})
    assert env == {"PATH": "/bin", "AS_SEND_LAT": "6", "AS_NVLS_ENABLE": "0", "AS_PXN_ENABLE": "0"}


def test_send_latency_unit_matches_the_reference_runs(reference):
    """AS_SEND_LAT=v delays each flow v us: the 8-GPU all-reduces' 2 x 14 ring steps move the total
    by 28 x (v2 - v1) us exactly, from 6 to 6000 and from 6000 to 7200."""
    runs = index(reference)
    total = {int(r["AS_SEND_LAT"]): outputs.parse_endtoend(reference(NS3, "runs", name, outputs.ENDTOEND).read_text())
             .total_time for name, r in runs.items() if name.startswith("microAllReduce_8g")}
    assert round(total[6000] - total[6], 3) == 28 * (6000 - 6)
    assert round(total[7200] - total[6000], 3) == 28 * 1200


# -- outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("run", reference_files(f"{NS3}/runs", "*"))
def test_outputs_of_every_reference_run(reference, run):
    """Each recorded run parses strictly, adds up, and agrees with INDEX.csv and its workload."""
    meta = index(reference)[run.name]
    parsed = outputs.parse_endtoend((run / outputs.ENDTOEND).read_text())
    workload = wf.read(reference(NS3, "inputs", "workloads", meta["workload"]))
    assert parsed.complete and parsed.total == float(meta["total_time_us"])
    assert outputs.inconsistencies(parsed, rows=len(workload.rows), stdout=(run / "stdout.log").read_text()) == []
    assert outputs.finished_at_ns((run / "stdout.log").read_text()) == round(parsed.total_time * 1000)
    flows = outputs.parse_fct((run / conf.FCT_FILE).read_text())
    assert len(flows) == int(meta["fct_rows"])
    stats = outputs.flow_stats(flows)
    assert stats.fct_p50_us <= stats.fct_p99_us <= stats.fct_max_us and stats.slowdown_p50 >= 1
    assert outputs.parse_pfc((run / conf.PFC_FILE).read_text()) == []
    util = outputs.parse_utilization((run / "ncclFlowModel_test1_dimension_utilization_0.csv").read_text())
    assert len(util) == int(parsed.total_time // 10)
    table = runner.tidy(workload, parsed)
    assert len(table) == len(list(wf.collectives(workload)))


def test_endtoend_checks_catch_what_does_not_add_up(reference):
    text = reference(NS3, "runs", "gpt7b_L2_tp4_16g_sendlat6", outputs.ENDTOEND).read_text()
    lines = text.split("\n")
    lines[3] = lines[3].replace("1601.830000", "1611.830000", 1)  # one row's fwd exposed comm
    problems = outputs.inconsistencies(outputs.parse_endtoend("\n".join(lines)), rows=17)
    assert problems == ["SUM fwd_exposed is 4557.668, the rows add up to 4567.668000"]
    assert outputs.inconsistencies(outputs.parse_endtoend(text), rows=18)[0] == "17 row line(s) for a workload of 18 row(s)"
    cut = outputs.parse_endtoend("\n".join(text.split("\n")[2:9]) + "\n")
    assert (cut.complete, len(cut.rows)) == (False, 6)
    assert outputs.parse_endtoend("").empty
    with pytest.raises(outputs.InputError, match=":4: field 'wg_comm'"):
        outputs.parse_endtoend(text.replace("19489.785000", "19489.785", 1))


# -- checks before a run ---------------------------------------------------------------------


def micro(reference, name="microAllReduce.txt") -> wf.Workload:
    return wf.read(reference(NS3, "inputs", "workloads", name))


def test_checks_transform_zero_byte_blocking_collectives(reference):
    w = micro(reference)
    row = w.rows[1].__class__(**{**{f: getattr(w.rows[1], f) for f in wf.ROW_FIELDS}, "ig_comm": "REDUCESCATTER",
                                  "ig_size": 0})
    w0 = wf.with_rows(w, [w.rows[0], row])
    topo = topology.parse(quickstart_topology(8).text)
    prepared = checks.prepare(w0, topo, conf.Settings())
    assert prepared.changed and prepared.workload.rows[1].ig_comm == "NONE"
    assert "row 2 (embedding_layer ig REDUCESCATTER 0)" in prepared.warnings[-1]
    assert "runs as NONE" in prepared.warnings[0]  # H20 is not a GPU type SimAI's NS-3 front end knows


def test_checks_leave_aicbs_zero_byte_weight_gradient_collectives(reference):
    """AICB's ALLGATHER_DP_EP 0 rows finished in 0 us in the reference runs: not changed."""
    w = micro(reference, "gpt7b_L2_ws16_tp4_pp1_seq2048_mbs1_ga1_sp0_default.txt")
    prepared = checks.prepare(w, topology.parse(quickstart_topology(16).text), conf.Settings())
    assert not prepared.changed and prepared.workload is w


@pytest.mark.parametrize("change,message", [
    (dict(pp=2), "pp 2: SimAI's NS-3 path hard-codes PP_size = 1"),
    (dict(all_gpus=16), "all_gpus 16 but the topology has 8 GPUs"),
    (dict(checkpoints=(1,)), "activation recomputation"),
])
def test_checks_refuse_what_hangs(reference, change, message):
    import dataclasses

    w = micro(reference)
    w = dataclasses.replace(w, header=dataclasses.replace(w.header, **change))
    with pytest.raises(checks.RefusedError, match=message):
        checks.prepare(w, topology.parse(quickstart_topology(8).text), conf.Settings())


def test_checks_refuse_nvls_on_a_gpu_simai_does_not_know(reference):
    with pytest.raises(checks.RefusedError, match="nvls is on but the topology's GPU type 'H20'"):
        checks.prepare(micro(reference), topology.parse(quickstart_topology(8).text), conf.Settings(nvls=True))


# -- the runner, against a stand-in replaying a reference run ---------------------------------

STAND_IN = """#!{python}
import os, shutil, sys, time
mode = os.environ.get("STAND_IN_MODE", "replay")
src = os.environ["STAND_IN_RUN"]
with open(os.environ["STAND_IN_SEEN"], "w") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n" + os.environ.get("AS_SEND_LAT", "-") + " " + os.environ.get("AS_LOG_LEVEL", "-")
             + "\\n" + " ".join(sorted(os.listdir("."))))
if mode == "hang":
    time.sleep(3600)
if mode == "crash":
    os.kill(os.getpid(), 11)
if mode == "empty":
    open("ncclFlowModel_EndToEnd.csv", "w").close(); sys.exit(0)
for name in ("ncclFlowModel_EndToEnd.csv", "llama_hpn7_fct.txt", "llama_hpn7_pfc.txt",
             "ncclFlowModel_test1_dimension_utilization_0.csv"):
    shutil.copy(os.path.join(src, name), name)
if mode == "tampered":
    text = open("ncclFlowModel_EndToEnd.csv").read().replace("total time,1772.030000", "total time,1773.030000")
    open("ncclFlowModel_EndToEnd.csv", "w").write(text)
sys.stdout.write(open(os.path.join(src, "stdout.log")).read())
sys.exit(3 if mode == "exit3" else 0)
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch, reference):
    run = reference(NS3, "runs", "microAllReduce_8g_sendlat6")
    binary = tmp_path / "SimAI_simulator"
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("STAND_IN_RUN", str(run))
    monkeypatch.setenv("STAND_IN_SEEN", str(tmp_path / "seen.txt"))
    monkeypatch.setenv("AS_LOG_LEVEL", "DEBUG")  # inherited: must not reach the simulator
    return binary, run, tmp_path


def run_micro(stand_in, reference, **kw):
    binary, run, tmp = stand_in
    topo = quickstart_topology(8)
    return runner.run(binary, reference(NS3, "inputs", "workloads", "microAllReduce.txt"), topo.file_name, topo.text,
                      conf.Settings(send_latency_us=6), parent=tmp, build="-O0 (test)", **kw)


def test_run_in_a_private_directory(stand_in, reference, monkeypatch):
    binary, run, tmp = stand_in
    log = io.StringIO()
    result = run_micro(stand_in, reference, log=log)
    assert result.endtoend_text == (run / outputs.ENDTOEND).read_text()
    assert log.getvalue() == (run / "stdout.log").read_text()
    assert (result.endtoend.total_time, result.flows.flows, result.pfc_pauses) == (1772.03, 1792, 0)
    assert [c.time_us for c in result.collectives] == ["183.464", "476.556"]
    args, knobs, files = (tmp / "seen.txt").read_text().split("\n")
    assert args == "-t 1 -w ./workload.txt -n ./Rail_Opti_SingleToR_8g_8gps_200Gbps_H20 -c ./SimAI.conf"
    assert knobs == "6 -"
    assert files == "Rail_Opti_SingleToR_8g_8gps_200Gbps_H20 SimAI.conf command.txt stderr.log stdout.log workload.txt"
    assert result.build == "-O0 (test)" and "AS_SEND_LAT=6" in result.command
    assert not list(tmp.glob("simai-ns3-*"))  # gone after success


@pytest.mark.parametrize("mode,message", [
    ("empty", "exited 0 with an EMPTY ncclFlowModel_EndToEnd.csv"),
    ("exit3", "exited with status 3"),
    ("crash", "killed by SIGSEGV"),
    ("tampered", "does not add up: total time 1773.03 is not total comp"),
])
def test_run_failures_are_named(stand_in, reference, mode, message, monkeypatch):
    monkeypatch.setenv("STAND_IN_MODE", mode)
    with pytest.raises(runner.Ns3RunError, match=message) as err:
        run_micro(stand_in, reference)
    kept = Path(str(err.value).split("; kept ")[1].split(" (rerun")[0])
    assert (kept / "command.txt").read_text().startswith(f"cd {kept} && env -u AS_LOG_LEVEL AS_SEND_LAT=6 ")


def test_run_that_stops_progressing_is_stopped(stand_in, reference, monkeypatch):
    monkeypatch.setenv("STAND_IN_MODE", "hang")
    with pytest.raises(runner.Ns3RunError, match="made no progress for 0.5 s .* no flow had finished"):
        run_micro(stand_in, reference, stall=0.5, poll=0.05)


# -- the real simulator -------------------------------------------------------------------------


@needs_simai
def test_real_simulator_writes_the_reference_run(tmp_path, reference):
    """SimAI_simulator through the runner on the quickstart case (8 GPUs, AS_SEND_LAT=6): the recorded
    run's EndToEnd.csv and flow file, byte for byte."""
    run = reference(NS3, "runs", "microAllReduce_8g_sendlat6")
    topo = quickstart_topology(8)
    result = runner.run(Path(SIMAI_ROOT), reference(NS3, "inputs", "workloads", "microAllReduce.txt"), topo.file_name,
                        topo.text, conf.Settings(send_latency_us=6), parent=tmp_path, keep=True, timeout=900)
    assert result.endtoend_text == (run / outputs.ENDTOEND).read_text()
    assert (result.workdir / conf.FCT_FILE).read_text() == (run / conf.FCT_FILE).read_text()
    assert "debug" in result.build
    shutil.rmtree(result.workdir)


def test_simulate_command_with_the_ns3_backend(stand_in, reference, capsys):
    """`commsweep simulate --backend ns3`: the analytical backends' files, plus the run's record."""
    from commsweep.orchestration.cli import main
    from commsweep.simulate import times
    from commsweep.simulate.ns3 import record

    binary, run, tmp = stand_in
    argv = ["simulate", "--backend", "ns3", "-w", str(reference(NS3, "inputs", "workloads", "microAllReduce.txt")),
            "-g", "8", "-r", "micro-", "--ns3-root", str(binary), "--ns3-build", "-O0 (test)",
            "--topology-param", "gpu_type=H20", "--topology-param", "bandwidth=200Gbps",
            "--topology-param", "nvlink_bw=2400Gbps", "--ns3-set", "send_latency_us=6", "--out-dir", str(tmp),
            "--times", str(tmp / "t.csv")]
    assert main(argv) == 0
    assert (tmp / "micro-EndToEnd.csv").read_text() == (run / outputs.ENDTOEND).read_text()
    assert times.read(tmp / "t.csv").iteration[("total_us", "")] == "1772"
    rec = record.read(tmp / "micro-ns3.csv")
    assert (rec["total_us"], rec["AS_SEND_LAT"], rec["flows"], rec["build"]) == ("1772.030", "6", "1792", "-O0 (test)")
    assert "each flow starts 6 us late" in capsys.readouterr().err
    assert main(argv[:-2] + ["--ns3-set", "cc_mode=2"]) == 2
    assert "ns3.cc_mode: must be one of" in capsys.readouterr().err


# -- in the sweep: config/ns3.yaml's points, planned and run as the workflow does ----------------

CONFIG_NS3 = Path(__file__).resolve().parents[1] / "config" / "ns3.yaml"
# config/ns3.yaml cut to the reference run's workload (AICB's default path: gpt7b_L2_tp8, byte for
# byte), which the stand-in replays; the whole sweep's other workloads have no recorded run.
REPLAYED = "sweep={aiob: [false], schedule: [aicb]}"


def ns3_config(*overrides: str) -> dict:
    from commsweep.setup import configfile

    return configfile.load([str(CONFIG_NS3)], list(overrides))


def run_plan(plan: dict) -> dict:
    """Every batch of a plan, as the workflow orders them (a packet point's batch after its workload's)."""
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch

    return {name: batch.run(b, 1, Layout().batch_manifest(name), running_dir=".running")
            for name, b in sorted(plan.items(), key=lambda item: item[0].startswith("packet-"))}


def test_config_ns3_has_the_pair_that_answers_at_packet_level(tmp_path, reference, monkeypatch):
    """config/ns3.yaml: AICB's AIOB path and Megatron's schedule of one setting, each simulated both
    ways: the packet-level AICB point's packet-level Megatron point is in the sweep."""
    from commsweep.analysis import causes
    from commsweep.orchestration import sweep
    from commsweep.setup.points import PointRow

    monkeypatch.setenv("SIMAI_ROOT", str(replaying_root(tmp_path, reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6"))))

    points, _ = sweep.points_from_config(ns3_config())
    rows = [PointRow.of(p) for p in points]
    packet = [r for r in rows if r.simulation == "packet"]
    assert sorted((r.schedule, r.aiob) for r in packet) == [("aicb", True), ("megatron", True)]
    partners = causes.megatron_partners(rows)
    (aicb,) = [r for r in packet if r.schedule == "aicb"]
    assert partners[aicb.point] == aicb.point.replace("_aicb_aiob_", "_megatron_aiob_")


def test_sweep_plans_each_packet_point_as_a_job_of_its_own(stand_in, reference, monkeypatch):
    """config/ns3.yaml's default-path point: its TP 8 workload (the reference run's, byte for byte) is made in its batch;
    the packet-level point is a batch of its own, after that one, with simulator.ns3's resources; run
    through the stand-in replaying the reference run, it writes that run's EndToEnd.csv and the same
    tables as its analytical twin; the comparison sets them side by side."""
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch, provenance, sweep
    from commsweep.setup import configfile
    from commsweep.simulate import times
    from commsweep.analysis import packet as packet_table, summary
    from commsweep.setup.points import PointRow

    binary, _, tmp = stand_in
    run = reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6")
    monkeypatch.setenv("STAND_IN_RUN", str(run))
    monkeypatch.setenv("SIMAI_ROOT", str(binary))
    config = configfile.load([str(CONFIG_NS3)], [REPLAYED])
    monkeypatch.chdir(tmp)
    points, _ = sweep.points_from_config(config)
    assert [p.simulation for p in points] == ["analytical", "packet"]
    analytical, packet = (p.point_key for p in points)
    assert packet == analytical + "_packet"
    plan = batch.plan(points, config, Layout(), provenance.Run(config=config,
                                                                inputs=provenance.check_external(config, points)))
    own = plan[f"packet-{packet}"]
    (regular,) = [b for name, b in plan.items() if name != own.name]
    assert (own.points, own.after) == ((packet,), (regular.name,))
    assert [(t.stage, t.rule, t.command[:3]) for t in own.tasks] == [("packet", "packet", ("simulate", "--backend", "ns3"))]
    assert (own.memory_mb(), own.threads(), own.runtime()) == (4096, 1, 35)
    assert packet not in regular.points and not {"simulate", "packet"} & {t.rule for t in regular.tasks if t.key == packet}
    for name in (regular.name, own.name):  # the workflow's order: the packet batch after its workload's
        outcome = batch.run(plan[name], 1, Layout().batch_manifest(name), running_dir=".running")
        assert outcome.failed == []
    layout = Layout()
    assert wf.read(layout.workload(points[0].workload_key)).render() == \
        reference(NS3, "inputs", "workloads", "gpt7b_L2_ws16_tp8_pp1_seq2048_mbs1_ga1_sp0_default.txt").read_text()
    assert Path(layout.endtoend(packet)).read_text() == (run / outputs.ENDTOEND).read_text()
    both = {key: times.read(layout.times(key)).iteration[("total_us", "")] for key in (analytical, packet)}
    assert both[packet] == "21150" and int(both[analytical]) < 21150
    rows = [summary.Row(PointRow.of(p), iteration={"sim_total_us": int(both[p.point_key])}) for p in points]
    table = list(csv.DictReader(io.StringIO(packet_table.table(rows, packet_table.read_records([layout.packet_record(packet)])))))
    assert [(r["analytical_point"], r["packet_total_us"], r["send_latency_us"]) for r in table] == \
        [(analytical, "21150", "6")]
    assert float(table[0]["packet_over_analytical"]) > 1


def replaying_root(tmp_path: Path, run: Path) -> Path:
    """A SimAI checkout whose bin/SimAI_simulator replays a reference run."""
    root = tmp_path / "simai"
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "SimAI_simulator"
    binary.write_text(STAND_IN.format(python=sys.executable))
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return root


def test_workflow_plans_config_ns3(tmp_path, reference, monkeypatch):
    """`make run CONFIG=config/ns3.yaml`'s plan: three batches (the workloads' and one per packet
    point), the comparison and the packet-level difference by cause, which the answer reads."""
    import sweeps

    monkeypatch.setenv("SIMAI_ROOT", str(replaying_root(tmp_path, reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6"))))
    result = sweeps.run(tmp_path / "w", "--configfile", str(CONFIG_NS3), "--dry-run", "--printshellcmds")
    assert result.stdout.count("rule batch:") == 3 and "packet_vs_analytical" in result.stdout
    assert "rule packet_difference_by_cause:" in result.stdout
    assert "--packet results/packet_difference_by_cause.csv" in result.stdout


@pytest.mark.slow
def test_workflow_runs_config_ns3(tmp_path, reference, monkeypatch):
    """The whole sweep through a stand-in replaying the reference run: the comparison puts the
    packet-level point (the recorded 21,150 us) beside its analytical twin."""
    import sweeps

    run = reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6")
    monkeypatch.setenv("SIMAI_ROOT", str(replaying_root(tmp_path, run)))
    monkeypatch.setenv("STAND_IN_RUN", str(run))
    monkeypatch.setenv("STAND_IN_SEEN", str(tmp_path / "seen.txt"))
    sweeps.run(tmp_path / "w", "--configfile", str(CONFIG_NS3), "--config", REPLAYED, "--cores", "2")
    rows = list(csv.DictReader(open(tmp_path / "w" / "results" / "packet_vs_analytical.csv", newline="")))
    assert [(r["packet_total_us"], r["flows"], r["status"]) for r in rows] == [("21150", "34960", "ok")]
    assert 1 < float(rows[0]["packet_over_analytical"]) < 1.25


def test_slurm_runs_the_packet_point_as_a_job_with_its_resources(tmp_path, reference, monkeypatch):
    """The Slurm profile's plan of config/ns3.yaml: the packet-level point's batch is a job with
    simulator.ns3's memory and run time (5 + 30 minutes); the comparison joins the tables job."""
    import sweeps

    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e '.[slurm]'")
    monkeypatch.setenv("SIMAI_ROOT", str(replaying_root(tmp_path, reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6"))))
    result = sweeps.run(tmp_path / "w", "--configfile", str(Path(__file__).resolve().parents[1] / "config" / "ns3.yaml"),
                        "--dry-run", profile="slurm")
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "wildcards: batch=packet-" in line)
    # The job's own lines after its wildcards (its priority, then its resources): the indented ones.
    job = list(itertools.takewhile(lambda line: line.startswith("    "), lines[at + 1:]))
    [resources] = [line for line in job if line.lstrip().startswith("resources:")]
    assert "runtime=35" in resources and "mem_mb=4096" in resources
    assert "rule packet_vs_analytical:" in result.stdout and result.stdout.count("Group job tables") == 1


def test_flows_past_simais_32_bit_count_are_left_out_of_the_slowdowns():
    flows = [outputs.Flow(0, 1, 10000, 100, 1000, 0, 20, 10), outputs.Flow(0, 1, 10001, 100, 2**32, 0, 50, 1)]
    stats = outputs.flow_stats(flows)
    assert (stats.flows, stats.slowdown_max, stats.fct_max_us) == (2, 2.0, 0.05)


def test_a_failed_packet_run_is_a_named_failed_point(stand_in, reference, monkeypatch):
    """In the sweep, an empty EndToEnd.csv from SimAI fails that point's simulate task with the
    reason in its status; its analytical twin is untouched."""
    from commsweep.base import status
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch, provenance, sweep
    from commsweep.setup import configfile

    binary, _, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", "empty")
    monkeypatch.setenv("SIMAI_ROOT", str(binary))
    # The failed run's folder is kept for its rerun, in the temporary folder: the test's own.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    config = configfile.load([str(CONFIG_NS3)], [REPLAYED])
    monkeypatch.chdir(tmp)
    points, _ = sweep.points_from_config(config)
    plan = batch.plan(points, config, Layout(), provenance.Run(config=config,
                                                                inputs=provenance.check_external(config, points)))
    outcomes = {name: batch.run(b, 1, Layout().batch_manifest(name), running_dir=".running")
                for name, b in sorted(plan.items(), key=lambda item: item[0].startswith("packet-"))}
    failed = [t.key for o in outcomes.values() for t in o.failed]
    assert failed == [points[1].point_key]
    st = status.read(Layout().point_status("simulate", points[1].point_key))
    assert not st.ok and "EMPTY ncclFlowModel_EndToEnd.csv" in st.error
    assert status.read(Layout().point_status("simulate", points[0].point_key)).ok


def test_a_failed_packet_point_is_named_by_the_sweep_wide_steps(stand_in, reference, monkeypatch, capsys):
    """A packet-level point whose run failed: the comparison with its analytical twin lists it with
    its failure (its ns3.csv is the failed job's marker, not read as a record), and the packet-level
    difference by cause, its header alone, says in its log which point failed and why."""
    from commsweep.base.paths import Layout
    from commsweep.orchestration import batch, cli, provenance, sweep
    from commsweep.setup import configfile

    binary, _, tmp = stand_in
    monkeypatch.setenv("STAND_IN_MODE", "empty")
    monkeypatch.setenv("SIMAI_ROOT", str(binary))
    # The failed run's folder is kept for its rerun, in the temporary folder: the test's own.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    config = configfile.load([str(CONFIG_NS3)], [REPLAYED])
    monkeypatch.chdir(tmp)
    points, invalid = sweep.points_from_config(config)
    run_plan(batch.plan(points, config, Layout(), provenance.Run(config=config,
                                                                  inputs=provenance.check_external(config, points))))
    packet = points[1].point_key
    Path("results/sweep.csv").write_text(sweep.table_csv(points, invalid))
    assert cli.main(["summarize", "--sweep", "results/sweep.csv", "-o", "results/summary.csv"]) == 0
    assert cli.main(["packet-compare", "--summary", "results/summary.csv", "--records", Layout().packet_record(packet),
                     "-o", "results/packet_vs_analytical.csv"]) == 0
    (row,) = csv.DictReader(open("results/packet_vs_analytical.csv", newline=""))
    assert (row["point"], row["flows"]) == (packet, "")
    assert row["status"].startswith("failed: simulate: ") and "EMPTY ncclFlowModel_EndToEnd.csv" in row["status"]
    capsys.readouterr()
    assert cli.main(["causes", "--simulation", "packet", "--sweep", "results/sweep.csv",
                     "-o", "results/packet_difference_by_cause.csv"]) == 0
    assert Path("results/packet_difference_by_cause.csv").read_text().count("\n") == 1
    said = capsys.readouterr().err
    assert f"commsweep causes: no packet-level row: failed: {packet}: simulate: " in said
    # The landing page, where a user reads the answer, names the point and why, not only the log.
    assert cli.main(["causes", "--sweep", "results/sweep.csv", "-o", "results/difference_by_cause.csv"]) == 0
    assert cli.main(["answer", "results/difference_by_cause.csv", "--sweep", "results/sweep.csv",
                     "--packet", "results/packet_difference_by_cause.csv", "-o", "results/answer.md"]) == 0
    page = Path("results/answer.md").read_text()
    assert "no packet-level pair to answer with" in page
    assert f"* `{packet}`: simulate: " in page and "EMPTY ncclFlowModel_EndToEnd.csv" in page


def test_packet_points_the_simulator_would_hang_on_are_refused_when_the_sweep_is_checked(tmp_path, monkeypatch, capsys):
    """PP > 1 hangs SimAI_simulator: `commsweep sweep --check` names each such packet-level point
    with the other invalid points, before any job and without SimAI; skip_invalid drops them and
    keeps their analytical twins."""
    from commsweep.orchestration import cli, sweep

    monkeypatch.setenv("SIMAI_ROOT", str(tmp_path / "no-simai"))
    config = tmp_path / "pp.yaml"
    config.write_text(CONFIG_NS3.read_text().replace("  pp: [1]\n", "  pp: [1, 2]\n"))
    assert cli.main(["sweep", "--check", str(config)]) == 2
    said = capsys.readouterr().err
    assert "sweep: 2 invalid sweep point(s)" in said and said.count("pp=2") == 2
    assert said.count("simulation=packet]: packet-level simulation: pp 2: SimAI's NS-3 path hard-codes PP_size = 1") == 2
    config.write_text(config.read_text() + "skip_invalid: true\n")
    points, invalid = sweep.points_from_config(sweep.load_config(config))
    assert sorted((p.pp, p.simulation) for p in points) == [(1, "analytical")] * 2 + [(1, "packet")] * 2 + \
        [(2, "analytical")] * 2
    assert [(bad.values["pp"], bad.values["simulation"]) for bad in invalid] == [(2, "packet")] * 2
    table = list(csv.DictReader(io.StringIO(sweep.table_csv(points, invalid))))
    assert [r["status"].split(":")[0] for r in table if r["simulation"] == "packet" and r["pp"] == "2"] == ["skipped"] * 2


def test_a_missing_simulator_names_the_config_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^simulator\.ns3\.root: .*no-simai/bin/SimAI_simulator not found: point "
                                          r"simulator\.ns3\.root "):
        runner.find_binary(tmp_path / "no-simai")


@needs_simai
def test_real_simulator_runs_a_zero_byte_collective_as_none(tmp_path, reference):
    """SimAI's 8-GPU example with its input-gradient phase made REDUCESCATTER 0: SimAI_simulator
    alone exits 0 with an empty EndToEnd.csv; through the runner it runs as NONE, with a warning,
    and gives the example's own time."""
    text = reference(NS3, "inputs", "workloads", "microAllReduce.txt").read_text().split("\n")
    text[3] = "embedding_layer -1 556000 ALLREDUCE 67108864 1 REDUCESCATTER 0 1 NONE 0 1"
    (tmp_path / "zero.txt").write_text("\n".join(text))
    topo = quickstart_topology(8)
    result = runner.run(Path(SIMAI_ROOT), tmp_path / "zero.txt", topo.file_name, topo.text,
                        conf.Settings(send_latency_us=6), parent=tmp_path, timeout=900)
    assert result.endtoend.total_time == 1772.03
    assert any("row 2 (embedding_layer ig REDUCESCATTER 0)" in w for w in result.warnings)


def test_a_packet_only_sweep_is_audited_and_says_it_has_no_pair(stand_in, reference, monkeypatch, capsys):
    """`simulation: [packet]`: the packet-level point's workload is audited in its workload's batch
    (the audit is of the workload rows, not of the simulator), the packet-level difference by
    cause has its bytes from that audit and no time (no packet-level Megatron point), each
    collective of the SimAI_simulator run is found at the bytes it moved, and the answer page
    says what the sweep lacks."""
    from commsweep.analysis import answer, audit, causes
    from commsweep.base.paths import Layout, PointFiles
    from commsweep.orchestration import batch, cli, provenance, sweep
    from commsweep.setup.points import PointRow

    binary, _, tmp = stand_in
    monkeypatch.setenv("STAND_IN_RUN", str(reference(NS3, "runs", "gpt7b_L2_tp8_16g_sendlat6")))
    monkeypatch.setenv("SIMAI_ROOT", str(binary))
    config = ns3_config(REPLAYED, "sweep={simulation: [packet]}")
    monkeypatch.chdir(tmp)
    points, invalid = sweep.points_from_config(config)
    (point,) = points
    assert point.packet and sweep.audited_points(points) == [point]
    plan = batch.plan(points, config, Layout(), provenance.Run(config=config,
                                                                inputs=provenance.check_external(config, points)))
    (regular,) = [b for name, b in plan.items() if not name.startswith("packet-")]
    assert [(t.rule, t.key) for t in regular.tasks if t.rule == "audit"] == [("audit", point.point_key)]
    assert regular.files["audits"] == (Layout().audit(point.point_key),)
    assert all(not o.failed for o in run_plan(plan).values())
    findings = audit.read_csv(Path(Layout().audit(point.point_key)).read_text())
    assert any(f.kind == "missing" for f in findings)

    Path("results/sweep.csv").write_text(sweep.table_csv(points, invalid))
    files = PointFiles.under("results")
    row = PointRow.of(point)
    found = causes.points_causes([row], files)
    assert [(pc.partner, pc.total_exposed_ns) for pc in found] == [(None, None)]
    assert all(r.exposed_ns is None for r in found[0].rows) and sum(r.bytes for r in found[0].rows) != 0
    # Every collective SimAI_simulator ran is found at the bytes it moved (not the analytical model's).
    sim = causes.read_simulated(files, point.point_key, packet=True)
    workload = wf.read(Layout().workload(point.workload_key))
    found = [sim.exposed_of(c.phase, c.collective, c.group, c.declared_size) for c in wf.collectives(workload)]
    assert found and None not in found
    assert cli.main(["causes", "--simulation", "packet", "--sweep", "results/sweep.csv",
                     "-o", "results/packet_difference_by_cause.csv"]) == 0
    assert cli.main(["causes", "--sweep", "results/sweep.csv", "-o", "results/difference_by_cause.csv"]) == 0
    assert causes.read_csv(Path("results/difference_by_cause.csv")) == []  # no analytical point
    packet_rows = causes.read_csv(Path("results/packet_difference_by_cause.csv"))
    assert {r.point for r in packet_rows} == {point.point_key}
    # The comparison with Megatron has the point, from its audit.
    assert cli.main(["summarize", "--sweep", "results/sweep.csv", "-o", "results/summary.csv"]) == 0
    assert cli.main(["compare", "--sweep", "results/sweep.csv", "--summary", "results/summary.csv",
                     "--findings", "results/findings.csv", "--comparison", "results/comparison.csv",
                     "--verdicts", "results/verdicts.csv"]) == 0
    with open("results/verdicts.csv", newline="") as fh:
        assert [r["point"] for r in csv.DictReader(fh)] == [point.point_key]
    page = answer.to_markdown(answer.page([], {row.point: row}, {}, packet_rows))
    assert "## Under packet-level simulation (SimAI_simulator)" in page
    assert "no packet-level pair to answer with" in page and "add `megatron` to `sweep.schedule`" in page


@needs_simai
@pytest.mark.slow
def test_real_simulator_answers_config_ns3(tmp_path):
    """`make run CONFIG=config/ns3.yaml` with the real SimAI_simulator (a few minutes per packet
    point): every point ok; the packet-level difference by cause adds up, point by point, to the
    difference of the two packet-level runs' exposed times; the front page quotes it."""
    import sweeps
    from commsweep.analysis import causes
    from commsweep.base.paths import PointFiles
    from commsweep.simulate import times

    sweeps.run(tmp_path / "w", "--configfile", str(CONFIG_NS3), "--cores", "2", timeout=3600)
    results = tmp_path / "w" / "results"
    rows = causes.read_csv(results / "packet_difference_by_cause.csv")
    assert rows and all(r.exposed_us is not None for r in rows)
    (aicb,) = {r.point for r in rows}
    megatron = aicb.replace("_aicb_aiob_", "_megatron_aiob_")

    def exposed_us(point: str) -> float:
        sim = causes.read_simulated(PointFiles.under(results), point, packet=True)
        return sim.exposed / 1000

    assert sum(r.exposed_us for r in rows) == pytest.approx(exposed_us(aicb) - exposed_us(megatron), abs=0.002)
    assert any(r.cause == "missing_bwd_tp_allreduce" and r.exposed_us < 0 for r in rows)
    page = (results / "answer.md").read_text()
    assert "## Under packet-level simulation (SimAI_simulator)" in page and "At packet level the dropped" in page
    for point in (aicb, megatron):
        assert float(times.read(results / "points" / point / "times.csv").iteration[("total_us", "")]) > 0
