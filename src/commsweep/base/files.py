"""Reading inputs and writing outputs atomically.

Every output of the pipeline is written to a temporary file in the same directory and
renamed into place, so a killed job never leaves a half-written file that a later run
(or Snakemake) could mistake for a complete one. The file gets the mode a plain ``open``
would give it (0644 under the usual umask 022), not ``mkstemp``'s private 0600: results
on a shared cluster are for colleagues to read. Every text input is read through
``read_text``, so a binary or mis-encoded file is an error naming its line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

TYPE_CHECKING = False  # without importing typing (slow) at run time
if TYPE_CHECKING:
    from typing import IO


def _umask() -> int:
    """The process's umask, read once (setting it to read it back is not thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()
# Whether each atomic write syncs its file to disk before renaming it into place (see
# ``synced_once``).
_SYNC_EACH = True


@contextlib.contextmanager
def synced_once() -> Iterator[None]:
    """Within this block, atomic writes skip their ``fsync``; at its end (when it ends
    without an error) the filesystems are synced once.

    A batch of points (``commsweep.orchestration.batch``) writes thousands of small files; one ``fsync``
    each (milliseconds on a busy disk) would cost more than computing them. Renames stay
    atomic, so a killed process still leaves whole files or none. A machine that crashes
    within the block may lose recent files (left empty or absent): the batch treats an
    empty or absent output as not made, and writes its manifest, the record that the
    batch is done, only after the sync.
    """
    global _SYNC_EACH
    previous, _SYNC_EACH = _SYNC_EACH, False
    try:
        yield
    finally:
        _SYNC_EACH = previous
    os.sync()


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, newline: str | None = "") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is left untouched. The
    default ``newline=""`` writes text exactly as given (no newline translation), which the
    byte-exact formats of this project rely on.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here, not at import: the command line imports this module at start-up

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    binary = "b" in mode
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8", "newline": newline})) as fh:
            yield fh
            fh.flush()
            if _SYNC_EACH:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, byte for byte."""
    with atomic_open(path) as fh:
        fh.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def read_text(path: str | Path) -> str:
    """A UTF-8 text input; InputError naming the line of the first byte that is not UTF-8."""
    from .errors import not_utf8

    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from None


def emit(text: str, output: str | None) -> None:
    """Write ``text`` atomically to ``output``, or to stdout when none is given (``-``: stdout)."""
    if output is None or output == "-":
        sys.stdout.write(text)
    else:
        write_text(output, text)
