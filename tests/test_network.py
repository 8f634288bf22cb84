"""Many engines on one clock: Engine.call, routers, totals, request classes."""

import numpy as np
import pytest
import simpy
from invariants import check_run

from llmqueue.engine.processes import Engine
from llmqueue.engine.simulate import simulate
from llmqueue.experiments import parallel
from llmqueue.models.latency import Constant
from llmqueue.models.sizes import Fixed, Geometric, PoissonSize
from llmqueue.models.workload import poisson
from llmqueue.network.classes import RequestClass, by_class, class_stream
from llmqueue.network.network import Network, merge_series
from llmqueue.network.routers import make_router
from llmqueue.policies.builtin import ClassPriority, Sarathi


def test_call_fires_with_the_resident_when_its_last_token_is_done():
    env = simpy.Environment()
    engine = Engine(env, Sarathi(), bmax=None, kmax=None, latency=Constant(1.0))
    first = engine.call(3, 2, klass="x")
    second = engine.call(0, 4)
    env.run()
    # one iteration for the whole prompt, then one per decode token (SPEC 1, 6a)
    assert first.value.finished == 3 * 10**9 and first.value.klass == "x"
    assert second.value.finished == 4 * 10**9
    assert (first.value.rid, second.value.rid) == (0, 1)


def test_round_robin_cycles_and_the_queue_routers_read_the_state_now():
    net = Network()
    a = net.add_engine("a", latency=Constant(1.0))
    b = net.add_engine("b", latency=Constant(1.0))
    a.call(100, 100)            # one long request
    b.call(10, 10)
    b.call(10, 10)              # two short ones
    rr = make_router("round-robin")
    assert [rr.choose([a, b, a]) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert make_router("jsq").choose([a, b]) == 0          # fewer requests
    assert make_router("jsq-tokens").choose([a, b]) == 1   # fewer tokens (200 vs 40)
    p2 = make_router("power-of-two", seed=3)
    assert all(p2.choose([a, b]) == 1 for _ in range(20))  # with two, always the lighter


def test_random_router_is_seeded_and_uniform():
    engines = [None] * 3
    draws = [make_router("random", seed=5).choose(engines) for _ in range(3)]
    again = [make_router("random", seed=5).choose(engines) for _ in range(3)]
    assert draws == again
    router = make_router("random", seed=1)
    counts = np.bincount([router.choose(engines) for _ in range(3000)], minlength=3)
    assert np.all(np.abs(counts - 1000) < 4 * np.sqrt(3000 * (1 / 3) * (2 / 3)))


def test_bad_names_are_errors_that_say_what_is_allowed():
    net = Network()
    net.add_engine("a")
    with pytest.raises(ValueError, match="router must be one of"):
        net.add_pool("p", ["a"], router="fastest")
    with pytest.raises(ValueError, match="target must be one of a"):
        net.call("b", 1, 1)
    with pytest.raises(ValueError, match="already"):
        net.add_engine("a")
    with pytest.raises(ValueError, match="horizon must be given"):
        net.feed("a", poisson(1.0, 1, 1))
        net.run()


def test_merge_series_adds_step_functions():
    one = [(0, 1, 10), (5, 0, 0)]
    two = [(2, 1, 5)]
    assert merge_series([one, two]) == [(0, 1, 10), (2, 2, 15), (5, 1, 5)]


def test_every_engine_of_a_pool_obeys_the_rules_and_the_total_adds_up():
    net = Network(seed=2, batches=True)
    net.add_replicas("e", 3, "power-of-two", bmax=256, kmax=20)
    net.feed("e", poisson(9.0, 300, 60, seed=4, count=600))
    result = net.run()
    for r in result.engines.values():
        check_run(r, 256, 20, work_conserving=True)
    total, parts = result.total.summary, [r.summary for r in result.engines.values()]
    assert total["arrivals"] == 600 == sum(p["arrivals"] for p in parts)
    assert total["completed"] == 600
    assert total["pending_mean"] == pytest.approx(sum(p["pending_mean"] for p in parts))
    assert max(p["pending_max"] for p in parts) <= total["pending_max"] \
        <= sum(p["pending_max"] for p in parts)
    t, pending, backlog = result.total.timeseries()
    assert pending[-1] == 0 and backlog[-1] == 0


def test_lambda_star_is_the_spec_figure_times_k():
    # SPEC 6.2: (512 / 0.15316) / 200 = 16.71 req/s for one engine
    for k in (1, 2, 4, 8):
        params = parallel.EXPERIMENT.resolve({"engines": str(k), "load": "1", "bmax": "512",
                                            "vp": "100", "vd": "100"})
        assert parallel.arrival_rate(params) == pytest.approx(k * 16.71, rel=1e-3)


def test_class_stream_has_each_class_at_its_rate_with_its_sizes():
    classes = [RequestClass("chat", 3.0, PoissonSize(40), Fixed(20)),
                RequestClass("code", 1.0, Geometric(500), PoissonSize(2))]
    arrivals = [a for a in class_stream(classes, seed=7, count=8000)]
    horizon = arrivals[-1].time
    for c in classes:
        mine = [a for a in arrivals if a.klass == c.name]
        expected = c.rate * horizon
        assert abs(len(mine) - expected) < 4 * np.sqrt(expected)
    chat = [a for a in arrivals if a.klass == "chat"]
    code = [a for a in arrivals if a.klass == "code"]
    assert np.mean([a.prefill for a in chat]) == pytest.approx(40, rel=0.03)
    assert {a.decode for a in chat} == {20}
    assert np.mean([a.prefill for a in code]) == pytest.approx(500, rel=0.08)
    assert min(a.decode for a in code) >= 1          # Poisson(2) draws 0 often: raised to 1
    assert arrivals == list(class_stream(classes, seed=7, count=8000))


def test_figures_by_class_and_class_priority_at_one_engine():
    # 2 x 5 req/s x 250 tokens: 91% of the 2738 tokens/s of bmax = 128
    classes = [RequestClass("hi", 5.0, 200, 50), RequestClass("lo", 5.0, 200, 50)]
    workload = class_stream(classes, seed=3)
    policy = ClassPriority(Sarathi(), ["hi"])
    result = simulate(workload, policy, bmax=128, kmax=None, horizon=400, requests=True)
    rows = by_class(result.request_log)
    assert rows["hi"]["arrivals"] + rows["lo"]["arrivals"] == result.summary["arrivals"]
    assert rows["hi"]["completed"] + rows["lo"]["completed"] == result.summary["completed"]
    # the favoured class gets its prompts served first: a far shorter wait
    assert rows["hi"]["ttft_p50"] < 0.5 * rows["lo"]["ttft_p50"]


def test_same_seed_same_numbers():
    def run():
        net = Network(seed=5)
        net.add_replicas("e", 3, "random", bmax=256)
        net.feed("e", poisson(8.0, 200, 50, seed=5, count=300))
        return net.run().total.summary

    assert run() == run()


def test_the_public_api_is_exported_at_the_top():
    import types

    import llmqueue as q
    assert q.__all__ == sorted(q.__all__)
    assert all(hasattr(q, name) for name in q.__all__)
    assert q.Network is Network and q.class_stream is class_stream and q.Geometric is Geometric
    assert isinstance(q.theory, types.ModuleType) and isinstance(q.sweeps, types.ModuleType)
