"""The landing page: the sweep's answer in words, from ``difference_by_cause.csv``.

``results/answer.md`` (and the same page as reStructuredText, ``results/answer.rst``,
which ``workflow/report/workflow.rst`` includes as the front page of ``report.html``):

1. the one-line answer, with this run's numbers: ALLREDUCE is what Megatron issues, and
   what the AIOB path's NONE drops (the ``missing_bwd_tp_allreduce`` cause) at the
   headline setting (the first SP-off setting with TP > 1 where the AIOB path drops
   them, on the sweep's first network);
2. beside it, what both paths add there that Megatron never sends (the layernorm
   all-reduce of 2P bytes), so that neither error hides the other;
3. what SimAI does with NONE;
4. per setting, a verdict per path: its net difference and its largest causes;
5. in a sweep with packet-level points, the same answer under packet-level simulation
   (``packet_difference_by_cause.csv``): what the dropped all-reduces cost in exposed time
   when SimAI_simulator runs both workloads, beside the analytical number, and its verdicts;
   in a sweep that ran ASTRA-sim, each path's difference from Megatron in both simulators
   (``astra_answer``);
6. the figures (the difference by cause right after the one-line answer).

Every number on the page is a sum of rows of ``difference_by_cause.csv`` (bytes, rows,
exposed time); ``tests/test_answer.py`` checks each one against the table. The page is
built as a list of blocks, rendered to Markdown and to reStructuredText from the same
text (inline markup: ``**bold**`` and ```code```).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..setup.points import AICB_AIOB, AICB_DEFAULT, Invalid, PointRow
from . import causes as cz
from .causes.rules import FSDP_CAUSES
from .figures import names

GiB = 2**30
PATH_NAMES = {AICB_DEFAULT: "AICB default path", AICB_AIOB: "AICB AIOB path"}
TOP_CAUSES = 3
# What megatron's overlapped buckets, FSDP and FP8 parameter gathers change in AICB's difference
# (AICB has none of them): each setting's verdict names all of these, however small.
DP_SETTING_CAUSES = ("dp_buckets", *FSDP_CAUSES)
# What no SimAI workload file can hold (CP's exchange, FSDP's per-layer gathers): the analytical
# simulation prices their exposed part; a simulation that cannot (packet level) leaves them bytes only.
UNTIMED_CAUSES = ("cp_attention_exchange_missing", "fsdp_param_gathers_missing")


@dataclass(frozen=True)
class Block:
    """A piece of the page: kind is h1, h2, p, ul (``items``: text and its sub-items) or img
    (``text`` = caption, ``path``)."""

    kind: str
    text: str = ""
    items: tuple[tuple[str, tuple[str, ...]], ...] = ()
    path: str = ""


# -- numbers as the page writes them ----------------------------------------------------------


def signed(text: str, value: float) -> str:
    return ("+" if value > 0 else "\u2212" if value < 0 else "") + text


def exact_bytes(n: int) -> str:
    """-2181038080 -> '−2,181,038,080 bytes'."""
    return signed(f"{abs(n):,} bytes", n)


def gib(n: float) -> str:
    """Bytes in GiB, or in MiB or KiB or bytes where GiB would round to 0.00."""
    for unit, size in (("GiB", GiB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size / 10:
            return signed(f"{abs(n) / size:,.2f} {unit}", n)
    return signed(f"{abs(n):,} bytes", n)


def size(text: str) -> str:
    """A signed quantity as a size: '−7.33 ms' -> '7.33 ms'."""
    return text.lstrip("+\u2212")


def ms(us: float | None) -> str:
    if us is None:
        return "no simulated time"
    return signed(f"{abs(us) / 1000:,.2f} ms", us)


# -- what the page says --------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A cause's rows of one point with one sign (+ extra, - short), summed."""

    cause: str
    group: str
    rows: int
    bytes: int
    exposed_us: float | None


