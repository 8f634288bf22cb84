"""Every ``llmqueue`` command of the README runs as written (exit 0), from a
scratch directory holding what a fresh clone has (``examples/``), in the
README's order (a ``plot`` reads the ``sweep`` before it).  The quick ones run
in the default suite; the whole list with ``-m slow``.  Commands that need the
Azure traces of ``../shared/traces`` skip where that folder is absent."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
#: Commands of more than a few seconds: run only with ``-m slow``.
SLOW = ("run azure", "run theorem2", "--dask", "llmqueue plan", "sweep ", "llmqueue plot ",
        "run goodput", "run engines", "run kmax-region", "run rybko-stolyar", "run vertex-c",
        "run storms", "run limit-cycle", "run blowup", "run coprime", "run nie-table1",
        "run memory-boundary", "run memory-waste", "run agents", "run disaggregated",
        "run parallel --set router=all", "llmqueue validate", "--set sessions=")


def readme_commands():
    """The README's ``llmqueue`` commands, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.strip() for line in joined.splitlines()
                     if line.strip().startswith("llmqueue ")]
    return commands


def needs_traces(command):
    return "shared/traces" in command or (command.split("#")[0].split() == ["llmqueue", "run",
                                                                          "azure"])


def run_all(tmp_path, quick):
    scratch = tmp_path / "clone"
    scratch.mkdir()
    shutil.copytree(ROOT / "examples", scratch / "examples")
    (scratch / "plots").mkdir()
    if TRACES.is_dir():  # ../shared/traces, as beside the repository
        (tmp_path / "shared").mkdir()
        os.symlink(TRACES, tmp_path / "shared" / "traces")
    ran = 0
    for command in readme_commands():
        if (quick and any(s in command for s in SLOW)) or \
                (needs_traces(command) and not TRACES.is_dir()):
            continue
        argv = command.split("#")[0].split()
        proc = subprocess.run([sys.executable, "-m", "llmqueue"] + argv[1:], cwd=scratch,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
        ran += 1
    return ran


def test_the_readme_lists_its_commands():
    commands = readme_commands()
    assert len(commands) > 30 and "llmqueue run point-c" in " ".join(commands)


def test_quick_readme_commands_run_as_written(tmp_path):
    assert run_all(tmp_path, quick=True) > 20


@pytest.mark.slow
def test_every_readme_command_runs_as_written(tmp_path):
    run_all(tmp_path, quick=False)
