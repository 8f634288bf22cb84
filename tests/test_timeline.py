"""``--chrome-trace``: the iterations as a Chrome trace-event timeline, valid
JSON that Perfetto reads, complete (every iteration once, every token, every
preemption) and consistent with the run's own figures."""

import json

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.engine.timeline import chrome_trace


def _slices(doc, pid):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def test_every_iteration_is_one_slice_with_its_tokens_and_members():
    wl = q.renewal(0.5, 40, 3, count=4)
    result = q.simulate(wl, bmax=32, kmax=10, batches=True)
    doc = chrome_trace([("sarathi", result)])
    slices = _slices(doc, 1)
    log = result.batch_log
    assert len(slices) == len(log) == result.summary["batches"]
    # by hand: request 0 arrives at 0.5 s; its 40-token prompt takes chunks 32 + 8
    first = slices[0]
    assert first["name"] == "prefill" and first["ts"] == 500_000.0
    assert first["args"]["members"] == "0:p32"
    assert slices[1]["args"]["members"] == "0:p8"
    assert sum(s["args"]["prefill_tokens"] for s in slices) == 4 * 40
    assert sum(s["args"]["decode_tokens"] for s in slices) == 4 * 3
    for a, b in zip(slices, slices[1:]):  # one GPU: slices never overlap
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-6
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]
    assert names == ["sarathi"]


def test_preemptions_are_instant_events_and_kv_a_counter():
    wl = q.renewal(0.05, 290, 300, count=60)
    result = q.simulate(wl, bmax=256, kmax=None, kv=q.KV(capacity_tokens=6000), batches=True)
    assert result.summary["preemptions"] > 0
    doc = chrome_trace([("memory", result)])
    instants = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert sum(e["args"]["count"] for e in instants) == result.summary["preemptions"]
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == result.summary["batches"]
    assert max(c["args"]["tokens"] for c in counters) == result.summary["kv_max"]


def test_cli_writes_one_track_per_engine_and_strict_json(tmp_path, capsys):
    path = tmp_path / "net.json"
    assert main(["run", "parallel", "--horizon", "20", "--chrome-trace", str(path)]) == 0
    capsys.readouterr()

    def refuse(token):
        raise ValueError(token)
    doc = json.loads(path.read_text(), parse_constant=refuse)
    tracks = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
              if e["name"] == "process_name"}
    assert sorted(tracks.values()) == [f"engine-{i}" for i in range(4)]  # no merged total
    assert all(_slices(doc, pid) for pid in tracks)
