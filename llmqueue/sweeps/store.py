"""A sweep's result file: one CSV of tidy rows, appended a run at a time,
and read back by ``--resume`` and ``llmqueue plot``.

The header names the columns: the grid point's, then :data:`RUN_COLUMNS`,
then the figures.  Each run's rows go out in one write, flushed and synced to
disk, so an interrupted sweep leaves whole runs, followed at worst by a line
cut short.

:func:`read_done` (resume) keeps only the runs that are certainly whole and
has the others run again:

* a last line cut short (the file does not end with a line break) is dropped,
  and so is the run before it unless the cut line's whole fields show that it
  began another run (else it may have been that run's last row);
* a row with another number of fields than the header, or whose replicate or
  seed is not a whole number, is dropped with every row of its run;
* the file's last run is dropped when it has fewer rows than another run (a
  file cut at a line break inside a run of several rows).

Before the sweep goes on, the file is rewritten without what was dropped (a
new file moved into place: an interruption leaves the old file or the new one,
never a mix).  A file of another sweep (other grid or run columns, another
scenario), or of one line without a line break that is not the start of
this sweep's header, is an error and is left alone.  A byte order mark at the
start of the file (an editor's) is no part of the first column's name.  A run
with figures the file lacks (a KV cache's, in a sweep over ``kv=none`` too)
adds their columns, empty in the rows written before it (the file is
rewritten the same way).

:func:`read_rows` (plot, the API) is strict: a malformed row is an error
naming the file and the line; only a last line cut short is skipped (a sweep
may be writing the file at that moment).
"""

from __future__ import annotations

import csv
import io
import os
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from llmqueue.common import files

Row = Dict[str, Any]
"""One tidy row of a sweep: CSV cells read back as None, bool, int, float or text."""

#: The byte order mark an editor may put at the start of a CSV file, as text.
BOM = "\ufeff"
#: Columns between the grid point and the figures, in this order.
RUN_COLUMNS = ("replicate", "seed", "horizon", "warmup", "scenario", "label")

Key = Tuple[str, ...]
"""What identifies a run in a file: its grid point, replicate, seed, horizon and
warm-up, as the file spells them."""


def point_columns(columns: Sequence[str]) -> List[str]:
    """The grid point's columns of a sweep's rows (those before ``replicate``)."""
    return list(columns[:list(columns).index("replicate")])


def figure_columns(columns: Sequence[str]) -> List[str]:
    """The figures of a sweep's rows (those after ``label``)."""
    return list(columns[list(columns).index("label") + 1:])


class RowWriter:
    """Appends rows to a CSV file, flushing after each run; writes the header
    when the file is empty.  A failed write (no space left) is a ValueError
    naming the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        with files.writing(path, "out"):
            self.handle = open(path, "a+", newline="", encoding="utf-8")
            self.handle.seek(0)
            header = next(csv.reader(self.handle), None)
        if header and header[0].startswith(BOM):  # saved by an editor: no column's name
            header[0] = header[0][len(BOM):]
        self.columns: Optional[List[str]] = header
        self.writer: Optional[csv.DictWriter] = None

    def write(self, rows: Iterable[Row]) -> None:
        """Append one run's rows and flush them to disk."""
        rows = list(rows)
        if not rows:
            return
        if self.columns is None:
            self.columns = list(rows[0])
            header = io.StringIO()
            csv.writer(header, lineterminator="\n").writerow(self.columns)
            self._put(header.getvalue(), sync=False)
        keys = list(rows[0])
        head = len(point_columns(keys)) + len(RUN_COLUMNS)
        if keys[:head] != self.columns[:head]:
            extra = set(keys[:head]) ^ set(self.columns[:head])
            raise ValueError(f"out: {files.shown(self.path)} has other columns than this sweep "
                             f"({', '.join(sorted(extra)) or 'in another order'}); "
                             "write to a new file")
        new = [k for k in keys[head:] if k not in self.columns]
        if new:  # figures other runs lack (a KV cache's, in a sweep over kv=none too)
            self._widen(new)
        # one run's rows go out in one write, so an interruption cannot keep half a run
        text = io.StringIO()
        csv.DictWriter(text, self.columns, lineterminator="\n").writerows(
            {k: cell(v) for k, v in row.items()} for row in rows)
        self._put(text.getvalue())

    def _widen(self, new: List[str]) -> None:
        """Add the figure columns ``new`` to the file, empty in the rows written
        so far (the file is rewritten and moved into place, as on resume); a
        row without a figure leaves its cell empty too."""
        assert self.columns is not None
        with files.writing(self.path, "out"):
            self.handle.seek(0)
            written = list(csv.reader(self.handle))
            self.handle.close()
        self.columns = self.columns + new
        text = io.StringIO()
        out = csv.writer(text, lineterminator="\n")
        out.writerow(self.columns)
        out.writerows(fields + [""] * len(new) for fields in written[1:])
        _rewrite(self.path, [text.getvalue()])
        with files.writing(self.path, "out"):
            self.handle = open(self.path, "a+", newline="", encoding="utf-8")

    def _put(self, text: str, sync: bool = True) -> None:
        with files.writing(self.path, "out"):
            self.handle.write(text)
            if sync:
                self.handle.flush()
                os.fsync(self.handle.fileno())

    def __enter__(self) -> "RowWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        with files.writing(self.path, "out"):
            self.handle.close()


