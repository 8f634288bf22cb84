"""The README and the documentation say what runs.

The README is short: its quick start is two commands (the point-C run, and
the test command ``.ci/run`` calls), and its links reach files of the
repository.  Every ``llmqueue`` command of the documentation's pages (the
home page and ``docs/guide/*.md``, where the README's long sections went) runs
as written (exit 0), from a scratch directory holding what a fresh clone has
(``examples/``), page by page in each page's order (a ``plot`` reads the
``sweep`` before it).  The quick ones run in the default suite; the whole list
with ``-m slow``.  Commands that need the Azure traces of ``../shared/traces``
skip where that folder is absent."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "traces"
#: The pages whose commands run: the site's home and its guide.
PAGES = [ROOT / "docs" / "index.md"] + sorted((ROOT / "docs" / "guide").glob("*.md"))
#: Commands of more than a few seconds: run only with ``-m slow``.
SLOW = ("run azure", "run theorem2", "--dask", "llmqueue plan", "sweep ", "llmqueue plot ",
        "run goodput", "run engines", "run kmax-region", "run rybko-stolyar", "run vertex-c",
        "run storms", "run limit-cycle", "run blowup", "run coprime", "run nie-table1",
        "run memory-boundary", "run memory-waste", "run agents", "run disaggregated",
        "run parallel --set router=all", "llmqueue validate", "--set sessions=",
        "llmqueue calibrate", "llmqueue mlperf", "llmqueue compare")
#: The README's quick start, as written.
QUICK_START = [
    'pip install -e . && python scenarios/point_c.py',
    'pip install -e ".[test]" && ruff check . && mypy && python -m pytest',
]


def code_lines(path):
    """The lines of ``path``'s bash code blocks, continuation lines joined."""
    lines = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", path.read_text(), re.S):
        lines += [line.strip() for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    return lines


def page_commands(path):
    """The ``llmqueue`` commands of one page, in its order."""
    return [line for line in code_lines(path) if line.startswith("llmqueue ")]


def docs_commands():
    """Every page's ``llmqueue`` commands, page after page."""
    return [command for page in PAGES for command in page_commands(page)]


def needs_traces(command):
    return "shared/traces" in command or (command.split("#")[0].split() == ["llmqueue", "run",
                                                                          "azure"])


def run_all(tmp_path, quick):
    ran = 0
    for page in PAGES:  # each page from a fresh clone of its own
        scratch = tmp_path / page.stem / "clone"
        scratch.mkdir(parents=True)
        shutil.copytree(ROOT / "examples", scratch / "examples")
        (scratch / "plots").mkdir()
        if TRACES.is_dir():  # ../shared/traces, as beside the repository
            (scratch.parent / "shared").mkdir()
            os.symlink(TRACES, scratch.parent / "shared" / "traces")
        for command in page_commands(page):
            if (quick and any(s in command for s in SLOW)) or \
                    (needs_traces(command) and not TRACES.is_dir()):
                continue
            argv = command.split("#")[0].split()
            proc = subprocess.run([sys.executable, "-m", "llmqueue"] + argv[1:], cwd=scratch,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{page.name}: {command}\n{proc.stderr[-2000:]}"
            ran += 1
    return ran


def test_the_readme_quick_start_is_two_commands():
    commands = [line.split("#")[0].strip() for line in code_lines(ROOT / "README.md")
                if line and not line.startswith("#")]
    assert commands[:2] == QUICK_START
    assert commands[2:] == ['pip install -e ".[docs]" && mkdocs build --strict']


def test_ci_runs_the_readme_test_command_and_builds_the_site():
    ci = (ROOT / ".ci" / "run").read_text()
    assert QUICK_START[1] in ci and 'pip install -e ".[docs]" && mkdocs build --strict' in ci


def test_the_readme_links_reach_files():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(targets) > 15
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing


def test_the_guide_lists_its_commands():
    commands = docs_commands()
    assert len(commands) > 30 and "llmqueue run point-c" in " ".join(commands)
    assert not page_commands(ROOT / "README.md")  # they live in the guide now


def test_quick_docs_commands_run_as_written(tmp_path):
    assert run_all(tmp_path, quick=True) > 20


@pytest.mark.slow
def test_every_docs_command_runs_as_written(tmp_path):
    run_all(tmp_path, quick=False)
