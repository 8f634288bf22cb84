"""Progress on a terminal for every long run (issue #33): the simulated-time
counter in whole seconds, the bars of experiments of many runs under ``run``
and in scenario scripts, and still nothing in pipes or ``--json``."""

import json
import os
import re
import subprocess
import sys
import threading

import pytest

import llmqueue as q
from llmqueue.common import progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pty = pytest.importorskip("pty")


def on_terminal(argv, cwd=ROOT, timeout=300):
    """Run ``argv`` with stderr on a pseudo-terminal (120 columns) and stdout
    on a pipe; its exit code, stdout and what the terminal showed."""
    import fcntl
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, cwd=cwd)
    os.close(slave)
    shown = []

    def read():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            shown.append(chunk)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out = proc.communicate(timeout=timeout)[0]
    reader.join(10)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(shown).decode(errors="replace")


def test_simulated_time_counts_whole_seconds(capsys):
    with progress.runs_shown(True):
        q.simulate(q.poisson(2.0, 50, 20, seed=3), horizon=200)
    err = capsys.readouterr().err
    assert re.search(r"\b\d+/200 s\b", err), err
    assert not re.search(r"\d\.\d+/200", err), err


def test_quiet_bars_show_only_where_runs_are_shown():
    with progress.bar(3, "run", False) as bar:
        assert bar.disable
    with progress.runs_shown(True):
        with progress.bar(3, "run", False) as bar:
            assert not bar.disable
            with progress.bar(10, "s", True, "inner", False) as inner:  # under another
                assert inner.delay == progress.NESTED_DELAY
    with progress.runs_shown(False):
        assert progress.bar(3, "run", False).disable


def test_a_pool_worker_shows_no_runs(monkeypatch):
    with progress.runs_shown(True):
        assert progress.runs_are_shown()
        monkeypatch.setattr(progress.os, "getpid", lambda: -1)  # another process
        assert not progress.runs_are_shown()


def test_run_of_many_simulations_shows_a_bar_on_a_terminal_only():
    argv = [sys.executable, "-m", "llmqueue", "run", "theorem2", "--set", "seeds=2",
            "--set", "loads=0.9,1.1", "--horizon", "100"]
    code, out, shown = on_terminal(argv)
    assert code == 0 and "lambda*" in out
    assert "4/4" in shown and "run" in shown  # the sweep's runs counted
    code, out, shown = on_terminal(argv + ["--json"])
    assert code == 0 and shown == "" and json.loads(out)["rows"]
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert piped.returncode == 0 and piped.stderr == ""


def test_a_single_run_on_a_terminal_counts_whole_seconds():
    code, out, shown = on_terminal([sys.executable, "-m", "llmqueue", "run", "single",
                                    "--horizon", "3000"])
    assert code == 0 and "sarathi" in out
    assert re.search(r"\b\d+/3000 s\b", shown) and not re.search(r"\d\.\d+/3000", shown)


def test_a_scenario_script_shows_its_runs_on_a_terminal(tmp_path):
    script = tmp_path / "scenario.py"
    script.write_text(
        '"""A scenario of one long run."""\n'
        "import llmqueue as q\n"
        "from llmqueue.cli.script import script\n\n\n"
        "def main():\n"
        "    r = q.simulate(q.poisson(2.0, 50, 20, seed=3), horizon=2000)\n"
        "    print('done', r.summary['completed'])\n\n\n"
        "if __name__ == '__main__':\n"
        "    script(main)\n")
    code, out, shown = on_terminal([sys.executable, str(script)])
    assert code == 0 and out.startswith("done")
    assert "/2000 s" in shown
    piped = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stderr == ""
