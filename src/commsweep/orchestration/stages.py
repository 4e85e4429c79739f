"""The per-point stages as commands: ``commsweep profile``, ``generate``, ``volumes``,
``simulate`` and ``audit``, their parsers and what they run.

A batch of points (``batch``) runs these in-process, thousands of times, and the command
line (``cli``) offers them beside the sweep-wide commands; both take them from here, so the
batch never reaches up into the command line. Each parser imports only what its own
command needs, so that a per-point command starts fast.
"""

from __future__ import annotations

import argparse
import sys

from ..base.files import emit


def cmd_profile(ns: argparse.Namespace) -> None:
    from ..aiob import backends, gpus

    if ns.list_gpus:
        emit(gpus.table(), None)
        return
    from ..setup.arguments import setup_from_args

    setup = setup_from_args(ns)
    iters = ns.iters if ns.iters is not None else int(ns.epoch_num or 10)
    efficiency = {
        "gemm_efficiency": ns.gemm_efficiency, "attention_efficiency": ns.attention_efficiency,
        "memory_efficiency": ns.memory_efficiency, "launch_us": ns.launch_us,
    }
    result = backends.make(
        setup, ns.backend, ns.gpu, file=ns.file, train_iter=iters, efficiency=efficiency,
        device=ns.device, warmup=ns.warmup, threads=ns.threads,
    )
    backends.write(result, ns.output, ns.csv)
    if result.note:
        print(f"commsweep profile: {result.note}", file=sys.stderr)


def cmd_generate(ns: argparse.Namespace) -> None:
    from ..workload.generate import from_arguments

    text, notes = from_arguments(ns)
    for note in notes:
        print(f"commsweep generate: note: {note}", file=sys.stderr)
    emit(text, ns.output)


def cmd_volumes(ns: argparse.Namespace) -> None:
    from ..analysis import volumes
    from ..workload import format as wformat

    table = volumes.tally(wformat.read(ns.workload), gpus=ns.gpus)
    render = {"csv": volumes.to_csv, "json": volumes.to_json, "table": volumes.to_table}[ns.format]
    emit(render(table), ns.output)


def cmd_simulate(ns: argparse.Namespace) -> None:
    from ..simulate.run import options_from_args, run

    if ns.backend != "ns3":  # the analytical backends need SimAI_analytical's network flags
        missing = [flag for flag, dest in (("-g_p_s/--gpus-per-server", "gpus_per_server"),
                                           ("-n_p_s/--nic_per_server", "nics_per_server"),
                                           ("-nv/--nvlink", "nvlink_gbps"), ("-nic/--nic_busbw", "nic_gbps"))
                   if getattr(ns, dest) is None]
        if missing:
            # argparse's way (status 2): they are required but with --backend ns3
            print("commsweep simulate: error: the following arguments are required: " + ", ".join(missing),
                  file=sys.stderr)
            raise SystemExit(2)
    run(options_from_args(ns))


def cmd_audit(ns: argparse.Namespace) -> None:
    from ..analysis import audit, causes
    from ..setup.arguments import setup_from_args
    from ..workload import format as wformat
    from ..workload.generate import pipeline_stage

    setup = setup_from_args(ns)
    findings = audit.audit(
        wformat.read(ns.workload), setup, stage=pipeline_stage(ns.pp_stage, setup.pp), gpus=ns.gpus,
        time_us=audit.time_function(ns), source=ns.workload, megatron_version=ns.megatron_version,
    )
    text = audit.to_csv(findings) if ns.format == "csv" else audit.to_table(findings, causes.cause_families(findings))
    emit(text, ns.output)



# -- parsers ---------------------------------------------------------------------------


def add_profile_parser(sub) -> None:
    from ..base.flags import add_flag
    from ..setup.arguments import add_training_arguments

    p = sub.add_parser(
        "profile", allow_abbrev=False,
        help="write the AIOB compute-time profile of one setup (AICB's format)",
        description="Write the AIOB compute-time file (AICB's --comp_filepath format) of one rank's shard: "
                    "modelled (roofline), measured with PyTorch (torch) or a user's file, validated (file). "
                    "Takes AICB's model arguments.",
    )
    add_training_arguments(p)
    p.add_argument("--backend", choices=("roofline", "torch", "file"), default="roofline")
    p.add_argument("--gpu", default="H100-SXM",
                   help="GPU type: the roofline's peaks (see --list-gpus); a label for torch and file")
    p.add_argument("--file", help="file backend: the AIOB file (e.g. from AICB) to validate and copy")
    p.add_argument("--iters", type=int, default=None,
                   help="timed iterations (torch) and the file's train_iter (default: --epoch_num, else 10)")
    p.add_argument("--warmup", type=int, default=3, help="torch: untimed runs of each operator first")
    p.add_argument("--device", default="auto", help="torch: auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch: CPU threads")
    for name in ("gemm-efficiency", "attention-efficiency", "memory-efficiency"):
        add_flag(p, f"--{name}", type=float, default=None, help=f"roofline: override the GPU's {name.replace('-', ' ')}")
    add_flag(p, "--launch-us", type=float, default=None, help="roofline: override the per-kernel launch overhead")
    add_flag(p, "--list-gpus", action="store_true", help="print the GPU table with its sources and exit")
    p.add_argument("-o", "--output", help="the AIOB file (default: stdout)")
    p.add_argument("--csv", help="also write the tidy CSV of the same numbers here")
    p.set_defaults(func=cmd_profile)


