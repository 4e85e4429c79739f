"""``commsweep chakra``: a SimAI workload as Chakra execution traces, one per rank, and its
communicator groups (what ASTRA-sim and other Chakra tools read; docs/astra-sim.md).

With ``--megatron`` and a setup's training arguments instead of a workload file, every
pipeline stage's ranks get Megatron's schedule of their own stage, and the pipeline's sends and
receives between them (``chakra_graph.megatron_traces``): what one SimAI file, a single stage's
view, cannot carry."""

from __future__ import annotations

import argparse

from . import chakra, chakra_graph
from . import format as wformat


def export(workload: str, out_dir: str, *, gpus: int | None = None, overlap: tuple[str, ...] = (),
           prefix: str = chakra.DEFAULT_PREFIX, skip_empty: bool = False) -> tuple[int, int]:
    """Write the traces of a workload file; (ranks, nodes per rank at most)."""
    w = wformat.read(workload)
    nodes, groups = chakra_graph.traces(w, gpus=gpus, overlap=overlap, source=workload, skip_empty=skip_empty)
    chakra.write(out_dir, nodes, groups, prefix=prefix, source=str(workload), workload=w)
    return len(nodes), max((len(n) for n in nodes), default=0)


def export_megatron(ns: argparse.Namespace) -> tuple[int, int]:
    """Write the traces of Megatron's schedule for the setup the arguments describe."""
    from ..aiob import profile_file
    from ..base.errors import ConfigError
    from ..setup.arguments import setup_from_args
    from . import megatron
    from .generate import schedule_problems

    setup = setup_from_args(ns)
    problems = setup.problems() + schedule_problems(setup, "megatron", ns.megatron_version)
    if problems:
        raise ConfigError("; ".join(problems), key="arguments")
    profile = profile_file.read(ns.comp_filepath) if ns.aiob_enable and ns.comp_filepath else None
    schedules = [megatron.schedule(setup, profile, stage=s, megatron_version=ns.megatron_version)
                 for s in range(setup.pp)]
    nodes, groups = chakra_graph.megatron_traces(schedules, overlap=ns.overlap, skip_empty=ns.skip_empty)
    chakra.write(ns.output, nodes, groups, prefix=ns.prefix, source="megatron schedule",
                 workload=schedules[0].workload())
    return len(nodes), max((len(n) for n in nodes), default=0)


def overlap_groups(text: str) -> tuple[str, ...]:
    groups = tuple(g for g in text.split(",") if g)
    bad = [g for g in groups if g not in chakra_graph.GROUP_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown group {bad[0]!r}; expected some of "
                                         f"{','.join(chakra_graph.GROUP_KINDS)}")
    return groups


def cmd_chakra(ns: argparse.Namespace) -> None:
    from ..base.errors import ConfigError

    if ns.megatron:
        if ns.workload:
            raise ConfigError("give a workload file or --megatron, not both", key="workload")
        ranks, nodes = export_megatron(ns)
    elif not ns.workload:
        raise ConfigError("give a workload file (-w) or --megatron and a setup's training arguments", key="workload")
    else:
        ranks, nodes = export(ns.workload, ns.output, gpus=ns.gpus, overlap=ns.overlap, prefix=ns.prefix,
                              skip_empty=ns.skip_empty)
    print(f"{ns.output}: {ranks} rank(s), up to {nodes} node(s) each, and {chakra.GROUPS_FILE}")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "chakra", help="a SimAI workload as Chakra execution traces (one per rank) and its communicator groups",
        description="Write <out>/<prefix>.<rank>.et for every rank and <out>/comm_groups.json: the collectives, "
                    "groups and compute times SimAI runs for the workload, in its order (needs mlc-chakra).",
    )
    p.add_argument("-w", "--workload", help="a SimAI workload file")
    p.add_argument("--megatron", action="store_true",
                   help="instead of a file: Megatron's schedule of every pipeline stage for the training arguments "
                        "below, with the pipeline's sends and receives")
    p.add_argument("-o", "--output", required=True, help="the output folder")
    p.add_argument("-g", "--gpus", type=int, help="ranks (SimAI's -g; default: the header's all_gpus)")
    p.add_argument("--prefix", default=chakra.DEFAULT_PREFIX, help="file name prefix (default: trace)")
    p.add_argument("--overlap", type=overlap_groups, default=(), metavar="GROUPS",
                   help="groups whose weight-gradient collectives run beside the backward pass instead of "
                        "blocking it, comma-separated (e.g. DP,DP_EP; default: none, as SimAI runs the file)")
    p.add_argument("--skip-empty", action="store_true",
                   help="leave out collectives that move nothing, of zero bytes or on one rank (ASTRA-sim never "
                        "finishes some of them; the astra backends always leave them out)")
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_training_arguments

    add_training_arguments(p)
    add_schedule_arguments(p)
    add_aiob_arguments(p)
    p.set_defaults(func=cmd_chakra)
