"""Tidy data: runs and sweeps as pandas DataFrames (pandas is an optional extra)."""

import sys

import pytest

import llmqueue as q


def test_frames_hold_the_logs_in_seconds():
    pd = pytest.importorskip("pandas")
    result = q.simulate(q.renewal(0.5, 40, 3, count=4), bmax=32, kmax=10, batches=True,
                        requests=True)
    requests = result.requests_frame()
    assert list(requests["id"]) == [0, 1, 2, 3]
    assert list(requests["arrival"]) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert (requests["finished"] > requests["first_token"]).all()
    batches = result.batches_frame()
    assert len(batches) == result.summary["batches"]
    assert batches["prefill_tokens"].sum() == 160 and batches["decode_tokens"].sum() == 12
    summary = result.to_frame("sarathi")
    assert summary.loc[0, "label"] == "sarathi" and summary.loc[0, "completed"] == 4
    assert isinstance(summary, pd.DataFrame)


def test_memory_columns_join_the_request_frame():
    pytest.importorskip("pandas")
    result = q.simulate(q.renewal(0.05, 290, 300, count=40), bmax=256, kmax=None,
                        kv=q.KV(capacity_tokens=6000), requests=True)
    frame = result.requests_frame()
    assert frame["preemptions"].sum() == result.summary["preemptions"]
    assert {"ignored", "recomputed_tokens", "memory_area"} <= set(frame.columns)


def test_a_sweep_file_loads_as_a_frame(tmp_path):
    pytest.importorskip("pandas")
    from llmqueue.cli.main import main
    from llmqueue.sweeps.runner import read_frame
    out = tmp_path / "s.csv"
    assert main(["sweep", "single", "--grid", "gap=0.5,0.6", "--set", "vp=20",
                 "--set", "vd=5", "--horizon", "20", "--out", str(out)]) == 0
    frame = read_frame(str(out))
    assert sorted(frame["gap"]) == [0.5, 0.6] and (frame["completed"] > 0).all()


def test_without_pandas_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    result = q.simulate(q.renewal(0.5, 4, 3, count=2), requests=True)
    with pytest.raises(ImportError, match=r"llmqueue\[frames\]"):
        result.requests_frame()
