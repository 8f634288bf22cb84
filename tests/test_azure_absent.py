"""Where the Azure trace is absent (a fresh clone: it is not shipped), the
scenario script and ``regenerate.py`` say where to get it and skip cleanly
(issue #33)."""

import importlib.util
import sys
from pathlib import Path

import pytest

from llmqueue.experiments import azure

ROOT = Path(__file__).resolve().parent.parent
POINTER = ("https://github.com/Azure/AzurePublicDataset", "CC-BY 4.0",
           "AzureLLMInferenceTrace_conv.csv")


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scenarios" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def absent(monkeypatch, tmp_path):
    path = str(tmp_path / "traces" / "AzureLLMInferenceTrace_conv.csv")
    monkeypatch.setattr(azure, "DEFAULT_TRACE", path)
    return path


def test_the_note_says_where_to_get_the_trace_and_where_to_put_it(absent):
    note = azure.absent_note()
    assert all(words in note for words in POINTER) and str(Path(absent).parent) in note


def test_the_azure_script_skips_with_one_line(absent, monkeypatch, capsys):
    from llmqueue.cli.script import script
    scenario = load("azure")
    monkeypatch.setattr(scenario, "PATH", absent)
    monkeypatch.setattr(scenario, "save", lambda *a: pytest.fail("nothing is drawn"))
    with pytest.raises(SystemExit) as stop:
        script(scenario.main, [])
    assert stop.value.code == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "skipped" in lines[0]
    assert all(words in lines[0] for words in POINTER)


def test_regenerate_reports_azure_as_skipped_not_failed(absent, monkeypatch, capsys):
    regen = load("regenerate")
    try:
        monkeypatch.setattr(regen, "run", lambda p: pytest.fail(f"{p.name} ran"))
        monkeypatch.setattr(regen, "report", lambda ran, started: len(ran))
        assert regen.main(["--only", "azure"]) == 0
        out = capsys.readouterr().out
        assert "0 producers" in out and "(1 skipped)" in out
        line = next(x for x in out.splitlines() if x.startswith("azure "))
        assert "skipped:" in line and all(words in line for words in POINTER)
        assert "FAILED" not in out
    finally:
        del sys.modules["regenerate"]


def test_the_quick_set_still_runs_azure_where_the_trace_is(monkeypatch, tmp_path):
    present = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    present.write_text("arrival,prefill,decode\n0,1,1\n")
    monkeypatch.setattr(azure, "DEFAULT_TRACE", str(present))
    regen = load("regenerate")
    try:
        azure_producer = next(p for p in regen.select([], quick=True) if p.name == "azure")
        assert azure_producer.skip() is None
    finally:
        del sys.modules["regenerate"]
