"""How commsweep spells its own command-line flags: with hyphens, the old spelling kept.

Upstream flags keep their owners' spellings, so their command lines work unchanged: AICB's
``--tensor_model_parallel_size``, SimAI's ``-g_p_s`` and ``--nic_per_server``. commsweep's
own flags use hyphens (``--pp-stage``, ``--ratio-dir``). Those first written with
underscores (``--pp_stage``) still parse, as aliases hidden from ``--help``, so scripts
written against an older commsweep keep working.
"""

from __future__ import annotations

import argparse


def add_flag(parser, *names: str, aliases: tuple[str, ...] = (), **kwargs) -> argparse.Action:
    """Add an option; each hyphenated long name, and each of ``aliases``, also parses, unlisted.

    ``parser`` may be a parser or an argument group. The aliases are option strings of the
    same action (so an alias satisfies ``required`` and errors name the option by its
    spelling), left out of the action's listed names, which ``--help`` and usage show.
    """
    old = [f"--{name[2:].replace('-', '_')}" for name in names if name.startswith("--") and "-" in name[2:]]
    action = parser.add_argument(*names, *old, *aliases, **kwargs)
    action.option_strings = list(names)
    return action
