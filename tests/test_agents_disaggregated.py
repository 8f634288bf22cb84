"""The agents and disaggregated scenarios: loads against theory, DistServe's trade."""

import pytest

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import agents
from llmqueue.experiments import disaggregated as dis


def test_agents_engine_loads_follow_the_workflow():
    """Each engine's token load is rate x tokens per job / capacity (within
    the Poisson error of ~700 jobs), the workers are the bottleneck, and every
    job runs at least its five calls."""
    params = agents.EXPERIMENT.resolve({})
    result, jobs = agents.simulate_agents(params, 600.0, seed=1)
    for r in result.engines.values():
        assert r.summary["load"] == pytest.approx(r.summary["load_expected"], rel=0.12)
        assert r.summary["pending_final"] < 150                     # below capacity: bounded
    assert max(result.engines, key=lambda n: result.engines[n].summary["load"]) == "worker"
    total = result.total.summary
    assert 5 <= total["calls_per_job"] <= 6
    assert all(len(j.calls) in (5, 6) for j in jobs if j.end is not None)
    assert total["job_e2e_p50"] <= total["job_e2e_p99"]


def test_disaggregated_limit_is_the_tighter_pool():
    params = dis.EXPERIMENT.resolve({})
    # 3 of 4 GPUs take 1001 of every 1100 tokens: 0.75 * 1100 / 1001 = 0.824
    assert dis.load_limit(params, "disaggregated") == pytest.approx(0.75 * 1100 / 1001)
    assert dis.load_limit(params, "colocated") == 1.0


def test_disaggregation_cuts_tpot_and_holds_less_load():
    params = dis.EXPERIMENT.resolve({})
    rows = dict(dis.run({**params, "load": 0.6}, RunOptions(horizon=300.0, seed=0)))
    co, split = rows["colocated/total"].summary, rows["disaggregated/total"].summary
    assert co["requests"] == split["requests"]                  # the same jobs in both
    assert split["tpot_p50"] < 0.7 * co["tpot_p50"]
    # past the split's limit (0.82) its prefill pool backs up; colocated holds
    over = dict(dis.run({**params, "load": 0.9}, RunOptions(horizon=300.0, seed=0)))
    prefill = over["disaggregated/prefill"].summary
    assert prefill["load"] > 1.0
    # it grows at about (load - 1) x capacity (SPEC 6.2): at least half of that in 300 s
    fluid = (prefill["load"] - 1.0) * prefill["capacity_tokens_per_s"] * 300.0
    assert prefill["backlog_final"] > 0.5 * fluid
    assert over["disaggregated/total"].summary["backlog_final"] > \
        5 * over["colocated/total"].summary["backlog_final"]


def test_disaggregation_puts_the_kv_load_on_the_decode_engine():
    """With a cache per GPU the decode engine holds every request's prompt for
    its whole decode (the transferred KV): its cache is far fuller than the
    prefill engines', which hold a prompt for one iteration or a few, and than
    the colocated engines' (docs/guide/networks.md: 64% / 2% / 29% at 600 s)."""
    params = dis.EXPERIMENT.resolve({"kv": "60000"})
    rows = dict(dis.run(params, RunOptions(horizon=300.0, seed=0)))
    used = {name: rows[name].summary["kv_utilization"]
            for name in ("colocated/total", "disaggregated/prefill", "disaggregated/decode")}
    assert used["disaggregated/decode"] > 0.5
    assert used["disaggregated/prefill"] < 0.05
    assert used["disaggregated/prefill"] < used["colocated/total"] < used["disaggregated/decode"]
