"""Chakra execution traces: the files, written and read with mlc-chakra's own schema and encoder.

A trace set is a folder: ``<prefix>.<rank>.et`` for every rank (what ASTRA-sim's
``--workload-configuration=<folder>/<prefix>`` reads) and ``comm_groups.json``, the
communicator groups (ASTRA-sim's ``--comm-group-configuration``: ``{"1": [0, 1], ...}``).
Each ``.et`` file is a ``GlobalMetadata`` message, then one ``Node`` message per node, each
prefixed with its length as a varint (mlc-chakra's ``protolib.encodeMessage``).

What a node carries (``chakra_graph.Node``), in Chakra's attributes as its generator and
ASTRA-sim's feeder spell them: ``comm_type`` and ``comm_size`` (int64; an all-gather's per
rank, ``comm_size``), ``pg_name`` (the
group id as a decimal string: ASTRA-sim reads it with ``stoi`` and fails on an integer
attribute), ``comm_src``/``comm_dst``/``comm_tag`` (int32) for sends and receives, and
``is_cpu_op`` (false); a compute node's time is ``duration_micros``. commsweep adds
``commsweep_phase``, ``commsweep_row``, ``commsweep_group`` and, where SimAI runs another size
than the file says, ``commsweep_declared_size`` (ASTRA-sim ignores them), and keeps the
workload's header line and row names in the metadata, so its own traces can be audited like
the workload (``as_workload``); a trace from elsewhere lacks them.

mlc-chakra is imported on use (the ``chakra`` extra, docs/astra-sim.md): only this module
needs it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..base.errors import CommsweepError, InputError
from ..base.files import atomic_open, read_text, write_text
from .chakra_graph import Node
from .format import ROW_FIELDS, Row, Workload, parse_header

HEADER_ATTR = "commsweep_workload_header"
ROWS_ATTR = "commsweep_workload_rows"

GROUPS_FILE = "comm_groups.json"
DEFAULT_PREFIX = "trace"
# Chakra's schema version the traces follow (et_def.proto of mlcommons/chakra 1.0.0).
SCHEMA_VERSION = "0.0.4"
COLLECTIVE_TYPES = {"allreduce": "ALL_REDUCE", "allgather": "ALL_GATHER", "reducescatter": "REDUCE_SCATTER",
                    "alltoall": "ALL_TO_ALL"}
_KIND_TYPES = {"comp": "COMP_NODE", "coll": "COMM_COLL_NODE", "send": "COMM_SEND_NODE", "recv": "COMM_RECV_NODE"}


def _chakra():
    """mlc-chakra's generated schema and its length-prefixed encoder, or a clear error."""
    try:
        from chakra.schema.protobuf import et_def_pb2
        from chakra.src.third_party.utils import protolib
    except ImportError as err:
        raise CommsweepError(
            f"Chakra traces need mlc-chakra ({err}): pip install 'commsweep[chakra]', or the light way, "
            "pip install --no-deps mlc-chakra==1.0.0 protobuf") from None
    return et_def_pb2, protolib


def _attr(pb, name: str, **value):
    return pb.AttributeProto(name=name, **value)


def comm_size(node: Node) -> int:
    """Chakra's ``comm_size`` of a node: its bytes, but an all-gather's per rank. ASTRA-sim's
    all-gather (``Ring.cc``) takes comm_size as each rank's input and sends n x comm_size in
    all; SimAI's size is the gathered tensor, so an all-gather of S bytes on n ranks is S / n."""
    if node.collective == "allgather":
        if not node.group_size:
            raise ValueError(f"node {node.id} ({node.name}): an all-gather needs its group's size")
        return node.size // node.group_size
    return node.size


