"""The azure scenario: replaying a trace against the four schedulers."""

import json

import pytest

from llmqueue.cli.main import main
from llmqueue.experiments import azure


def test_a_fresh_clone_without_traces_asks_for_a_path(monkeypatch, tmp_path):
    monkeypatch.setattr(azure, "DEFAULT_TRACE", str(tmp_path / "absent.csv"))
    with pytest.raises(ValueError, match="--set path=FILE"):
        azure.trace_path("")


def test_azure_replays_a_generic_file_with_speedup(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("arrival,prefill,decode\n0,100,5\n1,300,3\n2,50,4\n")
    assert main(["run", "azure", "--set", f"path={path}", "--set", "speedup=2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in doc["rows"]] == list(azure.SCHEDULERS)
    for row in doc["rows"]:
        assert row["arrivals"] == row["completed"] == 3


def test_azure_real_trace_first_requests_with_cdf(traces_dir, tmp_path, capsys):
    cdf = tmp_path / "cdf.png"
    assert main(["run", "azure", "--set", "limit=300", "--scheduler", "sarathi",
                 "--set", f"cdf={cdf}", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["completed"] == 300 and cdf.stat().st_size > 0
    # sarathi at bmax = 128 never exceeds the budget, so every iteration lasts t_128
    assert doc["rows"][0]["tpot_p99"] == pytest.approx(0.01128 + 0.03547)


def test_bad_speedup_is_one_line(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("arrival,prefill,decode\n0,100,5\n")
    assert main(["run", "azure", "--set", f"path={path}", "--set", "speedup=0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "speedup must be a finite number > 0" in err[0]
