"""The command line of the scenario scripts (``python scenarios/NAME.py``) and
of ``scenarios/regenerate.py``, under the rules of ``llmqueue``: bad input is
one line on stderr and exit code 2, never a usage dump, a traceback or an
argument silently ignored.

A scenario script takes no argument but ``-h``; it ends with
``script(main)``, which refuses any other argument before ``main`` runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, NoReturn, Optional, Sequence

from llmqueue.common import progress


class Parser(argparse.ArgumentParser):
    """argparse whose errors (an unknown argument, an invalid value, a
    ``parser.error(...)`` of the caller's own checks) are one line on stderr
    and exit code 2, without the usage text argparse prints first."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message)


def fail(prog: str, message: object) -> NoReturn:
    """Print ``PROG: error: MESSAGE`` on one line of stderr and exit with code 2."""
    text = " ".join(str(message).split())
    print(f"{prog}: error: {text}", file=sys.stderr)
    raise SystemExit(2)


def script(main: Callable[[], object], argv: Optional[Sequence[str]] = None) -> NoReturn:
    """Run a scenario script's ``main`` as a command: ``-h`` prints the
    script's docstring; any other argument (``argv``, else the command line's)
    is refused; a ValueError or OSError out of ``main`` (a bad environment
    variable, a file that cannot be written) is one line and exit code 2, an
    interruption exit code 130.  Exits with ``main``'s integer, else 0.  On a
    terminal, ``main``'s runs show progress bars on stderr
    (:func:`~llmqueue.common.progress.runs_shown`)."""
    prog = os.path.basename(sys.argv[0]) or "script"
    doc = getattr(main, "__globals__", {}).get("__doc__") or ""  # the script's docstring
    parser = Parser(prog=prog, description=doc,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    try:
        with progress.runs_shown(sys.stderr.isatty()):  # bars on a terminal only
            code = main()
    except BrokenPipeError:  # the reader went away (``python scenarios/NAME.py | head``)
        quiet_stdout()
        raise SystemExit(141) from None  # 128 + SIGPIPE, as for ``llmqueue``
    except (ValueError, OSError, OverflowError) as exc:
        fail(prog, exc)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def quiet_stdout() -> None:
    """Point standard output at the null device, so the interpreter's last
    flush of what the closed pipe did not take raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file behind it (a captured stdout)
        pass