def to_message(node: Node, rank: int):
    """A node of rank ``rank`` as Chakra's ``Node`` message."""
    pb, _ = _chakra()
    msg = pb.Node(id=node.id, name=node.name, type=getattr(pb, _KIND_TYPES[node.kind]))
    msg.ctrl_deps.extend(node.deps)
    attrs = [_attr(pb, "is_cpu_op", bool_val=False)]
    if node.kind == "comp":
        msg.duration_micros = node.duration_us
    if node.kind == "coll":
        attrs.append(_attr(pb, "comm_type", int64_val=getattr(pb, COLLECTIVE_TYPES[node.collective or ""])))
    if node.kind != "comp":
        attrs.append(_attr(pb, "comm_size", int64_val=comm_size(node)))
        if node.collective == "allgather" and node.size % (node.group_size or 1):
            attrs.append(_attr(pb, "commsweep_size", int64_val=node.size))
    if node.pg is not None:
        attrs.append(_attr(pb, "pg_name", string_val=str(node.pg)))
    if node.kind in ("send", "recv"):
        src, dst = (rank, node.peer) if node.kind == "send" else (node.peer, rank)
        attrs += [_attr(pb, "comm_src", int32_val=src), _attr(pb, "comm_dst", int32_val=dst),
                  _attr(pb, "comm_tag", int32_val=node.tag or 0)]
    for key in ("phase", "group"):
        if getattr(node, key) is not None:
            attrs.append(_attr(pb, f"commsweep_{key}", string_val=getattr(node, key)))
    if node.row is not None:
        attrs.append(_attr(pb, "commsweep_row", int64_val=node.row))
    if node.declared is not None:
        attrs.append(_attr(pb, "commsweep_declared_size", int64_val=node.declared))
    msg.attr.extend(attrs)
    return msg


def write(folder: str | Path, nodes_by_rank: Sequence[Sequence[Node]], groups: dict[int, tuple[int, ...]],
          *, prefix: str = DEFAULT_PREFIX, source: str = "", workload: Workload | None = None) -> list[Path]:
    """Write a trace set (every rank's file, then the groups file); each file atomically.

    With ``workload`` (the file the traces come from), the metadata also keeps its header line
    and its row names, so that the workload can be told back from the traces (``as_workload``)."""
    pb, protolib = _chakra()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    # Ranks share most nodes (a compute node everywhere, a collective across its group): each
    # distinct one is made into a message once.
    made: dict = {}
    for rank, nodes in enumerate(nodes_by_rank):
        path = folder / f"{prefix}.{rank}.et"
        meta = pb.GlobalMetadata(version=SCHEMA_VERSION)
        if source:
            meta.attr.append(_attr(pb, "commsweep_source", string_val=source))
        if workload is not None:
            meta.attr.append(_attr(pb, HEADER_ATTR, string_val=workload.header.render()))
            meta.attr.append(_attr(pb, ROWS_ATTR, string_list=pb.StringList(values=[r.name for r in workload.rows])))
        with atomic_open(path, "wb", newline=None) as fh:
            protolib.encodeMessage(fh, meta)
            for node in nodes:
                key = (node, rank) if node.kind in ("send", "recv") else node
                msg = made.get(key)
                if msg is None:
                    msg = made[key] = to_message(node, rank)
                protolib.encodeMessage(fh, msg)
        paths.append(path)
    groups_path = folder / GROUPS_FILE
    write_text(groups_path, json.dumps({str(k): list(v) for k, v in groups.items()}, indent=1) + "\n")
    paths.append(groups_path)
    return paths


# -- reading ---------------------------------------------------------------------------


def _value(attr):
    which = attr.WhichOneof("value")
    return None if which is None else getattr(attr, which)