def write_rows(path: str, rows: Sequence[Row]) -> None:
    """Write ``rows`` to a new CSV file."""
    files.check_output(path, "out", regular=True)
    with files.writing(path, "out"):
        open(path, "w").close()
    with RowWriter(path) as writer:
        writer.write(rows)


@dataclass
class _Line:
    """A row of the file: its (last) line number, fields and text as written."""

    number: int
    fields: List[str]
    text: str


@dataclass
class _File:
    """A sweep's CSV as read: the header, the rows after it, and the last line
    if it was cut short (no line break)."""

    name: str
    header: _Line
    rows: List[_Line]
    cut: Optional[_Line]


def _load(path: str, what: str) -> Optional[_File]:
    """The file's lines as rows (``None`` for a file with no whole line)."""
    with files.open_text_input(path, what) as handle:
        lines: List[str] = []
        rows = [_Line(n, fields, "") for n, fields in
                files.csv_rows(_recording(handle, lines), handle.name)]
    start = 0
    for row in rows:
        row.text, start = "".join(lines[start:row.number]), row.number
    cut = rows.pop() if rows and not rows[-1].text.endswith(("\n", "\r")) else None
    if not rows:
        return None
    return _File(files.shown(path), rows[0], [r for r in rows[1:] if r.fields], cut)


def _recording(lines: Iterable[str], into: List[str]) -> Iterator[str]:
    for line in lines:
        into.append(line)
        yield line


def read_rows(path: str) -> List[Row]:
    """The rows of a sweep's CSV file, numbers as numbers and empty cells as
    ``None``.  A row with more or fewer fields than the header is an error
    naming the file and line, but for a last line cut short, which is skipped."""
    data = _load(path, "csv")
    names = [] if data is None else data.header.fields
    if data is None or "replicate" not in names or "label" not in names:
        name = files.shown(path) if data is None else data.name
        raise ValueError(f"{name}: not a sweep's CSV (it needs a header with replicate and "
                         f"label columns)")
    out = []
    for row in data.rows:
        if len(row.fields) != len(names):
            raise ValueError(f"{data.name}:{row.number}: {len(row.fields)} fields where the "
                             f"header has {len(names)}; fix or remove the line")
        out.append({k: _value(v) for k, v in zip(names, row.fields)})
    return out


