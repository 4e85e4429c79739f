"""The table of sweep-wide steps (orchestration/steps.py) against what reads it and what it
stands for: the rules, the check's list and the cluster profiles' job groups."""

from __future__ import annotations

import re

import pytest
import yaml

from commsweep.orchestration import steps

from conftest import REPO

RULES = {path.name: path.read_text(encoding="utf-8") for path in (REPO / "workflow" / "rules").glob("*.smk")}


def rule_blocks() -> dict[str, str]:
    """Each rule's text by name, from every rule file."""
    out = {}
    for text in RULES.values():
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, flags=re.S | re.M):
            out[m.group(1)] = m.group(2)
    return out


def test_each_step_is_a_rule_running_its_subcommand():
    blocks = rule_blocks()
    for step in steps.table():
        rule = step.rule or step.name
        assert rule in blocks, f"step {step.name}: no rule {rule}"
        if rule == "figures":
            continue
        text = blocks[rule]
        if rule == "tables":  # several steps, each named with its command (common.smk, table_commands)
            assert re.search(rf'\b{step.name}=\(\["{step.command[0]}"', text), f"rule tables: no command of {step.name}"
            continue
        assert f'L.step_status("{step.name}")' in text, f"rule {rule} does not write the status of step {step.name}"
        m = re.search(r'guarded(?:_argv)?\("([\w-]+)', text)
        assert m and m.group(1) == step.command[0], f"rule {rule} runs {m and m.group(1)}, the table {step.command[0]}"


def test_every_guarded_rule_is_a_step():
    named = {s.rule or s.name for s in steps.table()}
    guarded = {name for name, text in rule_blocks().items() if "L.step_status(" in text and "status=" in text}
    assert guarded <= named | {"figures"}


def test_the_tables_every_figure_reads_are_one_job_in_the_order_they_read_each_other():
    tables = [s for s in steps.table() if s.rule == "tables"]
    assert [s.name for s in tables] == ["summarize", "compare", "difference_by_cause"]
    for i, step in enumerate(tables):
        assert set(step.after) <= {s.name for s in tables[:i]}, f"{step.name} comes after a step run later"
    assert steps.resources("tables") == {"mem_mb": 2048, "runtime": 10}
    assert steps.groups()["tables"] == "tables" and "summarize" not in steps.groups()


@pytest.mark.parametrize("profile", sorted(p.parent.name for p in (REPO / "profiles").glob("*/config.yaml")))
def test_the_cluster_profiles_bundle_the_tables_groups(profile):
    config = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text(encoding="utf-8"))
    if "groups" in config:
        assert config["groups"] == steps.groups()


def test_a_sweep_has_the_steps_of_what_it_holds():
    plain = steps.of_sweep({})
    assert "plot_timeline" not in plain and "answer" in plain and "trace_check" not in plain
    full = steps.of_sweep({kind: True for kind in steps.WHEN})
    assert [s.name for s in steps.table()] == list(full)
    assert full["plot_exposed_tp_by_overlap"].command[-1] == "0"
    assert steps.of_sweep({}, tp_overlap=0.5)["plot_exposed_tp_by_overlap"].command[-1] == "0.5"
    with pytest.raises(ValueError, match="unknown kinds of sweep: gpus"):
        steps.of_sweep({"gpus": True})