def shares(rows: list[cz.Row]) -> list[Share]:
    """A point's causes, + and - apart (never netted), largest first (bytes, then time)."""
    acc: dict[tuple[str, int], list] = {}
    groups: dict[tuple[str, int], set] = {}
    for r in rows:
        sign = (r.bytes > 0) - (r.bytes < 0) or ((r.exposed_us or 0) > 0) - ((r.exposed_us or 0) < 0)
        entry = acc.setdefault((r.cause, sign), [0, 0, 0.0])
        entry[0] += r.rows
        entry[1] += r.bytes
        entry[2] = None if entry[2] is None or r.exposed_us is None else entry[2] + r.exposed_us
        groups.setdefault((r.cause, sign), set()).add(r.group)
    out = [Share(c, "/".join(sorted(g for g in groups[(c, s)] if g)), n, b, e) for (c, s), (n, b, e) in acc.items()]
    return sorted(out, key=lambda s: (-abs(s.bytes), -abs(s.exposed_us or 0.0), s.cause))


def _describe(share: Share, both_signs: set[str]) -> str:
    where = f" on {share.group}" if share.cause in both_signs and share.group else ""
    timed = "" if share.exposed_us is None else f" ({ms(share.exposed_us)})"  # no time: the page says why
    if share.cause in UNTIMED_CAUSES and not share.exposed_us:
        timed = " (no time: no workload file holds it)"
    return f"`{share.cause}`{where} {gib(share.bytes)}{timed}"


def verdict(panel: cz.Panel, path: str) -> str:
    """One path's line for one setting: its net difference, then its largest causes."""
    rows = panel.rows.get(path, [])
    if not rows:
        return f"{PATH_NAMES[path]}: matches Megatron (no difference)."
    found = [s for s in shares(rows) if s.bytes or s.exposed_us]
    signs: dict[str, set[int]] = {}
    for s in found:
        signs.setdefault(s.cause, set()).add((s.bytes > 0) - (s.bytes < 0))
    both = {c for c, v in signs.items() if len(v) > 1}
    timed = all(r.exposed_us is not None for r in rows)
    net = gib(panel.total(path)) + (f", {ms(panel.total(path, 'exposed'))}" if timed else "")
    top = "; ".join(_describe(s, both) for s in found[:TOP_CAUSES])
    rest = len(found) - TOP_CAUSES
    more = f"; and {rest} smaller" if rest > 0 else ""
    dp = [s for s in shares(rows) if s.cause in DP_SETTING_CAUSES and (s.bytes or abs(s.exposed_us or 0) >= 5)]
    sync = f" Of the DP sync: {'; '.join(_describe(s, both) for s in dp)}." if dp else ""
    return f"{PATH_NAMES[path]}: net {net}. Largest: {top}{more}.{sync}"


def verdicts(panels: list[cz.Panel]) -> Block:
    """Per setting, each path's verdict (``verdict``)."""
    return Block("ul", items=tuple(
        (f"**{panel.label}**", tuple(verdict(panel, path) for path in PATH_NAMES if path in panel.points))
        for panel in panels))


def headline(panels: list[cz.Panel]) -> cz.Panel | None:
    """The setting the answer quotes: SP off, TP > 1, where the AIOB path drops backward
    all-reduces (the first such in model, SP, TP order)."""
    for panel in panels:
        rows = panel.rows.get(AICB_AIOB, [])
        if any(r.cause == "missing_bwd_tp_allreduce" for r in rows) and not any(r.sp for r in rows):
            return panel
    return None


# What the headline's setting needs of an AICB point, per config key: the advice that adds
# it, the words for points that have it, and the test of a point's (tp, sp, aiob).
HEADLINE_NEEDS = (
    ("`sweep.tp` (a TP above 1)", "TP above 1", lambda tp, sp, aiob: tp > 1),
    ("`sweep.sp` (false)", "SP off", lambda tp, sp, aiob: not sp),
    ("`sweep.aiob` (true)", "AIOB on", lambda tp, sp, aiob: aiob),
)


def headline_missing(aicb: list[PointRow], skipped: list[Invalid]) -> tuple[list[str], dict[str, list[str]]]:
    """Why no AICB point has the headline's setting (TP > 1, SP off, AIOB on): the config
    keys whose value the sweep never asks for (adding it would make such points), and the
    settings it asks for but could not run, with the reasons (``skipped``: the points
    table's skipped rows; advice to ask again for what AICB refuses cannot be followed)."""
    def cells(s: Invalid) -> tuple[int, bool, bool]:
        return int(s.values["tp"]), s.values["sp"] == "True", s.values["aiob"] == "True"

    refused = [s for s in skipped if s.values.get("schedule") == "aicb"]
    add, cannot = [], {}
    for key, words, has in HEADLINE_NEEDS:
        if any(has(p.tp, p.sp, p.aiob) for p in aicb):
            continue
        why = [s for s in refused if has(*cells(s))]
        if why:
            cannot[words] = list(dict.fromkeys(r for s in why for r in s.reasons))
        else:
            add.append(key)
    if not add and not cannot:  # each value runs, but never all three together
        why = [s for s in refused if all(has(*cells(s)) for _, _, has in HEADLINE_NEEDS)]
        if why:
            cannot["TP above 1, SP off and AIOB on together"] = list(dict.fromkeys(r for s in why for r in s.reasons))
    return add, cannot