def read_done(path: str, point: Sequence[str], scenario: str) -> Dict[Key, List[Row]]:
    """The whole runs of an earlier sweep's file ``path`` (see the module
    docstring), each with its rows; the file is rewritten without the rest.
    ``point`` and ``scenario``: the grid columns and scenario of the sweep that
    goes on, which the file must share."""
    data = _load(path, "out")
    if data is None:
        if os.path.getsize(path):
            if not _cut_header(path, point):  # one line of something else: keep it
                raise _not_a_sweep(files.shown(path), point)
            _rewrite(path, [])  # a cut header only
        return {}
    names = data.header.fields
    if "replicate" not in names or point_columns(names) != list(point) \
            or not set(RUN_COLUMNS) <= set(names):
        raise _not_a_sweep(data.name, point)
    where = [names.index(c) for c in (*point, *RUN_COLUMNS[:4])]
    at_scenario = names.index("scenario")
    keys: List[Optional[Key]] = [_key(r.fields, where) for r in data.rows]
    bad = set()
    for row, key in zip(data.rows, keys):
        if len(row.fields) != len(names) or not _whole(row.fields, where[-4:-2]):
            bad.add(key)
        elif row.fields[at_scenario] != scenario:
            raise ValueError(f"out: {data.name} is not a sweep of {scenario} (line "
                             f"{row.number} holds {row.fields[at_scenario]}); write to a new "
                             f"file")
    good = [k for k in keys if k is not None and k not in bad]
    if good:
        last = good[-1]
        if data.cut is not None and _may_belong(data.cut.fields[:-1], last, where):
            bad.add(last)  # the cut line may be the last row of that run
        runs = Counter(good)
        if runs[last] < max(runs.values()):
            bad.add(last)  # a file cut at a line break inside a run
    kept = [(row, key) for row, key in zip(data.rows, keys) if key not in bad]
    if data.cut is not None or len(kept) < len(data.rows):
        _rewrite(path, [data.header.text] + [row.text for row, _ in kept])
    done: Dict[Key, List[Row]] = {}
    for row, key in kept:
        assert key is not None  # a row whose key cannot be read is bad
        done.setdefault(key, []).append({k: _value(v) for k, v in zip(names, row.fields)})
    return done


def _not_a_sweep(name: str, point: Sequence[str]) -> ValueError:
    """The error for a file ``--resume`` cannot go on with, which it leaves alone."""
    return ValueError(f"out: {name} is not a sweep over {', '.join(point)}; write to a new "
                      f"file")


def _cut_header(path: str, point: Sequence[str]) -> bool:
    """Whether a file of one line without a line break is the header of a sweep
    over ``point`` cut short (a sweep stopped while writing it): the start of
    the grid and run columns, or all of them and more."""
    head = io.StringIO()
    csv.writer(head, lineterminator="").writerow([*point, *RUN_COLUMNS])
    with files.open_text_input(path, "out") as handle:
        text = handle.read(len(head.getvalue()) + 1)
    return head.getvalue().startswith(text) or text == head.getvalue() + ","


def _key(fields: List[str], where: Sequence[int]) -> Optional[Key]:
    """A row's run columns, or ``None`` if the row is too short to hold them."""
    if len(fields) <= max(where):
        return None
    return tuple(fields[i] for i in where)


def _may_belong(known: List[str], key: Key, where: Sequence[int]) -> bool:
    """Whether a cut row whose whole fields are ``known`` may be a row of the
    run ``key``: no run column it holds says otherwise."""
    return all(known[i] == part for i, part in zip(where, key) if i < len(known))


def _whole(fields: List[str], where: Sequence[int]) -> bool:
    """Whether the cells at ``where`` are whole numbers."""
    return all(fields[i].strip().lstrip("-").isdigit() for i in where)


def _rewrite(path: str, lines: Sequence[str]) -> None:
    """Replace ``path`` with ``lines``: a new file in the same folder, synced,
    then moved into place (keeping the old file's permissions)."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target) or "."
    with files.writing(path, "out"):
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".resume")
        try:
            with open(fd, "w", newline="", encoding="utf-8") as handle:
                handle.write("".join(lines))
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(temp, target)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise


def cell(value: object) -> str:
    """A value as a CSV cell: empty for ``None``."""
    return "" if value is None else str(value)


def _value(text: str) -> object:
    """A CSV cell back as a value: ``None``, bool, int, float or text."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
