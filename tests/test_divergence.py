"""Runs that diverge: stopped early on request, bounded otherwise, never a hang."""

import json
import subprocess
import sys

import pytest

import llmqueue as q


def test_max_pending_stops_a_diverging_run_with_its_time():
    # vLLM at twice capacity with no slot limit: prefill always pending, nothing decodes
    lam = 2 * 16.71
    r = q.simulate(q.poisson(lam, 100, 100, seed=1), "vllm", bmax=512, kmax=None,
                   horizon=10_000, max_pending=500, requests=True)
    s = r.summary
    assert s["verdict"] == "diverged"
    assert s["pending_final"] == 501 and s["arrivals"] == 501
    # 501 Poisson arrivals at 33.4/s take about 15 s (sd 0.7 s)
    assert 11 < s["diverged_at"] < 19
    assert len(r.request_log) == s["completed"] + s["residents_final"] + s["waiting_final"]


def test_max_pending_leaves_a_stable_run_alone():
    kw = dict(horizon=300.0)
    free = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", **kw).summary
    capped = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", max_pending=150, **kw).summary
    assert capped == free and capped["diverged_at"] is None


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10"])
def test_max_pending_is_validated(bad):
    with pytest.raises(ValueError, match="max_pending must be an integer >= 1"):
        q.simulate(q.renewal(1.0, 10, 10), horizon=10.0, max_pending=bad)


def test_cli_reports_divergence_and_refuses_it_for_networks():
    cmd = [sys.executable, "-m", "llmqueue", "run", "single", "--scheduler", "vllm", "--set",
           "kmax=none", "--set", "arrival=poisson", "--set", "rate=40", "--set", "vp=100",
           "--set", "vd=100", "--set", "bmax=512", "--max-pending", "300", "--json"]
    row = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert row["rows"][0]["verdict"] == "diverged" and row["rows"][0]["pending_final"] == 301
    net = subprocess.run([sys.executable, "-m", "llmqueue", "run", "parallel",
                          "--max-pending", "10"], capture_output=True, text=True)
    assert net.returncode == 2 and "does not support max_pending" in net.stderr


def test_fastertransformer_at_point_c_runs_long_without_logs_in_little_memory():
    import tracemalloc
    tracemalloc.start()
    s = q.simulate(q.renewal(0.4675, 290, 990), "fastertransformer", horizon=20_000).summary
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert s["verdict"] == "unstable" and s["waiting_final"] > 40_000
    # the waiting line is the only thing that grows: a few hundred bytes a request
    assert peak < 400 * s["waiting_final"] + 2_000_000


def test_finished_requests_do_not_stay_in_memory_without_a_slot_limit():
    """kmax=None: a finished request gives back no slot (a put into a full pool
    of inf slots would wait forever and keep it alive); 40,000 requests served
    one after another hold a few MB, not tens."""
    import tracemalloc

    import llmqueue as q
    tracemalloc.start()
    s = q.simulate(q.renewal(0.05, 20, 5), "sarathi", bmax=128, kmax=None, horizon=2000).summary
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert s["completed"] >= 39_990
    assert peak < 15 * 2**20