def lacks(rows: list[cz.Row], points: dict[str, PointRow], head: cz.Panel | None,
          skipped: list[Invalid] = ()) -> list[str]:
    """What keeps this sweep from answering, each with the config key that adds it: no
    ``aicb`` point (nothing to hold against Megatron), no ``megatron`` point (bytes but no
    simulated time), or no setting the headline quotes (TP > 1, SP off, AIOB on; where the
    sweep asks for it but AICB refuses it, the reason instead of a key)."""
    aicb = [p for p in points.values() if p.schedule == "aicb"]
    if not aicb:
        return ["**This sweep cannot answer: it has no `aicb` point.** The answer holds the workloads of AICB's "
                "two paths against Megatron's; add `aicb` to `sweep.schedule` (beside `megatron`)."]
    out = []
    if not any(p.schedule == "megatron" for p in points.values()):
        out.append("**This sweep has no `megatron` point,** so each AICB point's difference is in bytes only "
                   "(against Megatron's schedule) and has no simulated time; add `megatron` to `sweep.schedule` "
                   "for the exposed time.")
    if not rows:
        out.append("**No AICB point of this sweep has a difference to show:** each matches Megatron, or has no "
                   "audit (a failed point: `results/status.txt` lists them).")
    elif head is None and not deepseek(rows):  # a DeepSeek sweep has its own headline (AICB refuses SP off)
        add, cannot = headline_missing(aicb, list(skipped))
        what = f"; add to {', '.join(add)}" if add else ""
        what += "".join(f"; it asks for AICB points with {words}, but AICB cannot make them (skipped, see "
                        f"`sweep.csv`): {'; '.join(why)}" for words, why in cannot.items())
        out.append("**The headline, what the AIOB path drops, needs a setting with TP above 1, SP off and AIOB "
                   f"on, where the AIOB path writes `NONE`:** this sweep has none{what}.")
    return out


def deepseek(rows: list[cz.Row]) -> bool:
    """Whether the sweep's AICB points are DeepSeek ones (a DeepSeek cause among their rows)."""
    return any(r.cause in cz.DEEPSEEK_CAUSES for r in rows)


def deepseek_blocks(panels: list[cz.Panel], points: dict[str, PointRow]) -> list[Block]:
    """What AICB's DeepSeek frame gets wrong (docs/deepseek.md), quoted at the first setting
    whose AIOB path has MLA findings (TP above 1), else the first with a DeepSeek cause; and
    why the default path has no point."""
    with_mla = [p for p in panels if any(r.cause.startswith("mla_") for r in p.rows.get(AICB_AIOB, []))]
    with_any = [p for p in panels if deepseek(p.rows.get(AICB_AIOB, []))]
    if not with_any:
        return []
    head = (with_mla or with_any)[0]
    rows = head.rows[AICB_AIOB]
    where = f"{head.label} (network {head.network})"

    def cause(slug: str) -> str:
        _, nbytes, us = _cause_total(rows, slug)
        return f"{gib(nbytes)}{'' if us is None else ', ' + ms(us)}; `{slug}`"

    out = []
    if with_mla:
        out.append(Block("p", (
            "**DeepSeek: AICB sizes multi-latent attention's TP traffic on the hidden size.** With SP, "
            "megatron-core's MLA projects each rank's sequence shard down to the compressed latents on every TP "
            "rank and all-gathers the latents (and the key's RoPE part), not the hidden state; AICB's DeepSeek "
            "frame all-gathers a whole activation before each of `attention_q_column` and `attention_kv_column`, "
            "writes their backward reduce-scatters with 0 bytes and has no weight-gradient gathers. "
            f"For {where} its AIOB path gathers too much forward ({cause('mla_gathers_sized_on_hidden')}) and "
            f"drops the backward ({cause('mla_latent_reducescatters')}; "
            f"{cause('mla_latent_wgrad_gathers_missing')}).")))
    moe = [slug for slug in ("moe_dispatch_fp8_scaled", "moe_shared_expert_backward_dropped",
                             "moe_shared_experts_in_expert_sync") if any(r.cause == slug for r in rows)]
    if moe:
        out.append(Block("p", (
            "**Its MoE layers: the forward dispatch at FP8, the shared experts half there.** AICB sizes the "
            "forward token dispatch as FP8 (33/64 of megatron's bf16 all-to-all), writes the shared experts "
            "without their backward TP collectives, and syncs their gradients again with the routed experts' on "
            f"DP_EP. For {where}: " + "; ".join(f"{cause(slug)}" for slug in moe) + ".")))
    if not any(p.schedule == "aicb" and not p.aiob for p in points.values()):
        out.append(Block("p", (
            "**AICB's default path writes no DeepSeek MoE workload:** it crashes on the DeepSeek frame with SP "
            "(its MLA down projections look up AIOB compute times it does not have) and refuses MoE without SP, "
            "so this sweep's default-path points are refused (`sweep.csv` lists them with AICB's error) and "
            "the AIOB path is AICB's only DeepSeek workload.")))
    return out


