"""The sweep-wide steps, in one table: what the rules run, the run's check reads and the
cluster profiles bundle.

A sweep-wide step reads every point's outputs (or a table made of them) and writes a table,
a figure or the answer page. Each is a ``commsweep`` subcommand run through ``commsweep
guard``, with a status file of its own (``results/steps/<name>.status``): the check
(rule ``check``) reads the statuses of this sweep's steps (``of_sweep``), the figures' rule
draws the figures of the table in its one job, rule ``tables`` the tables they read in
another (a step's ``rule``), and on a cluster the steps of a ``group``
run as one job (the profiles' ``groups:``, which ``tests/test_steps.py`` holds to this
table). A step that only some sweeps have says when (``when``). Adding a step is a row here
and its rule (a figure: a row alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..analysis.figures.names import (AUDIT_BY_KIND, DIFFERENCE_BY_CAUSE, EXPOSED_BY_GROUP, EXPOSED_TP_BY_OVERLAP,
                                      FIGURES, TIMELINE, TP_BYTES_BY_PHASE, VOLUME_BY_GROUP, VOLUME_BY_TP)

# The sweeps that have a step: every sweep, or one with an audited point, an MoE point,
# a packet-level point, measured traces, traces of several megatron-core releases, or
# ASTRA-sim beside SimAI (simulator.astra.root).
WHEN = ("always", "audited", "moe", "packet", "traces", "releases", "astra")


@dataclass(frozen=True)
class Step:
    """One sweep-wide step."""

    name: str  # its status file's name, results/steps/<name>.status
    command: tuple[str, ...]  # the commsweep subcommand and its words ("<input.x>": the rule's)
    after: tuple[str, ...] = ()  # the steps whose outputs it reads
    category: str = ""  # where the report shows its outputs
    caption: str = ""  # a figure's caption, workflow/report/<caption>.rst
    when: str = "always"
    # The rule whose job runs it (default: its name). Several steps of one rule run in its one
    # job, one Python process, each still guarded with its own status: every figure in rule
    # figures, the tables every figure reads in rule tables (a job costs Snakemake about 0.4
    # CPU second to start and book, a step run in a job of its own its Python start too).
    rule: str = ""
    group: str | None = "tables"  # the cluster job its rule is bundled into (None: a job of its own)
    # What its rule's job asks for: memory (MB) and run time (minutes); the cluster profiles
    # turn them into the job's request (threads: 1).
    mem_mb: int = 2048
    runtime: int = 10

    @property
    def figure(self) -> str | None:
        """The figure it draws (results/plots/<figure>.png, ``figures.names``), for a figure's step."""
        return self.name.removeprefix("plot_") if self.rule == "figures" else None


def _figure(name: str, after: str, category: str, *options: str, caption: str | None = None,
            when: str = "always") -> Step:
    """A figure's step: ``commsweep plot`` draws figure ``name`` (``figures.names``) from the
    table its rule's input of that name holds (``<input.summary>``, ...)."""
    figure = FIGURES[name]
    command = ("plot", figure.kind, f"<input.{figure.reads}>", *options)
    return Step(f"plot_{name}", command, (after,), category, caption or name, when, "figures")


def table(tp_overlap: float | int = 0) -> tuple[Step, ...]:
    """Every sweep-wide step, in the order the check lists them; ``tp_overlap``: the
    sweep's ``simulator.overlap.tp`` (the ratio of its points without a tp_overlap axis)."""
    return (
        # The tables every figure reads, made by one job (rule tables), in this order.
        Step("summarize", ("summarize",), rule="tables"),
        Step("compare", ("compare",), ("summarize",), "Audit against Megatron", rule="tables"),
        Step("difference_by_cause", ("causes",), (), "1. The answer", rule="tables"),
        _figure(VOLUME_BY_TP, "summarize", "Communication volumes"),
        _figure(TP_BYTES_BY_PHASE, "summarize", "Communication volumes"),
        _figure(EXPOSED_BY_GROUP, "summarize", "Simulated times"),
        _figure(AUDIT_BY_KIND, "compare", "Audit against Megatron"),
        Step(f"plot_{TIMELINE}", ("timeline",), (), "Simulated times", TIMELINE, "audited", "figures"),
        _figure(DIFFERENCE_BY_CAUSE, "difference_by_cause", "1. The answer", "--sweep", "<input.sweep>",
                caption="difference_by_cause_plot"),
        _figure(EXPOSED_TP_BY_OVERLAP, "summarize", "1. The answer", "--tp-overlap", str(tp_overlap)),
        # The MoE view (docs/moe.md): bytes per group, EP and DP_EP beside TP and DP.
        _figure(VOLUME_BY_GROUP, "summarize", "Communication volumes", when="moe"),
        # The answer under packet-level simulation: each packet-level AICB point against its
        # packet-level Megatron point (no batch holds both: each packet point is a batch of its own).
        Step("packet_difference_by_cause", ("causes", "--simulation", "packet"), (), "1. The answer", when="packet",
             mem_mb=1024, runtime=5),
        # Every finished analytical point through the user's ASTRA-sim, beside SimAI's time
        # (simulate.astra.sweep); before the answer, whose page shows it. A job of its own: its
        # run time is ASTRA-sim's.
        Step("astra_compare", ("astra-compare",), (), "ASTRA-sim beside SimAI", when="astra", group=None,
             mem_mb=2048, runtime=60),
        Step("answer", ("answer",), ("difference_by_cause",), "1. The answer", mem_mb=1024, runtime=5),
        Step("packet_vs_analytical", ("packet-compare",), ("summarize",), "Packet-level simulation", when="packet",
             mem_mb=512, runtime=5),
        Step("trace_check", ("trace-check",), (), "Megatron schedule", when="traces", group=None, mem_mb=512, runtime=5),
        Step("trace_versions", ("trace-versions",), (), "Megatron schedule", when="releases", group=None, mem_mb=512,
             runtime=5),
    )


def of_sweep(has: Mapping[str, bool], tp_overlap: float | int = 0) -> dict[str, Step]:
    """This sweep's steps by name, in the table's order; ``has``: which of ``WHEN`` it has
    (``always`` is implied)."""
    unknown = set(has) - set(WHEN)
    if unknown:
        raise ValueError(f"unknown kinds of sweep: {', '.join(sorted(unknown))}")
    return {s.name: s for s in table(tp_overlap) if s.when == "always" or has.get(s.when)}


def groups() -> dict[str, str]:
    """Rule -> the cluster job it is bundled into: what each cluster profile's ``groups:`` says."""
    return {(s.rule or s.name): s.group for s in table() if s.group is not None}


def resources(rule: str) -> dict[str, int]:
    """The resources of a step's rule (rule figures: those of its figures, which share one job)."""
    found = {(s.mem_mb, s.runtime) for s in table() if (s.rule or s.name) == rule}
    if len(found) != 1:
        raise ValueError(f"{rule}: {'no step' if not found else 'steps of differing resources'} in the table")
    ((mem_mb, runtime),) = found
    return {"mem_mb": mem_mb, "runtime": runtime}
