"""What the speed work must not change: skip-ahead is exact, memory does not
grow with the iteration count.  (Timings live in benchmarks/, not here.)"""

import random
import tracemalloc

import pytest

import llmqueue as q


def both(workload, policy, **kw):
    fast = q.simulate(workload, policy, batches=True, requests=True, timeseries=True, **kw)
    slow = q.simulate(workload, policy, batches=True, requests=True, timeseries=True,
                      skip_ahead=False, **kw)
    return fast, slow


@pytest.mark.parametrize("policy", ["sarathi", "orca", "vllm", "fastertransformer"])
def test_skip_ahead_gives_the_same_figures_as_stepping(policy):
    # times are whole nanoseconds and integrals are integers: equality is exact
    fast, slow = both(q.renewal(0.4675, 290, 990), policy, horizon=300.0)
    assert fast.summary == slow.summary
    assert fast.batch_log == slow.batch_log
    assert fast.series == slow.series
    key = lambda r: (r.rid, r.admitted, r.prefill_done, r.first_token, r.finished)  # noqa: E731
    assert sorted(map(key, fast.request_log)) == sorted(map(key, slow.request_log))


def test_skip_ahead_is_exact_on_random_workloads():
    rng = random.Random(11)
    for _ in range(6):
        rows = sorted((round(rng.uniform(0, 60), 2), rng.randint(0, 900), rng.randint(1, 300))
                      for _ in range(200))
        kw = dict(bmax=rng.choice([64, 256]), kmax=rng.choice([None, 8, 64]),
                  horizon=rng.choice([None, 40.0]))
        fast, slow = both(q.from_list(rows), rng.choice(["sarathi", "orca", "vllm",
                                                         "fastertransformer"]), **kw)
        assert fast.summary == slow.summary and fast.batch_log == slow.batch_log


def test_skip_ahead_actually_skips():
    # FasterTransformer-whole at point C decodes in long identical stretches
    import simpy

    from llmqueue.engine.processes import Engine
    from llmqueue.engine.recorder import Recorder
    from llmqueue.engine.simulate import feed

    env = simpy.Environment()
    engine = Engine(env, q.make_policy("fastertransformer"), bmax=128,
                    recorder=Recorder(128), until=10**12)
    env.process(feed(env, engine, q.renewal(0.4675, 290, 990), 10**12))
    steps = 0
    while env.peek() < 10**12:
        env.step()
        steps += 1
    assert engine.recorder.batches > 20_000
    assert steps < engine.recorder.batches / 2


def peak_bytes(horizon):
    tracemalloc.start()
    q.simulate(q.renewal(0.4675, 290, 990), "sarathi", horizon=horizon)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_does_not_grow_with_iterations_without_logs():
    # ten times the iterations: only the per-request latency arrays grow (24 bytes each)
    small, large = peak_bytes(250.0), peak_bytes(2500.0)
    arrays = 3 * 8 * (2500 - 250) / 0.4675
    assert large - small < arrays + 200_000


def test_a_varied_run_schedules_few_simpy_events_per_request():
    """Each request costs seven events (arrival, its slot, its process start,
    prefill end, last token, slot back, process end) plus the scheduler's
    timeouts (a run per arrival, prefill end or finish, at most); a batch
    choice waits for the end of its instant only when something else happens
    then.  Waiting after every iteration that ended a prefill or a finish costs
    about 10.8 events a request on this workload; a settled instant, about 9.3."""
    import simpy

    from benchmarks.varied import lognormal_rows
    from llmqueue.engine.processes import Engine
    from llmqueue.engine.recorder import Recorder
    from llmqueue.engine.simulate import feed

    env = simpy.Environment()
    engine = Engine(env, q.make_policy("sarathi"), bmax=512, kmax=256, recorder=Recorder(512))
    env.process(feed(env, engine, q.from_list(lognormal_rows(3000))))
    steps = 0
    while env.peek() < float("inf"):
        env.step()
        steps += 1
    assert engine.recorder.completed == 3000
    assert steps / 3000 < 9.8