def cp_blocks(panels: list[cz.Panel]) -> list[Block]:
    """What AICB's workloads miss with context parallelism (docs/audit.md), quoted at the
    setting with CP that misses the most bytes of CP exchange, among those with TP collectives
    (at TP 1 merging micro-batches moves no bytes) where there are any."""
    with_cp = [(p, path) for p in panels for path in (AICB_DEFAULT, AICB_AIOB)
               if any(r.cause in cz.CP_CAUSES for r in p.rows.get(path, []))]
    if not with_cp:
        return []

    def weight(pair: tuple[cz.Panel, str]) -> tuple[bool, int]:
        rows = pair[0].rows[pair[1]]
        return (_cause_total(rows, "cp_microbatches_merged")[1] != 0,
                -_cause_total(rows, "cp_attention_exchange_missing")[1])

    head, path = max(with_cp, key=weight)
    rows = head.rows[path]

    def cause(slug: str) -> str:
        return _cause_text(rows, slug)

    return [Block("p", (
        "**With context parallelism AICB's workloads miss the attention's CP exchange.** AICB has no context "
        "parallelism: its workload for a CP point is that of the same GPUs without CP, every CP rank a DP rank, "
        "with CP times fewer micro-batches of whole sequences. It lacks the key/value exchange every layer runs "
        "over the CP group in every micro-batch, which SimAI's format cannot hold (no CP group): the simulation "
        "of Megatron's workload adds what the attention waits for of it to the core attention's compute, and "
        "counts that as its exposed time. Its TP collectives are CP times "
        "Megatron's in the micro-batches it has, and the others are missing; its DP gradient sync runs on "
        "the same DP x CP GPUs as Megatron's. "
        f"For {head.label} ({PATH_NAMES[path]}): {cause('cp_attention_exchange_missing')}; "
        f"{cause('cp_microbatches_merged')}; {cause('cp_sized_on_whole_sequence')}."))]


def bucket_blocks(panels: list[cz.Panel]) -> list[Block]:
    """What AICB's one DP row per iteration miscounts when megatron overlaps its buckets
    (the cause ``dp_buckets``), quoted at each overlapped setting's AICB paths."""
    quoted = []
    for panel in panels:
        for path in (AICB_DEFAULT, AICB_AIOB):
            _, _, us = _cause_total(panel.rows.get(path, []), "dp_buckets")
            if any(r.cause == "dp_buckets" for r in panel.rows.get(path, [])) and us is not None:
                quoted.append(f"{panel.label} ({PATH_NAMES[path]}): {ms(us)}")
    if not quoted:
        return []
    return [Block("p", (
        "**With megatron's overlapped buckets AICB counts the DP sync whole.** AICB writes one DP gradient "
        "reduce-scatter and one parameter all-gather per iteration, after the backward pass, and SimAI exposes "
        "them whole. Megatron's distributed optimizer reduces bucket by bucket, each as soon as its bucket's last "
        "gradient is ready in the last backward pass, and (with overlap_param_gather) gathers each bucket's "
        "parameters in the next forward pass: the same bytes, hidden behind the compute that remains, the last "
        "buckets' exposed. What AICB's row exposes beyond Megatron's buckets (`dp_buckets`; the bytes AICB's "
        "parameter count adds are `dp_sync_sized_by_mock_params`'s): " + "; ".join(quoted) + ". On the AIOB "
        "path that is the time Megatron hides. The default path has no compute times, so nothing hides: "
        "its reduce-scatter exposes what Megatron's buckets do, and its parameter all-gather runs on TP "
        "(`dp_allgather_on_tp`), so that its figure is Megatron's bucketed all-gathers on DP, which it lacks."))]


