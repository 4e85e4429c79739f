"""A stage's job as one typed dataclass whose fields are its command-line flags.

A stage runs two ways that must do the same work: in-process on its typed job (what a batch
does thousands of times) and as its command (``commsweep COMMAND ...``: the text a task's
digest is made of, and what a task killed once runs in a process of its own). So the job, its
command's parser, the command line written for it and the job parsed back all come from one
definition: each field of the job's dataclass says, through :func:`flag`, which flag stands for
it, its help, type, choices and default, and how its value is written as text.

* :func:`add_arguments` adds a job's flags to a parser (or an argument group);
* :func:`to_argv` writes a job as its command line (the command, then each field in the
  class's order, as its flag says);
* :func:`from_namespace` gives the job back from the parsed arguments.

A new option is one field. A field whose flags come from a helper shared by several commands
(the training arguments, say) is a *block*: its ``add``, ``write`` and ``read`` say how.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_MISSING = dataclasses.MISSING


@dataclass(frozen=True)
class Flag:
    """How one field of a job is a command-line flag (see :func:`flag`)."""

    names: tuple[str, ...]
    # argparse's keywords beyond the names (help, type, choices, metavar, action, required,
    # default, dest, nargs) and hidden spellings that parse too (``base.flags.add_flag``).
    options: dict
    aliases: tuple[str, ...] = ()
    # When the flag is written: "always", "given" (the value is not None, not False, not
    # empty) or "changed" (not the field's default); or a test of the whole job.
    when: str | Callable[[Any], bool] = "given"
    # The value as text (default ``str``); ``equals``: one word ``--name=text``.
    text: Callable[[Any], str] = str
    equals: bool = False
    # The value as all its words instead (a block: the training arguments, say).
    write: Callable[[Any], list[str]] | None = None
    # The value from the parsed arguments (default: the namespace's attribute, a list as a tuple).
    read: Callable[[argparse.Namespace], Any] | None = None
    # How the parser gets it: None, the field's own flag; else a function adding its flags
    # (a block); ``added=False``: another field's block adds it.
    add: Callable[[Any], None] | None = None
    added: bool = True
    # The title of the argument group it is listed under in ``--help`` (None: the parser's).
    group: str | None = None

    @property
    def dest(self) -> str:
        return self.options["dest"]


def flag(*names: str, default: Any = _MISSING, parse_default: Any = _MISSING, aliases: tuple[str, ...] = (),
         when: str | Callable[[Any], bool] = "given", text: Callable[[Any], str] = str, equals: bool = False,
         write: Callable[[Any], list[str]] | None = None, read: Callable[[argparse.Namespace], Any] | None = None,
         add: Callable[[Any], None] | None = None, added: bool = True, group: str | None = None, **options) -> Any:
    """A job's field that is the flag ``names`` (none: a positional argument, named by its field).

    ``default`` is the field's and the parser's (``parse_default``: the parser's where it
    differs: the job then reads it with ``read``); no default: the flag is required, unless
    ``options`` says ``required=False``. ``options`` are argparse's keywords (help, type,
    choices, metavar, action, dest). See ``Flag`` for ``when``, ``text``, ``equals``,
    ``write``, ``read``, ``add`` (a helper another command shares adds the flag) and ``added``.
    """
    options.setdefault("required", default is _MISSING and bool(names))
    if parse_default is not _MISSING:
        options["default"] = parse_default
    elif options.get("action") == "append":
        options["default"] = []
    elif default is not _MISSING and not isinstance(default, (list, dict, set)):
        options["default"] = default
    spec = dict(names=names, options=options, aliases=aliases, when=when, text=text, equals=equals, write=write,
                read=read, add=add, added=added, group=group)
    return dataclasses.field(default=default, metadata={"flag": spec})


def block(*, add: Callable[[Any], None], write: Callable[[Any], list[str]],
          read: Callable[[argparse.Namespace], Any], default: Any = _MISSING) -> Any:
    """A job's field made of many flags that a shared helper adds (``add(parser)``), written by
    ``write(value)`` and read back by ``read(namespace)``: the training setup, say."""
    spec = dict(names=(), options={}, add=add, write=write, read=read)
    return dataclasses.field(default=default, metadata={"flag": spec})


def flags(job_type: type) -> tuple[tuple[dataclasses.Field, Flag], ...]:
    """A job type's fields that are flags, in the class's order (worked out once per type)."""
    cached = _FLAGS.get(job_type)
    if cached is None:
        cached = tuple((f, _flag_of(f)) for f in dataclasses.fields(job_type) if "flag" in f.metadata)
        _FLAGS[job_type] = cached
    return cached


_FLAGS: dict[type, tuple] = {}


def _flag_of(field: dataclasses.Field) -> Flag:
    spec = dict(field.metadata["flag"])
    options = dict(spec.pop("options"))
    if spec["names"] or spec.get("add") is None:
        options.setdefault("dest", field.name)
    else:
        options["dest"] = None
    return Flag(options=options, **spec)


def add_arguments(parser, job_type: type, *, skip: Sequence[str] = (), only: Sequence[str] | None = None,
                  grouped: bool = True) -> None:
    """Add the flags of ``job_type``'s fields to ``parser``, in the class's order, each under
    its group's title (``grouped=False``: all in ``parser``); ``skip``: fields whose flags are
    there already (another job's same flags); ``only``: just these fields."""
    from .flags import add_flag

    groups: dict[str | None, Any] = {None: parser}
    for field, spec in flags(job_type):
        if not spec.added or field.name in skip or (only is not None and field.name not in only):
            continue
        group = spec.group if grouped else None
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        where = groups[group]
        if spec.add is not None:
            spec.add(where)
        elif spec.names:
            add_flag(where, *spec.names, aliases=spec.aliases, **spec.options)
        else:  # a positional argument: its dest is its name
            options = {k: v for k, v in spec.options.items() if k not in ("dest", "required")}
            where.add_argument(spec.dest, **options)


def to_argv(job) -> list[str]:
    """The job as its command line: ``job.command``, then each field's words, in the class's order."""
    write = _WRITERS.get(type(job))
    if write is None:
        write = _WRITERS[type(job)] = _writer(type(job))
    return write(job)


_WRITERS: dict[type, Callable[[Any], list[str]]] = {}


def _writer(job_type: type) -> Callable[[Any], list[str]]:
    """A job type's command-line writer, made once from its fields' flags as Python code (as
    ``dataclasses`` makes a class's ``__init__``): a sweep writes tens of thousands of command
    lines, and a loop asking each field's flag what to do per job cost a fifth of its planning."""
    lines = ["def to_argv(job):", f"    out = [{job_type.command!r}]"]
    scope: dict[str, Any] = {}
    for i, (field, spec) in enumerate(flags(job_type)):
        scope.update({f"when{i}": spec.when, f"default{i}": field.default, f"text{i}": spec.text,
                      f"write{i}": spec.write, f"name{i}": spec.names[0] if spec.names else None})
        lines.append(f"    v = job.{field.name}")
        test = _test_code(spec, i)
        indent = "    " if test is None else "        "
        if test is not None:
            lines.append(f"    if {test}:")
        lines.append(indent + _words_code(spec, i))
    lines.append("    return out")
    exec("\n".join(lines), scope)  # noqa: S102 - our own code, from the job's fields
    return scope["to_argv"]


def _test_code(spec: Flag, i: int) -> str | None:
    """Whether the field is written (None: always)."""
    if callable(spec.when):
        return f"when{i}(job)"
    if spec.when == "always":
        return None
    if spec.when == "changed":
        return f"v != default{i}"
    return "v is not None and v is not False and v != ()"


def _words_code(spec: Flag, i: int) -> str:
    """The statement adding the field's words to ``out``."""
    if spec.write is not None:
        return f"out += write{i}(v)"
    if not spec.names:
        return f"out.append(text{i}(v))"
    action = spec.options.get("action")
    if action == "store_true":
        return f"out.append(name{i})"
    value = "item" if action == "append" else "v"
    one = (f"out.append(name{i} + '=' + text{i}({value}))" if spec.equals else
           f"out.append(name{i}); out.append(text{i}({value}))")
    return f"for item in v: {one}" if action == "append" else one


def from_namespace(job_type: type, ns: argparse.Namespace, **given):
    """The job of the parsed arguments: each field read from ``ns`` (``given``: fields already
    worked out, by a job whose arguments need more than reading)."""
    values = dict(given)
    for field, spec in flags(job_type):
        if field.name in values:
            continue
        if spec.read is not None:
            values[field.name] = spec.read(ns)
            continue
        if spec.dest is None:  # a block without a reader: the job's default
            continue
        value = getattr(ns, spec.dest)
        values[field.name] = tuple(value) if isinstance(value, list) else value
    return job_type(**values)
