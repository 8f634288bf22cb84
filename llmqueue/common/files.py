"""Files named by the user: one opener for every input, one guard for every
output, and the lock of a sweep's result file.

Every failure is a one-line :class:`ValueError` that names the file (and the
line, for text that cannot be read), never a traceback or a hang:

* :func:`open_text_input` opens an input for reading as UTF-8 text.  Only a
  regular file is read: a directory, a FIFO (which would wait for a writer) or
  a device (``/dev/zero`` never ends) is refused before a byte is read.  Bytes
  that are not UTF-8 name the file, the line and the byte; :func:`csv_rows`
  does the same for CSV it cannot parse (a field over ``csv.field_size_limit()``
  characters, 131,072 by default).
* :func:`check_output` refuses, before anything runs, an output that is a
  directory or a FIFO no process reads; :func:`writing` turns an ``OSError``
  while writing (``/dev/full``: no space left) into an error naming the file.
* :func:`refuse_clashes` refuses an output that is the same file as an input
  (or as another output), compared with :func:`os.path.samefile`, so that no
  command ever overwrites a file it was asked to read.
* :func:`figure_path` decides, before anything runs, the file a figure is
  written to (``PATH.png`` for a name without an ending, as matplotlib would
  write it), so that the guard checks that file; an ending matplotlib cannot
  write is refused there, not after the run.
* :func:`exclusive_lock` holds ``PATH.lock`` (``fcntl.flock``) while a sweep
  writes ``PATH``; a second sweep on the same file fails at once.  It removes
  only a lock file that is a sweep's, never a user's file of that name.  Where
  ``fcntl`` is missing (Windows) the lock is a no-op.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import stat
from typing import IO, Iterable, Iterator, List, Optional, Sequence, Tuple

try:  # Linux and other Unixes; elsewhere sweeps run without the lock
    import fcntl
except ImportError:  # pragma: no cover - not on the target platform
    fcntl = None  # type: ignore[assignment]

Named = Tuple[str, str]
"""A file with the option or parameter that names it: ``(what, path)``."""

_BOM = b"\xef\xbb\xbf"


def shown(path: str) -> str:
    """``path`` as an error message prints it: as given, or quoted when it holds
    a line break or another unprintable character (messages stay one line)."""
    return path if path.isprintable() else repr(path)


def file_name(what: str, path: object) -> str:
    """``path`` as a text file name, if it is one (a ``str`` or an
    ``os.PathLike`` of one); otherwise a ValueError naming ``what``."""
    name = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(name, str):
        raise ValueError(f"{what} must be a file name (a str or os.PathLike), got "
                         f"{type(path).__name__} {repr(path)[:60]}")
    return name


def _kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a regular file"


class TextInput:
    """An input file open as UTF-8 text (a leading byte order mark skipped,
    ``newline=""`` as the csv module wants).  Iterate it for its lines or call
    :meth:`read`; bytes that are not UTF-8 are a ValueError naming the file, the
    line and the byte.  A context manager."""

    def __init__(self, handle: IO[str], path: str) -> None:
        self._handle = handle
        self.path = path
        """The path as given."""
        self.name = shown(path)
        """The path as messages print it."""

    def __iter__(self) -> "TextInput":
        return self

    def __next__(self) -> str:
        try:
            return next(self._handle)
        except UnicodeDecodeError:
            raise self._not_utf8() from None

    def read(self, size: int = -1) -> str:
        """The rest of the file (at most ``size`` characters if ``size >= 0``)."""
        try:
            return self._handle.read(size)
        except UnicodeDecodeError:
            raise self._not_utf8() from None

    def _not_utf8(self) -> ValueError:
        """The error for a file that is not UTF-8: where its first bad byte is."""
        with open(self.path, "rb") as raw:
            data = raw.read()
        start = len(_BOM) if data.startswith(_BOM) else 0
        try:
            data[start:].decode("utf-8")
        except UnicodeDecodeError as exc:
            at = start + exc.start
            line = data.count(b"\n", 0, at) + 1
            return ValueError(f"{self.name}: not UTF-8 text (byte 0x{data[at]:02x} at line "
                              f"{line}); save it as UTF-8")
        return ValueError(f"{self.name}: not UTF-8 text (it changed while being read)")

    def close(self) -> None:
        """Close the file."""
        self._handle.close()

    def __enter__(self) -> "TextInput":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_text_input(path: str, what: str = "path") -> TextInput:
    """``path`` open for reading as UTF-8 text, if it is a regular file that can
    be opened; otherwise a ValueError naming ``what`` (the option or parameter
    that named it), the path and the reason.  The file is opened without
    waiting (a FIFO would block until a writer came) and checked on the open
    handle, so it cannot be swapped between the check and the read."""
    path = file_name(what, path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ValueError(f"{what}: cannot read {shown(path)}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{what}: cannot read {shown(path)}: it is {_kind(mode)}; "
                             f"give a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        handle = open(fd, encoding="utf-8-sig", newline="")  # a leading BOM is no header
    except BaseException:
        os.close(fd)
        raise
    return TextInput(handle, path)


def csv_rows(lines: Iterable[str], name: str) -> Iterator[Tuple[int, List[str]]]:
    """``(line, fields)`` for each row of the CSV text ``lines`` (a
    :class:`TextInput`) of the file ``name`` (``line``: the row's last line,
    counting from 1).  Text the csv module refuses, such as a field over
    ``csv.field_size_limit()`` characters, is a ValueError naming the file and
    line."""
    reader = csv.reader(lines)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            text = str(exc)
            if "field larger than field limit" in text:
                text = f"a field is longer than {csv.field_size_limit()} characters"
            raise ValueError(f"{name}:{reader.line_num}: not valid CSV: {text}") from None
        yield reader.line_num, row


def check_output(path: str, what: str, *, regular: bool = False) -> None:
    """Refuse, before anything is written, an output ``path`` that is a
    directory, a FIFO no process reads (writing would wait for ever), a socket,
    or, with ``regular``, anything but a regular file (a file that is read
    back).  A missing file is fine: it will be created."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ValueError(f"{what}: cannot write {shown(path)}: {reason}") from None
    if stat.S_ISREG(mode):
        return
    if stat.S_ISCHR(mode) and not regular:
        return  # /dev/null, /dev/stdout on a terminal; /dev/full fails in writing()
    if stat.S_ISFIFO(mode) and not regular and _has_reader(path):
        return
    need = "a regular file" if regular else "a regular file or a FIFO that is being read"
    raise ValueError(f"{what}: cannot write {shown(path)}: it is {_kind(mode)}; give {need}")