def from_message(msg, *, source: str, group_sizes: dict[int, int] | None = None, world: int = 1) -> Node:
    """A Chakra ``Node`` message as a ``Node``; an InputError for what ASTRA-sim could not run.
    ``group_sizes`` (group id -> ranks) and ``world`` give an all-gather's whole size."""
    pb, _ = _chakra()
    kinds = {getattr(pb, v): k for k, v in _KIND_TYPES.items()}
    if msg.type not in kinds:
        name = pb.NodeType.Name(msg.type) if msg.type in pb.NodeType.values() else f"node type {msg.type}"
        raise InputError(f"node {msg.id} ({msg.name!r}) is a {name}; only compute, collective, "
                         "send and receive nodes are read", file=source, field="type")
    attrs = {a.name: _value(a) for a in msg.attr}
    kind = kinds[msg.type]
    collective = None
    if kind == "coll":
        names = {getattr(pb, v): k for k, v in COLLECTIVE_TYPES.items()}
        code = attrs.get("comm_type")
        if code not in names:
            what = pb.CollectiveCommType.Name(code) if code in pb.CollectiveCommType.values() else repr(code)
            raise InputError(f"node {msg.id} ({msg.name!r}): collective {what} is not one SimAI or ASTRA-sim's "
                             "analytical backend runs", file=source, field="comm_type")
        collective = names[code]
    pg = attrs.get("pg_name")
    if pg is not None and not (isinstance(pg, str) and pg.isdigit()):
        raise InputError(f"node {msg.id} ({msg.name!r}): pg_name must be a decimal string (ASTRA-sim reads it "
                         f"with stoi), got {pg!r}", file=source, field="pg_name")
    peer = attrs.get("comm_dst") if kind == "send" else attrs.get("comm_src") if kind == "recv" else None
    pg_id = None if pg in (None, "", "0") else int(pg)
    size, n = int(attrs.get("comm_size") or 0), None
    if kind == "coll":
        if pg_id is not None and group_sizes is not None and pg_id not in group_sizes:
            raise InputError(f"node {msg.id} ({msg.name!r}) names communicator group {pg_id}, which {GROUPS_FILE} "
                             "does not hold", file=source, field="pg_name")
        n = world if pg_id is None or group_sizes is None else group_sizes[pg_id]
    if collective == "allgather":
        size = int(attrs["commsweep_size"]) if "commsweep_size" in attrs else size * (n or 1)
    return Node(id=msg.id, name=msg.name, kind=kind, deps=tuple(msg.ctrl_deps) + tuple(msg.data_deps),
                duration_us=msg.duration_micros, collective=collective, group_size=n,
                size=size, pg=pg_id,
                peer=peer, tag=attrs.get("comm_tag"), phase=attrs.get("commsweep_phase"),
                row=attrs.get("commsweep_row"), group=attrs.get("commsweep_group"),
                declared=attrs.get("commsweep_declared_size"))


def _decode(fh, message, *, path, what: str) -> bool:
    """mlc-chakra's decoder on the next message; an InputError for bytes that are not one."""
    _, protolib = _chakra()
    try:
        return protolib.decodeMessage(fh, message)
    except Exception as err:  # protobuf's DecodeError, a varint too long: a truncated or foreign file
        raise InputError(f"{what} does not decode: {err or type(err).__name__}", file=path) from None


def _metadata(fh, path):
    pb, _ = _chakra()
    meta = pb.GlobalMetadata()
    if not _decode(fh, meta, path=path, what="the GlobalMetadata message"):
        raise InputError("no GlobalMetadata message first (an empty or foreign file)", file=path)
    return meta


def read_metadata(path: str | Path) -> dict:
    """A rank file's GlobalMetadata attributes by name (a string list as a list)."""
    with open(path, "rb") as fh:
        meta = _metadata(fh, path)
    out = {}
    for a in meta.attr:
        value = _value(a)
        out[a.name] = list(value.values) if a.WhichOneof("value") == "string_list" else value
    return out


def read_trace(path: str | Path, groups: dict[int, tuple[int, ...]] | None = None, world: int = 1) -> list[Node]:
    """One rank's ``.et`` file: its metadata first, then its nodes (mlc-chakra's decoder).
    ``groups`` and ``world`` (the set's ranks) size its collectives' groups."""
    pb, _ = _chakra()
    nodes = []
    with open(path, "rb") as fh:
        _metadata(fh, path)
        while True:
            msg = pb.Node()
            if not _decode(fh, msg, path=path, what=f"node message {len(nodes) + 1}"):
                break
            nodes.append(from_message(msg, source=str(path), world=world,
                                      group_sizes=None if groups is None else {k: len(v) for k, v in groups.items()}))
    if not nodes:
        raise InputError("no nodes (ASTRA-sim would stop with no dependency-free node)", file=path)
    return nodes


