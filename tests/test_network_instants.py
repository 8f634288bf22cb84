"""Networks at one instant (found in review): routers read settled engines, and
completions at the same instant keep one order."""

import llmqueue as q
from llmqueue.network.workflows import start_jobs


def routed_to(via_job: bool) -> str:
    net = q.Network(seed=0)
    net.add_replicas("w", 2, router="jsq", policy="sarathi", bmax=8, kmax=None,
                     latency=q.Constant(1.0))
    w0, w1 = net.engines["w-0"], net.engines["w-1"]
    w0.call(0, 1)   # ends at t = 1
    w0.call(0, 10)
    w1.call(0, 10)
    if via_job:     # the call is made at t = 1 after two half-second delays
        def job(ctx):
            yield ctx.delay(0.5)
            yield ctx.delay(0.5)
            yield ctx.call("w", 0, 1)
        start_jobs(net, job, times=[0.0])
    else:           # the call is made at t = 1 by a timeout scheduled at t = 0
        def source():
            yield net.env.timeout(10**9)
            net.call("w", 0, 1)
        net.env.process(source())
    net.run(horizon=20)
    return max(net.engines.values(), key=lambda e: e.recorder.arrivals).name \
        if w0.recorder.arrivals != w1.recorder.arrivals else "tie"


def test_a_router_sees_the_request_that_ended_at_this_instant_as_gone():
    # settled at t = 1: w-0 holds 1 request and w-1 holds 1; JSQ breaks the tie to w-0,
    # however the call's event was scheduled
    assert routed_to(via_job=False) == "w-0"
    assert routed_to(via_job=True) == "w-0"


def test_simultaneous_completions_on_two_engines_keep_the_stepping_order():
    # A finishes its request at t = 4 after four 1 s iterations, B at t = 4 after one
    # 3.5 s iteration from t = 0.5; both jobs then call C (one token per batch).
    # Engines in a network step, so B's iteration (started at 0.5) ends before A's
    # last one (started at 3): job 1 reaches C first.
    net = q.Network(seed=0)
    net.add_engine("A", "sarathi", bmax=8, kmax=1, latency=q.Constant(1.0))
    net.add_engine("B", "sarathi", bmax=8, kmax=None, latency=q.Constant(3.5))
    net.add_engine("C", "sarathi", bmax=1, kmax=None, latency=q.Constant(1.0))

    def job(ctx):
        yield ctx.call("A" if ctx.record.jid == 0 else "B", 0, 4 if ctx.record.jid == 0 else 1)
        yield ctx.call("C", 0, 2)

    records = start_jobs(net, job, times=[0.0, 0.5])
    net.run()
    assert [(r.jid, r.end / 1e9) for r in records] == [(0, 8.0), (1, 6.0)]
    assert not any(e.skip_ahead for e in net.engines.values())