def fsdp_blocks(panels: list[cz.Panel]) -> list[Block]:
    """What AICB's distributed-optimizer workload misses or miscounts with FSDP or FP8
    parameter gathers (``FSDP_CAUSES``), quoted at the first setting of each (FSDP, FP8)
    combination, on the AIOB path where there is one (it has compute times)."""
    quoted: dict[tuple[bool, bool], str] = {}
    for panel in panels:
        for path in (AICB_AIOB, AICB_DEFAULT):
            rows = panel.rows.get(path, [])
            found = [c for c in FSDP_CAUSES if any(r.cause == c for r in rows)]
            kind = (any(c.startswith("fsdp_") for c in found), "fp8_param_gather_in_bf16" in found)
            if found and kind not in quoted:
                said = "; ".join(_cause_text(rows, c) for c in found)
                quoted[kind] = f"{panel.label} ({PATH_NAMES[path]}): {said}"
    if not quoted:
        return []
    return [Block("p", (
        "**With FSDP or FP8 parameter gathers AICB writes the distributed optimizer's sync in bf16.** AICB has "
        "neither: its workload is the same for every such setting, one gradient reduce-scatter and one "
        "parameter all-gather of all the rank's parameters per iteration. With megatron-fsdp's "
        "optim_grads_params Megatron all-gathers each layer's parameters before its forward and again before "
        "its backward, and reduce-scatters its gradients, in every micro-batch; SimAI's forward and "
        "input-gradient columns have no DP group, so no workload file holds those all-gathers, Megatron's "
        "included: the Chakra traces carry them, and the simulation prices the part of each that the "
        "neighbouring layer's compute does not hide, as compute of the row it precedes. With FP8 gathers "
        "the linear layers' weights are gathered in 1 byte, AICB's in 2. " + "; ".join(quoted.values()) + "."))]


def _cause_text(rows: list[cz.Row], cause: str) -> str:
    """A cause's sum over ``rows`` as the page writes it: bytes, then exposed time (or why none)."""
    _, nbytes, us = _cause_total(rows, cause)
    if cause in UNTIMED_CAUSES and not us:
        return f"`{cause}` {gib(nbytes)} (no time: no workload file holds it)"
    return f"`{cause}` {gib(nbytes)}{'' if us is None else ' (' + ms(us) + ')'}"


def _cause_total(rows: list[cz.Row], cause: str) -> tuple[int, int, float | None]:
    mine = [r for r in rows if r.cause == cause]
    exposed = None if any(r.exposed_us is None for r in mine) else sum(r.exposed_us for r in mine)
    return sum(r.rows for r in mine), sum(r.bytes for r in mine), exposed


