"""The project's own error types.

Every problem with a user's input must surface as one of these, never as a bare
``KeyError`` or ``ValueError`` from deep inside a parser: the message names the file,
the line and the field (or the config key) so the user can fix the input without
reading our code. The CLI prints them as one line and exits with status 2.
"""

from __future__ import annotations

from pathlib import Path


class CommsweepError(Exception):
    """Base class: something the user can fix (bad input, impossible configuration)."""


class InputError(CommsweepError):
    """A malformed input file, with its location.

    ``str(err)`` reads ``FILE:LINE: field NAME: message`` (parts that are unknown are
    left out), the shape compilers use, so editors can jump to the spot.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        what = f"field {self.field!r}: " if self.field else ""
        return f"{where}: {what}{self.message}"


class ConfigError(CommsweepError):
    """An invalid sweep configuration or argument combination, naming the key or point.

    ``str(err)`` reads ``SOURCE: KEY: message`` (the config file, then the key path).
    """

    def __init__(self, message: str, *, key: str | None = None, source: str | Path | None = None) -> None:
        self.message = message
        self.key = key
        self.source = str(source) if source is not None else None
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.key) if p]
        return ": ".join([*parts, self.message])


def not_utf8(path: str | Path, err: UnicodeDecodeError) -> InputError:
    """The InputError for a file that is not UTF-8 text, naming the line of the bad byte."""
    line = err.object[: err.start].count(b"\n") + 1
    return InputError(f"not a UTF-8 text file ({err.reason} at byte {err.start})", file=path, line=line)


def exit_interrupted(said: str) -> None:
    """End as a program ends on Ctrl-C: ``said`` on one line, no traceback, and killed by
    SIGINT, the status a shell, make or Snakemake reads as an interruption (not a failure)."""
    import contextlib
    import os
    import signal
    import sys

    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    print(said, file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(128 + signal.SIGINT)  # only if the signal could not end the process


class PartialResult(CommsweepError):
    """A step that wrote all its outputs, some of whose rows name failures (a point ASTRA-sim
    gave no time for): its status fails and names them, and ``status.guard`` keeps the outputs,
    whose failed rows say why, rather than putting markers in their place."""
