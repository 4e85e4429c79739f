"""The tables the figures draw from, as pandas DataFrames: the summary's complete points
(read once per process: one process draws every figure of a sweep, and five read it)."""

from __future__ import annotations

from pathlib import Path

from .canvas import variant

# The tables read so far, by path and what the file was then (size, mtime).
_READ: dict[tuple, object] = {}


def frame(columns, rows):
    """Typed rows of a table (each type with ``getter(column)``: ``summary.Row``,
    ``compare.KindRow``) as a DataFrame with the table's ``columns``, an empty cell NaN: the
    one place the figures turn a table's reader's rows into pandas."""
    import pandas as pd

    def cells(column: str) -> list:
        if not rows:
            return []
        values = list(map(type(rows[0]).getter(column), rows))
        return [None if v == "" else v for v in values] if isinstance(values[0], str) else values

    return pd.DataFrame({column: pd.Series(cells(column), dtype=None if rows else object) for column in columns})


def read_summary(summary_csv: Path):
    """The summary table's complete points as a DataFrame (a failed point has no numbers:
    its one row would count as zero bytes; see commsweep.base.status), read by the table's
    reader (``summary.read``): a column per column of the table, an empty cell NaN. A copy
    of the table read before, if the file has not changed since."""
    from .. import summary

    stat = Path(summary_csv).stat()
    key = (str(Path(summary_csv).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _READ:
        table = summary.read(summary_csv)
        df = frame(table.columns, [r for r in table.rows if r.ok])
        _READ.clear()
        _READ[key] = df
    return _READ[key].copy()


def first_network_volumes(summary_csv: Path):
    """The complete points' rows on the sweep's first network, with a ``variant`` column;
    None when no point has volumes. Volumes do not depend on the network."""
    df = read_summary(summary_csv)
    if df.empty:
        return None
    df = df[df["network"] == df["network"].iloc[0]].copy()
    df["variant"] = [variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    return df


def one_tp_overlap(df):
    """The rows of the sweep's first TP overlap ratio (all rows when it has no such axis):
    figures of other quantities never average points that differ in it."""
    if "tp_overlap" not in df.columns or df.empty:
        return df
    return df[df["tp_overlap"] == sorted(df["tp_overlap"].unique())[0]]