def packet_blocks(packet_rows: list[cz.Row] | None, points: dict[str, PointRow],
                  analytical: list[cz.Panel], failed: Sequence[str] = ()) -> list[Block]:
    """The answer under packet-level simulation (``packet_difference_by_cause.csv``; None: the
    sweep has no packet-level point): what the AIOB path's dropped all-reduces cost in exposed
    time when SimAI's NS-3 simulator runs both workloads, beside what the analytical model says
    for the same setting (``analytical``: its panels), then each setting's verdicts. ``failed``:
    each failed packet-level point and why (``packet.without_pairs``), said where no pair is left."""
    if packet_rows is None:
        return []
    blocks = [Block("h2", "Under packet-level simulation (SimAI_simulator)")]
    packet = {k: p for k, p in points.items() if p.simulation == "packet"}
    panels = cz.panels(packet_rows, packet)
    timed = [r for r in packet_rows if r.exposed_us is not None]
    if not timed:
        has = {p.schedule for p in packet.values()}
        blocks.append(Block("p", (
            "**This sweep has no packet-level pair to answer with:** the answer under packet-level simulation "
            "holds each packet-level AICB point against the packet-level Megatron point of its setting; "
            + ("add `megatron` to `sweep.schedule`." if "megatron" not in has else
               "add `aicb` to `sweep.schedule`." if "aicb" not in has else
               "none of its packet-level AICB points has both simulations (`results/status.txt` lists failed "
               "points).")
            + " `config/ns3.yaml` is such a sweep.")))
        if failed:
            blocks.append(Block("p", "The packet-level points that failed (the next run retries them):"))
            blocks.append(Block("ul", items=tuple((f"`{line.split(': ', 1)[0]}`: {line.split(': ', 1)[1]}", ())
                                                  for line in failed)))
        return blocks
    head = headline(panels)
    if head is not None:
        aiob = head.rows[AICB_AIOB]
        n, missing, missing_us = _cause_total(aiob, "missing_bwd_tp_allreduce")
        twin = next((a for a in analytical if a.setting == head.setting and AICB_AIOB in a.rows), None)
        _, _, analytical_us = _cause_total(twin.rows[AICB_AIOB], "missing_bwd_tp_allreduce") if twin else (0, 0, None)
        beside = ""
        if analytical_us is not None and missing_us is not None:
            ratio = f", {missing_us / analytical_us:.2f}x as much at packet level" if analytical_us else ""
            beside = f" (the analytical model: {size(ms(analytical_us))}{ratio})"
        net, net_analytical = head.total(AICB_AIOB, "exposed"), twin.total(AICB_AIOB, "exposed") if twin else None
        more = missing_us is not None and analytical_us is not None and abs(missing_us) > abs(analytical_us)
        blocks.append(Block("p", (
            f"**At packet level the dropped all-reduces leave out {size(ms(missing_us))} of exposed time.** "
            f"For {head.label} (network {head.network}) SimAI's packet-level simulator ran the AIOB path's workload "
            "and Megatron's on the same topology and `SimAI.conf`: the "
            f"{n} backward TP all-reduces the AIOB path drops (`missing_bwd_tp_allreduce`, {size(gib(missing))}) took "
            f"{size(ms(missing_us))} of exposed time in Megatron's run{beside}. The AIOB path's net difference from "
            f"Megatron comes to {ms(net)} of exposed communication"
            + (f" ({ms(net_analytical)} analytically)" if net_analytical is not None else "")
            + "."
            + (" Each ring step of a packet-level all-reduce waits for the send latency and shares the links "
               "with the other flows, which the analytical model's formula leaves out." if more else ""))))
    blocks.append(verdicts(panels))
    blocks.append(Block("p", (
        "Every row is in `packet_difference_by_cause.csv` (the columns of `difference_by_cause.csv`); per point "
        "the rows add up exactly to the difference of the two packet-level runs' exposed times. "
        "`packet_vs_analytical.csv` sets each packet-level point beside its analytical twin.")))
    return blocks


