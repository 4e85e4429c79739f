"""Run a user's own AICB checkout for one setup and return the workload file it writes.

AICB's generator is a script: ``python -m workload_generator.SimAI_training_workload_generator
<args>`` writes ``results/workload/<name>.txt`` relative to its working directory, under a
name that leaves out SP and AIOB, so two jobs of one sweep (SP off and on, default and AIOB
path) would overwrite each other's file. Each run therefore gets its own fresh temporary
working directory, with the checkout on ``PYTHONPATH``; the one file it writes there is read
back and the directory removed. AICB's own output is echoed to stderr (the rule's log), and
when it fails its last error line is the error raised here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..base.errors import CommsweepError, ConfigError
from ..setup.arguments import to_aicb_argv
from ..setup.training import TrainingSetup

MODULE = "workload_generator.SimAI_training_workload_generator"
_SCRIPT = Path("workload_generator") / "SimAI_training_workload_generator.py"


class AicbError(CommsweepError):
    """AICB ran and failed; the message is AICB's own last error line."""


def checkout(root: str | Path) -> Path:
    """The checkout's absolute path, after checking it holds AICB's generator."""
    path = Path(root).expanduser().resolve()
    if not (path / _SCRIPT).is_file():
        raise ConfigError(f"{path} is not an AICB checkout (no {_SCRIPT})", key="generator.aicb_root")
    return path


def command(
    setup: TrainingSetup,
    profile_path: str | Path | None = None,
    python: str | None = None,
    extra_argv: list[str] | tuple[str, ...] = (),
    omit: tuple[str, ...] = (),
) -> list[str]:
    """The AICB command line of a setup: its arguments (less the flags in ``omit``), plus the
    AIOB profile when given."""
    argv = [python or sys.executable, "-m", MODULE, *(a for a in to_aicb_argv(setup) if a not in omit), *extra_argv]
    if profile_path is not None:
        argv += ["--aiob_enable", f"--comp_filepath={Path(profile_path).resolve()}"]
    return argv


PREFIX = "commsweep-aicb-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-")


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: it cannot be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(parent: str | Path | None = None) -> list[Path]:
    """Remove the working directories left by runs whose process is gone; the ones removed.

    Only directories named by ``work_directory`` count; a live process's is never touched."""
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    for path in parent.glob(PREFIX + "*"):
        owner = _OWNED.match(path.name)
        if owner is not None and path.is_dir() and not _alive(int(owner.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def work_directory() -> Path:
    """A fresh working directory for one AICB run, named for this process, in the system's
    temporary directory (after removing those that killed runs left there)."""
    remove_orphans()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def _last_error(output: str) -> str:
    """AICB's own error text: the last non-empty line (a traceback ends with the exception)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def run(
    root: str | Path,
    setup: TrainingSetup,
    *,
    profile_path: str | Path | None = None,
    python: str | None = None,
    extra_argv: list[str] | tuple[str, ...] = (),
    omit: tuple[str, ...] = (),
    log=None,
) -> str:
    """Run AICB for ``setup`` (its AIOB path when ``profile_path`` is given); the file's text.

    ``extra_argv`` are further AICB arguments (e.g. ``--dtype``), ``omit`` flags of the setup's
    to leave out (a DeepSeek command line without ``--moe_enable``). ``log`` receives AICB's stdout and stderr (default: this process's stderr). Raises
    AicbError with AICB's last error line when it exits non-zero or writes no file.
    """
    aicb = checkout(root)
    if profile_path is not None and not Path(profile_path).is_file():
        raise ConfigError(f"AIOB profile {profile_path} not found", key="--comp_filepath")
    cmd = command(setup, profile_path, python, extra_argv, omit)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(aicb), *filter(None, [env.get("PYTHONPATH")])])
    log = sys.stderr if log is None else log
    work = work_directory()
    try:
        print(f"$ (cd {work} && PYTHONPATH={aicb} {' '.join(cmd)})", file=log, flush=True)
        try:
            proc = subprocess.run(
                cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
            )
        except OSError as err:
            raise ConfigError(f"cannot start {cmd[0]}: {err.strerror}", key="--aicb-python") from None
        log.write(proc.stdout)
        log.flush()
        if proc.returncode != 0:
            raise AicbError(f"AICB failed (exit {proc.returncode}): {_last_error(proc.stdout)}")
        written = sorted((Path(work) / "results" / "workload").glob("*.txt"))
        if len(written) != 1:
            names = ", ".join(p.name for p in written) or "none"
            raise AicbError(f"AICB exited 0 but wrote {len(written)} workload files ({names}); expected one")
        # Bytes, not text mode: the file must come back exactly as AICB wrote it.
        return written[0].read_bytes().decode("utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