def _has_reader(fifo: str) -> bool:
    """Whether a process has ``fifo`` open for reading (a writer would not block)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False  # ENXIO: no reader
    os.close(fd)
    return True


@contextlib.contextmanager
def writing(path: str, what: str) -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``path`` (no space left, no such
    folder, permission denied) into a one-line ValueError naming ``what`` and
    the file."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ValueError(f"{what}: cannot write {shown(os.fspath(path))}: {reason}") from None


def _same(a: str, b: str) -> bool:
    """Whether two paths name one file: the same inode when both exist (hard
    and symbolic links included), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return os.path.realpath(a) == os.path.realpath(b)
        except (OSError, ValueError):
            return False


def refuse_clashes(outputs: Sequence[Named], inputs: Sequence[Named] = ()) -> None:
    """Refuse outputs that are the same file as an input or as another output:
    writing one would destroy what was to be read (or written) there.  Call it
    before anything is written."""
    for i, (what, path) in enumerate(outputs):
        for other, where in list(inputs) + list(outputs[:i]):
            if _same(path, where):
                raise ValueError(f"{what}: {shown(path)} is the same file as {other} "
                                 f"({shown(where)}); writing it would overwrite that file: "
                                 f"give another name")


def check_outputs(outputs: Sequence[Named], inputs: Sequence[Named] = ()) -> None:
    """:func:`check_output` for each of ``outputs``, then :func:`refuse_clashes`:
    what a command calls before it runs anything."""
    for what, path in outputs:
        check_output(path, what)
    refuse_clashes(outputs, inputs)


#: The endings a figure is written as (matplotlib's image formats since 3.7,
#: less ``pgf``, which needs LaTeX, and the raw pixel buffers ``raw``, ``rgba``).
FIGURE_ENDINGS = ("png", "svg", "svgz", "pdf", "eps", "ps", "jpg", "jpeg", "tif", "tiff",
                  "webp")
#: The ending an animation is written as.
ANIMATION_ENDINGS = ("gif",)


