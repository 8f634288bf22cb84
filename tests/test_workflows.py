"""Agent workflows: calls in sequence, fork-join, random branches, job records."""

import numpy as np
import pytest

from llmqueue.models.latency import Constant
from llmqueue.network.network import Network
from llmqueue.network.workflows import job_summary, start_jobs

S = 10**9  # ticks per second


def unit_engines(*names):
    net = Network()
    for name in names:
        net.add_engine(name, bmax=None, kmax=None, latency=Constant(1.0))
    return net


def test_a_fork_join_step_waits_for_its_slowest_call():
    net = unit_engines("planner", "w1", "w2", "w3", "aggregator")

    def job(ctx):
        yield ctx.call("planner", 1, 2)                      # 1 prefill + 2 decode: ends at 3
        yield ctx.all(ctx.call(w, 1, d) for w, d in (("w1", 1), ("w2", 5), ("w3", 3)))
        yield ctx.call("aggregator", 0, 1)                   # one decode iteration

    jobs = start_jobs(net, job, times=[0.0])
    net.run()
    calls = {c.engine: c.resident for c in jobs[0].calls}
    assert calls["planner"].finished == 3 * S
    # workers start at 3: 1 prefill iteration then d decodes
    assert [calls[w].finished for w in ("w1", "w2", "w3")] == [5 * S, 9 * S, 7 * S]
    # the aggregator is called when the slowest worker (w2, at 9) is done
    assert calls["aggregator"].arrival == 9 * S
    assert jobs[0].e2e == 10.0 and [c.engine for c in jobs[0].calls][0] == "planner"


def test_calls_to_a_pool_are_routed_and_recorded():
    net = Network()
    net.add_replicas("w", 3, "round-robin", bmax=None, kmax=None, latency=Constant(1.0))

    def job(ctx):
        yield ctx.all(ctx.call("w", 0, 1) for _ in range(3))

    jobs = start_jobs(net, job, times=[0.0])
    net.run()
    assert [c.engine for c in jobs[0].calls] == ["w-0", "w-1", "w-2"]
    assert jobs[0].e2e == 1.0


def test_random_branches_are_seeded_and_taken_at_their_rate():
    def run(seed):
        net = unit_engines("a", "b")

        def job(ctx):
            yield ctx.call("a", 0, 1)
            if ctx.rng.random() < 0.25:
                yield ctx.call("b", 0, 1)

        jobs = start_jobs(net, job, rate=5.0, seed=seed, count=2000)
        net.run()
        return [len(j.calls) for j in jobs]

    calls = run(4)
    assert calls == run(4)
    branched = sum(n == 2 for n in calls)
    assert abs(branched - 500) < 4 * np.sqrt(2000 * 0.25 * 0.75)


def test_job_summary_counts_unfinished_jobs_and_gives_percentiles():
    net = unit_engines("a")

    def job(ctx):
        yield ctx.delay(0.5)
        yield ctx.call("a", 0, 2)

    jobs = start_jobs(net, job, times=[0.0, 10.0, 100.0])
    net.run(horizon=50.0)
    s = job_summary(jobs)
    assert (s["jobs"], s["jobs_completed"]) == (2, 2)   # the third starts after the horizon
    assert s["job_e2e_p50"] == pytest.approx(2.5)       # 0.5 s pause + 2 decode iterations
    with pytest.raises(ValueError, match="exactly one of rate"):
        start_jobs(net, job)