def headline_blocks(head: cz.Panel, figures: dict[str, str]) -> list[Block]:
    """The one-line answer at the headline setting, the answer's figure under it, and what
    both paths add there beside it (so that neither error hides the other)."""
    blocks = []
    aiob = head.rows[AICB_AIOB]
    n, missing, missing_us = _cause_total(aiob, "missing_bwd_tp_allreduce")
    _, layernorm, layernorm_us = _cause_total(aiob, "extra_layernorm_grad_allreduce")
    _, embedding, _ = _cause_total(aiob, "extra_embedding_grad_allreduce")
    where = f"{head.label} (network {head.network})"
    blocks.append(Block("p", (
        f"**ALLREDUCE is what Megatron issues.** Without sequence parallelism Megatron all-reduces on TP "
        "the input gradients of `linear_qkv` and `linear_fc1` in every layer's backward pass, and of the "
        "output layer, in every micro-batch. AICB's default path writes them as `ALLREDUCE` (all but the "
        "output layer's); its AIOB path writes `NONE`, and SimAI skips a `NONE`. "
        f"For {where} the AIOB path so drops {n} all-reduces per iteration: "
        f"{exact_bytes(missing)} ({gib(missing)})"
        + (f" and {ms(missing_us)} of exposed TP time" if missing_us is not None else "")
        + " (`missing_bwd_tp_allreduce`).")))
    # The answer's figure right under it, on the report's first screen.
    blocks += [Block("img", caption, path=path) for caption, path in list(figures.items())[:1]]
    extra = (f" With its `embedding_grads` all-reduce ({exact_bytes(embedding)}), the AIOB path's extra "
             f"backward all-reduces come to {exact_bytes(layernorm + embedding)}." if embedding else "")
    blocks.append(Block("p", (
        "**And both paths add a whole-model all-reduce that Megatron never sends.** "
        "With SP off, both AICB paths write a `layernorm` row whose backward pass all-reduces two bytes per "
        "parameter of the whole model on TP (AICB 23eec3c, `SimAI_training_workload_generator.py`, the "
        "`layernorm` Work_Item under `if not enable_sequence_parallel`), on top of the DP all-gather and "
        "reduce-scatter of the same workload. Megatron all-reduces layernorm gradients on TP only *with* "
        f"SP, and only the layernorm parameters. For {where} that is {exact_bytes(layernorm)} "
        f"({gib(layernorm)}{'' if layernorm_us is None else ', ' + ms(layernorm_us)}; "
        f"`extra_layernorm_grad_allreduce`).{extra} "
        "A figure of TP bytes per phase nets the two and shows the AIOB path above Megatron; "
        "the causes, kept apart, show both errors.")))
    return blocks


def page(rows: list[cz.Row], points: dict[str, PointRow], figures: dict[str, str],
         packet_rows: list[cz.Row] | None = None, skipped: list[Invalid] = (),
         astra: list[tuple[str, object]] = (), packet_failed: Sequence[str] = ()) -> list[Block]:
    """The landing page's blocks (``figures``: caption -> path of a PNG, relative to the page;
    ``packet_rows``: the packet-level difference by cause, where the sweep has packet-level points,
    and ``packet_failed`` those of its points that failed, with why;
    ``skipped``: the combinations the sweep asked for and could not run)."""
    panels = cz.panels(rows, points)
    blocks = [Block("h1", "The answer: what each AICB path gets wrong, by cause")]
    head = headline(panels)
    blocks += [Block("p", text) for text in lacks(rows, points, head, skipped)]
    if head is not None:
        blocks += headline_blocks(head, figures)
    if deepseek(rows):
        blocks += deepseek_blocks(panels, points)
    blocks += cp_blocks(panels)
    blocks += bucket_blocks(panels)
    blocks += fsdp_blocks(panels)
    none = sum(r.rows for r in rows if r.cause == "size_in_none_column")
    sized = (f" This sweep's AICB files hold {none:,} `NONE` columns with a size (`size_in_none_column`); "
             "each counts 0." if none else "")
    blocks.append(Block("p", (
        "**What SimAI does with NONE:** it skips the collective: no bytes, no time, even where the row "
        f"writes a size.{sized} SimAI's maintainers read `NONE` as an all-reduce overlapped with compute; "
        "SimAI models that overlap with its TP overlap ratio (`-tp_o`, the `tp_overlap` axis), which keeps "
        "the volume and scales the exposed time (the second figure). Dropping the collective drops both.")))
    timed = any(r.exposed_us is not None for r in rows)
    if panels:
        on = f"; exposed time on {panels[0].network}" if timed else ""
        blocks.append(Block("h2", f"Per setting: net difference from Megatron and largest causes "
                                  f"(bytes per iteration{on})"))
        blocks.append(verdicts(panels))
    if rows:
        blocks.append(Block("p", (
            "Every row, with its explanation, is in `difference_by_cause.csv`: one row per point, cause, phase, "
            "collective, group and sign; per point the rows add up exactly to its difference from Megatron in "
            f"bytes{' and in exposed time' if timed else ''}.")))
    blocks += packet_blocks(packet_rows, points, panels, packet_failed)
    # In two simulators (analysis.astra_answer), where the sweep ran ASTRA-sim.
    blocks += [Block(kind, items=tuple((t, ()) for t in content)) if kind == "ul" else Block(kind, str(content))
               for kind, content in astra]
    rest = list(figures.items())[1:] if head is not None else list(figures.items())
    if rest:
        blocks.append(Block("h2", "Figures"))
        blocks += [Block("img", caption, path=path) for caption, path in rest]
    return blocks