def add_generate_parser(sub) -> None:
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments

    p = sub.add_parser(
        "generate", allow_abbrev=False,
        help="write the SimAI workload of one setup (AICB's arguments)",
        description="Write a SimAI workload file. Takes AICB's own arguments, so an AICB command line works unchanged.",
    )
    add_training_arguments(p)
    add_schedule_arguments(p)
    add_aiob_arguments(p)
    p.add_argument("--schedule", choices=("aicb", "megatron"), default="aicb",
                   help="aicb: what AICB writes (default path, or AIOB path with --aiob_enable); "
                        "megatron: what Megatron-LM really communicates")
    add_stage_argument(p)
    p.add_argument("--aicb-root", metavar="PATH",
                   help="aicb schedule: run the AICB checkout at PATH instead of the emulation")
    p.add_argument("--aicb-python", metavar="PYTHON",
                   help="the Python that runs AICB (needs numpy and pandas; default: this one)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_generate)


def add_volumes_parser(sub) -> None:
    from ..simulate.run import add_gpus_argument

    p = sub.add_parser("volumes", help="communication volumes of a workload per phase, collective and group")
    p.add_argument("workload", help="a SimAI workload file")
    p.add_argument("--format", choices=("csv", "json", "table"), default="table")
    add_gpus_argument(p, required=False)
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_volumes)


def add_simulate_parser(sub) -> None:
    p = sub.add_parser(
        "simulate", allow_abbrev=False,
        help="simulate a workload with SimAI's analytical model (built-in engine or a user's SimAI)",
        description="Simulate one iteration of a SimAI workload. Takes SimAI_analytical's flags; writes "
                    "<out-dir>/<PREFIX>EndToEnd.csv (SimAI's layout) and <out-dir>/<PREFIX>collectives.csv.",
    )
    from ..simulate.run import add_gpus_argument, add_network_arguments, number_text

    p.add_argument("-w", "--workload", required=True, help="a SimAI workload file")
    add_gpus_argument(p, required=True)
    p.add_argument("-r", "--result", dest="prefix", required=True, help="output name prefix (SimAI's -r)")
    add_network_arguments(p, required=False, title="network (SimAI's flags; required but with --backend ns3)")
    for name, default in (("tp", "0"), ("dp", "0"), ("ep", "0"), ("pp", "1")):
        p.add_argument(f"-{name}_o", f"--{name}_overlap", dest=f"{name}_overlap", type=number_text,
                       default=default, help=f"{name.upper()} overlap ratio (default {default})")
    p.add_argument("--out-dir", default="results", help="output directory (default: results)")
    p.add_argument("--endtoend", help="write the EndToEnd.csv here instead")
    p.add_argument("--collectives", help="write the per-collective table here instead")
    p.add_argument("--times", metavar="FILE", help="also write the simulated times summed per phase, collective "
                                                  "and group, and SimAI's summary line, here (what summarize reads)")
    p.add_argument("--simai-bugs", choices=("fix", "reproduce", "error"), default="fix",
                   help="where SimAI prints nonsense: fix it and warn (default), reproduce SimAI's output, or fail")
    p.add_argument("--backend", choices=("builtin", "simai", "ns3"), default="builtin",
                   help="builtin: the closed-form engine; simai: run <simai-root>/bin/SimAI_analytical; "
                        "ns3: run SimAI's packet-level SimAI_simulator (--ns3-root)")
    p.add_argument("--simai-root", help="a built SimAI checkout")
    p.add_argument("--timeout", type=float, help="seconds before a SimAI run is stopped (simai and ns3 backends)")
    p.add_argument("--strict", action="store_true",
                   help="fail when -g is not the workload's all_gpus (default: warn; SimAI takes DP from -g)")
    from ..simulate.ns3.command import add_arguments as add_ns3_arguments

    add_ns3_arguments(p)
    p.set_defaults(func=cmd_simulate)


def add_audit_parser(sub) -> None:
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments
    from ..simulate.run import add_gpus_argument, add_network_arguments

    p = sub.add_parser(
        "audit", allow_abbrev=False,
        help="compare every row of a workload with the collectives Megatron really issues",
        description="Align a workload with the Megatron schedule of the same setup (AICB's arguments) and "
                    "list every missing, extra, mis-sized or misplaced collective with its cost.",
    )
    p.add_argument("workload", help="a SimAI workload file")
    add_training_arguments(p)
    add_schedule_arguments(p)
    add_aiob_arguments(p)
    add_stage_argument(p)
    p.add_argument("--format", choices=("csv", "table"), default="table")
    add_gpus_argument(p, required=False)
    add_network_arguments(p, required=False, title="network, for delta_us (SimAI's flags, all four or none; "
                                                   "without them delta_us is empty)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_audit)


# The stages' parsers by command name, in the order of a point's work.
STAGE_COMMANDS = {
    "generate": add_generate_parser,
    "profile": add_profile_parser,
    "volumes": add_volumes_parser,
    "simulate": add_simulate_parser,
    "audit": add_audit_parser,
}


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one stage's command (``prog`` as ``commsweep`` gives it)."""
    parser = argparse.ArgumentParser(prog="commsweep")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    STAGE_COMMANDS[command](sub)
    return parser
