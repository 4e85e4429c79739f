"""``commsweep chakra``: a SimAI workload as Chakra execution traces, one per rank, and its
communicator groups (what ASTRA-sim and other Chakra tools read; docs/astra-sim.md)."""

from __future__ import annotations

import argparse

from . import chakra, chakra_graph
from . import format as wformat


def export(workload: str, out_dir: str, *, gpus: int | None = None, overlap: tuple[str, ...] = (),
           prefix: str = chakra.DEFAULT_PREFIX) -> tuple[int, int]:
    """Write the traces of a workload file; (ranks, nodes per rank at most)."""
    w = wformat.read(workload)
    nodes, groups = chakra_graph.traces(w, gpus=gpus, overlap=overlap, source=workload)
    chakra.write(out_dir, nodes, groups, prefix=prefix, source=str(workload), workload=w)
    return len(nodes), max((len(n) for n in nodes), default=0)


def overlap_groups(text: str) -> tuple[str, ...]:
    groups = tuple(g for g in text.split(",") if g)
    bad = [g for g in groups if g not in chakra_graph.GROUP_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown group {bad[0]!r}; expected some of "
                                         f"{','.join(chakra_graph.GROUP_KINDS)}")
    return groups


def cmd_chakra(ns: argparse.Namespace) -> None:
    ranks, nodes = export(ns.workload, ns.output, gpus=ns.gpus, overlap=ns.overlap, prefix=ns.prefix)
    print(f"{ns.output}: {ranks} rank(s), up to {nodes} node(s) each, and {chakra.GROUPS_FILE}")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "chakra", help="a SimAI workload as Chakra execution traces (one per rank) and its communicator groups",
        description="Write <out>/<prefix>.<rank>.et for every rank and <out>/comm_groups.json: the collectives, "
                    "groups and compute times SimAI runs for the workload, in its order (needs mlc-chakra).",
    )
    p.add_argument("-w", "--workload", required=True, help="a SimAI workload file")
    p.add_argument("-o", "--output", required=True, help="the output folder")
    p.add_argument("-g", "--gpus", type=int, help="ranks (SimAI's -g; default: the header's all_gpus)")
    p.add_argument("--prefix", default=chakra.DEFAULT_PREFIX, help="file name prefix (default: trace)")
    p.add_argument("--overlap", type=overlap_groups, default=(), metavar="GROUPS",
                   help="groups whose weight-gradient collectives run beside the backward pass instead of "
                        "blocking it, comma-separated (e.g. DP,DP_EP; default: none, as SimAI runs the file)")
    p.set_defaults(func=cmd_chakra)