# -- rendering -----------------------------------------------------------------------------


def to_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {b.text}")
        elif b.kind == "h2":
            out.append(f"## {b.text}")
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "ul":
            out.append("\n".join(f"* {text}" + "".join(f"\n  * {sub}" for sub in subs) for text, subs in b.items))
        elif b.kind == "img":
            out.append(f"![{b.text}]({b.path})")
    return "\n\n".join(out) + "\n"


_CODE = re.compile(r"`([^`]+)`")


def _rst_inline(text: str) -> str:
    """Markdown's inline code to reStructuredText's; **bold** is the same in both."""
    return _CODE.sub(lambda m: f"``{m.group(1)}``", text)


def to_rst(blocks: list[Block], base: Path) -> str:
    """The page as reStructuredText, figures embedded (the report is one self-contained
    file); ``base``: the folder the figures' paths are relative to."""
    out = []
    for b in blocks:
        if b.kind in ("h1", "h2"):
            text = _rst_inline(b.text)
            out.append(f"{text}\n{('=' if b.kind == 'h1' else '-') * len(text)}")
        elif b.kind == "p":
            out.append(_rst_inline(b.text))
        elif b.kind == "ul":
            out.append("\n\n".join(f"* {_rst_inline(text)}" + "".join(f"\n\n  * {_rst_inline(sub)}" for sub in subs)
                                   for text, subs in b.items))
        elif b.kind == "img":
            # A browser drops the newlines of a URL: short lines keep docutils' line limit.
            data = base64.encodebytes((base / b.path).read_bytes()).decode("ascii").strip()
            html = f'<p><img alt="{b.text}" style="max-width: 100%" src="data:image/png;base64,\n{data}"></p>'
            out.append(".. raw:: html\n\n" + "\n".join("   " + line for line in html.splitlines())
                       + f"\n\n*{b.text}*")
    return "\n\n".join(out) + "\n"


# The page's figures (each PNG relative to the page), the answer's first.
CAPTIONS = {
    names.DIFFERENCE_BY_CAUSE: "Each AICB path's difference from Megatron by cause, signed",
    names.EXPOSED_TP_BY_OVERLAP: "Exposed TP communication against SimAI's TP overlap ratio",
}
FIGURES = {f"{CAPTIONS[name]} ({png})": png
           for name, png in ((n, names.FIGURES[n].png) for n in names.ON_THE_ANSWER_PAGE)}


def _packet_failures(points: dict[str, PointRow], results: Path) -> list[str]:
    """Each failed packet-level point of the sweep, ``point: why``, from its status files in the
    results folder of ``sweep.csv`` (none where they are not here: a job without a shared
    filesystem is given only the tables)."""
    from ..base.paths import PointFiles
    from .packet import without_pairs

    return without_pairs(list(points.values()), PointFiles.under(results))


def write(causes_csv: Path, sweep_csv: Path, markdown: Path, rst: Path | None = None,
          packet_csv: Path | None = None, astra: tuple[Path, Path] | None = None) -> None:
    """Write answer.md (figures linked relative to it) and, if asked, answer.rst (embedded);
    ``packet_csv``: packet_difference_by_cause.csv, for a sweep with packet-level points;
    ``astra``: astra_difference.csv and astra_vs_simai.csv, for a sweep that ran ASTRA-sim."""
    from .astra_answer import lines as astra_lines

    from ..base.files import write_text
    from ..setup.points import read_points, read_skipped

    rows = cz.read_csv(causes_csv)
    packet_rows = cz.read_csv(packet_csv) if packet_csv is not None else None
    points = {p.point: p for p in read_points(sweep_csv)}
    base = Path(markdown).parent
    figures = {caption: path for caption, path in FIGURES.items() if (base / path).exists()}
    astra_section = astra_lines(*astra, points) if astra is not None else []
    failed = _packet_failures(points, Path(sweep_csv).parent) if packet_rows is not None else []
    blocks = page(rows, points, figures, packet_rows, read_skipped(sweep_csv), astra_section, failed)
    write_text(markdown, to_markdown(blocks))
    if rst is not None:
        write_text(rst, to_rst(blocks, base))