def trace_files(folder: str | Path) -> tuple[str, list[Path]]:
    """A trace set's prefix and its rank files in rank order; an InputError for a gap."""
    folder = Path(folder)
    found: dict[str, dict[int, Path]] = {}
    for path in folder.glob("*.et"):
        prefix, _, rank = path.stem.rpartition(".")
        if prefix and rank.isdigit():
            found.setdefault(prefix, {})[int(rank)] = path
    if len(found) != 1:
        what = "no <prefix>.<rank>.et files" if not found else f"several prefixes ({', '.join(sorted(found))})"
        raise InputError(f"expected one trace set, found {what}", file=folder)
    prefix, ranks = next(iter(found.items()))
    missing = [r for r in range(max(ranks) + 1) if r not in ranks]
    if missing:
        raise InputError(f"rank {missing[0]}'s file {prefix}.{missing[0]}.et is missing", file=folder)
    return prefix, [ranks[r] for r in sorted(ranks)]


def read_groups(path: str | Path) -> dict[int, tuple[int, ...]]:
    """A communicator-group file: decimal keys, lists of ranks."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise InputError(f"not JSON: {err.msg}", file=path, line=err.lineno) from None
    if not isinstance(data, dict):
        raise InputError("expected an object of group id -> ranks", file=path)
    out = {}
    for key, ranks in data.items():
        if not key.isdigit() or not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
            raise InputError(f"group {key!r}: expected a decimal id and a list of ranks", file=path, field=key)
        out[int(key)] = tuple(ranks)
    return out


def read(folder: str | Path) -> tuple[list[list[Node]], dict[int, tuple[int, ...]]]:
    """A trace set: every rank's nodes, and its groups (none when it has no groups file)."""
    _, paths = trace_files(folder)
    groups_path = Path(folder) / GROUPS_FILE
    groups = read_groups(groups_path) if groups_path.exists() else {}
    return [read_trace(p, groups, len(paths)) for p in paths], groups


def is_trace_set(path: str | Path) -> bool:
    """Whether a path is a folder of Chakra traces (what ``volumes`` and ``audit`` then read)."""
    path = Path(path)
    return path.is_dir() and any(path.glob("*.et"))


def as_workload(folder: str | Path) -> Workload:
    """The SimAI workload a commsweep trace set was exported from, told back from rank 0's trace:
    its header and row names from the metadata, each row's collectives and sizes from the nodes,
    its compute times to the microsecond the trace keeps. A trace set from elsewhere has no header
    or rows to tell (an InputError saying so)."""
    _, paths = trace_files(folder)
    groups_path = Path(folder) / GROUPS_FILE
    groups = read_groups(groups_path) if groups_path.exists() else {}
    meta = read_metadata(paths[0])
    if HEADER_ATTR not in meta or ROWS_ATTR not in meta:
        raise InputError("these traces do not say the workload's header and rows (not exported by commsweep): "
                         "their volumes can be read, not their audit", file=paths[0])
    header = parse_header(meta[HEADER_ATTR], source=paths[0])
    names = meta[ROWS_ATTR]
    fields: list[dict] = [{"name": n, "dependency": -1, **{f: 0 for f in ROW_FIELDS[2:]}} for n in names]
    for row in fields:
        for phase in ("fwd", "ig", "wg"):
            row[f"{phase}_comm"] = "NONE"
        row["update_time"] = 100
    for node in read_trace(paths[0], groups, len(paths)):
        if node.row is None or node.phase not in ("fwd", "ig", "wg") or not 0 <= node.row < len(fields):
            raise InputError(f"node {node.id} ({node.name!r}) names no row and phase of the workload", file=paths[0])
        row = fields[node.row]
        if node.kind == "comp":
            row[f"{node.phase}_compute"] += node.duration_us * 1000
        elif node.kind == "coll":
            base = {v: k for k, v in _COMM_NAMES.items()}[node.collective or ""]
            suffix = {"EP": "_EP", "DP_EP": "_DP_EP"}.get(node.group or "", "")
            row[f"{node.phase}_comm"] = base + suffix
            row[f"{node.phase}_size"] = node.size if node.declared is None else node.declared
    return Workload(header=header, rows=tuple(Row(**f) for f in fields))


_COMM_NAMES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
               "ALLTOALL": "alltoall"}
