"""Jobs without a shared filesystem: where a job's files are, and running it so that what it
writes reads as a local run's.

With a default storage provider (``--default-storage-provider``, which the Kubernetes and
batch-service executors need, with ``--shared-fs-usage none``), Snakemake moves every declared
file through the storage: a job gets local copies of its inputs and writes its outputs in one
folder of its node, which Snakemake then uploads. That folder is the job's *root*: the
results path ``results/x`` is ``ROOT + "results/x"`` in the job (``ROOT`` is the local storage
prefix, ``.snakemake/storage/`` by default, then the provider's folder for the storage
prefix: ``fs/srv/sweeps/`` for ``--default-storage-prefix /srv/sweeps``, ``s3/bucket/run/``
for ``s3://bucket/run``).

commsweep runs such a job from its root, with every path relative to it (``enter``): the
files it writes that name other files (a status file its outputs, a batch manifest its points'
files) then hold the same bytes as a local run's, and the paths the plan spells
(``commsweep.orchestration.batch``: a task's command line) are the right ones as they are. The Snakefile
works the root out once (``job_root``) and hands it to its jobs in ``ROOT_ENV``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

# The job's root, for the commsweep commands of a job (set by pipeline.prepare; unset or empty
# with a shared filesystem).
ROOT_ENV = "COMMSWEEP_STORAGE_ROOT"
# A path every run has: its local copy says where the root is.
_PROBE = "results"


def job_root(workflow) -> str:
    """The root of this run's jobs (``ROOT``, ending in ``/``), or ``""`` without a default
    storage provider (the files are where the rules say).

    The provider maps a workflow path to a storage query (the default prefix, then the path:
    Snakemake's ``PathModifier.apply_default_storage``) and the query to its local copy; the
    copy of ``results`` ends in ``results``, and what stands before it is the root.
    """
    settings = workflow.storage_settings
    if settings.default_storage_provider is None:
        return ""
    prefix = settings.default_storage_prefix or ""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    local = str(workflow.storage_registry.default_storage_provider.object(prefix + _PROBE).local_path())
    if not local.endswith(_PROBE):
        raise ValueError(f"the storage's local copy of {_PROBE!r} is {local!r}: not under one folder")
    return local[: -len(_PROBE)]


def rebase(paths: Sequence[str], root: str) -> list[str]:
    """``paths`` (command-line words) with ``root`` taken off each that starts with it, also
    after ``--flag=``; other words as they are."""
    if not root:
        return list(paths)
    out = []
    for word in paths:
        word = str(word)
        flag, eq, value = word.partition("=")
        if word.startswith(root):
            word = word[len(root):]
        elif eq and flag.startswith("-") and value.startswith(root):
            word = f"{flag}={value[len(root):]}"
        out.append(word)
    return out


def enter(paths: Sequence[str] = ()) -> list[str]:
    """Run this process from the job's root (``ROOT_ENV``), if it has one: change into it and
    return ``paths`` relative to it. Once per process tree: the root is taken out of the
    environment, so a command this one starts (a task in a process of its own) stays put."""
    root = os.environ.pop(ROOT_ENV, "")
    if not root:
        return list(paths)
    rebased = rebase(paths, root)
    os.makedirs(root, exist_ok=True)
    os.chdir(root)
    return rebased