def figure_path(path: str, what: str, endings: Sequence[str] = FIGURE_ENDINGS) -> str:
    """The file a figure named ``path`` is written to, decided before anything
    runs so that the output guard checks that very file: ``path`` itself when
    it ends in one of ``endings`` (in any case), ``PATH.png`` (the first of
    ``endings``) when its name has no ending, as matplotlib would add it.  Any
    other ending is a ValueError naming ``what`` and the allowed endings."""
    path = file_name(what, path)
    ending = os.path.splitext(path)[1]
    if ending in ("", "."):
        return f"{path}.{endings[0]}"
    if ending[1:].lower() not in endings:
        raise ValueError(f"{what}: cannot write {shown(path)}: a figure's name must end in "
                         f"{', '.join('.' + e for e in endings)} (without an ending: "
                         f".{endings[0]} is added); got {shown(ending)}")
    return path


def named_files(values: Iterable[Tuple[str, object]]) -> List[Named]:
    """The existing files among parameter values ``(name, value)``: a text
    value that names a file, or whose part after ``KIND:`` does
    (``empirical:FILE``).  Every such file is an input for :func:`refuse_clashes`."""
    out: List[Named] = []
    for name, value in values:
        if not isinstance(value, str) or not value:
            continue
        for candidate in (value, value.partition(":")[2]):
            try:
                if candidate and os.path.exists(candidate):
                    out.append((name, candidate))
            except ValueError:  # a NUL byte: no file
                pass
    return out


#: What a sweep writes into a lock file it creates: a file of that name that
#: does not begin so is someone else's, used as the lock but never removed.
LOCK_MARK = b"llmqueue sweep lock (removed when the sweep ends)\n"


@contextlib.contextmanager
def exclusive_lock(path: str, what: str) -> Iterator[Optional[str]]:
    """Hold an exclusive lock on ``PATH.lock`` while the block runs; yields the
    lock file's path.  The lock file is created if missing and removed on
    release if it is a sweep's (created now, or left by a sweep that was
    killed: it holds :data:`LOCK_MARK`); a file of that name that is not a
    sweep's (``poetry.lock`` for ``--out poetry``) is locked as it is, left
    unchanged and never removed.  If another process holds the lock, a
    ValueError naming ``what``, the file and the lock, at once.  Without
    ``fcntl`` nothing is locked (yields ``None``)."""
    if fcntl is None:  # pragma: no cover
        yield None
        return
    lock = os.fspath(path) + ".lock"
    fd, ours = _acquire(lock, what, os.fspath(path))
    try:
        yield lock
    finally:
        if ours:
            with contextlib.suppress(OSError):
                os.unlink(lock)  # under the lock: a waiter that opened it sees it gone
        os.close(fd)


def _open_lock(lock: str, what: str) -> Optional[Tuple[int, bool]]:
    """``lock`` open for locking and whether it is a sweep's lock file: created
    now (then marked with :data:`LOCK_MARK` at once) or holding the mark;
    ``None`` if it went away between our two tries."""
    flags = os.O_RDWR | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(lock, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                fd = os.open(lock, flags)
            except FileNotFoundError:
                return None
            return fd, _marked(fd)
    except OSError as exc:
        raise ValueError(f"{what}: cannot create the lock file {shown(lock)}: "
                         f"{exc.strerror}") from None
    with contextlib.suppress(OSError):
        os.write(fd, LOCK_MARK)
    return fd, True


def _marked(fd: int) -> bool:
    """Whether the open file ``fd`` begins with :data:`LOCK_MARK`."""
    try:
        return os.pread(fd, len(LOCK_MARK), 0) == LOCK_MARK
    except OSError:  # a directory, say: refused when locked
        return False


def _acquire(lock: str, what: str, path: str) -> Tuple[int, bool]:
    """Open and lock ``lock`` (see :func:`_open_lock`); retry when a finishing
    holder removed it between our open and our lock."""
    for _ in range(10):
        opened = _open_lock(lock, what)
        if opened is None:
            continue
        fd, ours = opened
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{what}: the lock file {shown(lock)} is not a regular file; "
                                 f"remove it")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise ValueError(f"{what}: {shown(path)} is in use by another sweep (it holds "
                                 f"the lock {shown(lock)}); wait for it or write to another "
                                 f"file") from None
            raise ValueError(f"{what}: cannot lock {shown(lock)}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                return fd, ours or _marked(fd)
        except OSError:
            pass
        os.close(fd)
    raise ValueError(f"{what}: cannot lock {shown(lock)}: it keeps being replaced")
