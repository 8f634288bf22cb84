"""Skip-ahead with a KV cache is exact: running k identical iterations as one
gives every figure, log and record that stepping gives."""

import random
import warnings

import pytest

import llmqueue as q
from llmqueue.engine import Stalled


def both(rows, policy, **kw):
    """Skip-ahead on and off, logging everything; the skipping run's summary
    and KV series must also be the same without a batch log (a run then books
    its KV figures at once, not row by row), and its summary without any log."""
    out = []
    for skip in (True, False):
        out.append(q.simulate(q.from_list(rows), policy, skip_ahead=skip, batches=True,
                              requests=True, timeseries=True, **kw))
    bare = q.simulate(q.from_list(rows), policy, requests=True, timeseries=True, **kw)
    assert bare.summary == out[1].summary and bare.kv_series == out[1].kv_series
    # and without a batch or time-series log: a run is then booked once it has run,
    # unannounced, unless a warm-up restart or the horizon may cut it
    assert q.simulate(q.from_list(rows), policy, requests=True, **kw).summary == out[1].summary
    return out


def records(result):
    return sorted((x.rid, x.admitted, x.prefill_done, x.first_token, x.finished,
                   x.memory.preemptions, x.memory.recomputed, x.memory.area)
                  for x in result.request_log)


def assert_same(fast, slow):
    assert fast.summary == slow.summary
    assert fast.batch_log == slow.batch_log and fast.kv_log == slow.kv_log
    assert fast.series == slow.series and fast.kv_series == slow.kv_series
    assert records(fast) == records(slow)


@pytest.mark.parametrize("seed", range(40))
def test_skip_ahead_is_exact_with_memory(seed):
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(rng.randint(1, 60)):
        t += rng.expovariate(rng.choice([0.5, 2.0, 8.0]))
        rows.append((round(t, 3), rng.choice([0, rng.randint(1, 20), rng.randint(1, 300)]),
                     rng.randint(1, 200)))
    block = rng.choice([1, 1, 1, 16])
    kv = q.KV(capacity_tokens=rng.randint(600, 5000) * block, block_size=block,
              admission=rng.choice(["lazy", "prompt", "peak"]),
              restart=rng.choice(["keep", "scratch"]))
    chunked = rng.random() < 0.7
    horizon = rng.choice([None, 20.0])
    kw = dict(bmax=rng.choice([None, 16, 64, 256]) if chunked else rng.choice([None, 10**6]),
              kmax=rng.choice([None, 3, 50]), chunked=chunked, kv=kv, horizon=horizon,
              latency=rng.choice([q.Constant(0.01), q.Staircase()]),
              warmup=7.0 if horizon and rng.random() < 0.5 else 0.0)
    policy = rng.choice(["sarathi", "orca", "vllm", "fastertransformer", "step-fill"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fast, slow = both(rows, policy, **kw)
    except Stalled:
        return  # the vllm + lazy livelock, raised the same way either way
    assert_same(fast, slow)


@pytest.mark.parametrize("policy", ["sarathi", "orca", "vllm", "fastertransformer"])
@pytest.mark.parametrize("admission", ["lazy", "prompt", "peak"])
@pytest.mark.parametrize("block", [1, 16])
def test_point_c_with_memory_skips_exactly(policy, admission, block):
    kv = q.KV(capacity_tokens=60_000, admission=admission, block_size=block)
    rows = [(0.4675 * (i + 1), 290, 990) for i in range(300)]
    fast, slow = both(rows, policy, bmax=128, kmax=100, kv=kv, horizon=150.0)
    assert_same(fast, slow)


def test_skip_ahead_actually_skips_with_memory():
    import simpy

    from llmqueue.engine.kv_recorder import MemoryRecorder
    from llmqueue.engine.processes import Engine
    from llmqueue.engine.recorder import Recorder
    from llmqueue.engine.simulate import feed

    env = simpy.Environment()
    kv = q.KV(capacity_tokens=10**8)
    recorder = Recorder(128)
    recorder.memory = MemoryRecorder(kv)
    engine = Engine(env, q.make_policy("sarathi"), bmax=128, recorder=recorder, until=10**12,
                    kv=kv)
    env.process(feed(env, engine, q.renewal(0.4675, 290, 990), 10**12))
    steps = 0
    while env.peek() < 2 * 10**11:
        env.step()
        steps += 1
    assert engine.recorder.batches > 4000
    assert steps < engine.recorder.batches * 1.2  # stepping takes about 1.8 steps each


@pytest.mark.parametrize("seed", range(36))
def test_choices_that_skip_the_gate_when_memory_is_roomy_match_the_gate(seed, monkeypatch):
    """Whenever its blocks fit (any admission mode, blocks of 1 or 16 tokens,
    with or without a watermark), a decodes-first policy's batch under bmax is
    what the gate would accept: the same run with that shortcut turned off
    gives the same batches, memory log and figures, whether memory binds now
    and then or never."""
    import random

    from llmqueue.engine import kv_scheduler
    rng = random.Random(seed)
    rows = []
    t = 0.0
    for _ in range(150):
        t += rng.expovariate(rng.choice([2.0, 6.0]))
        rows.append((t, rng.randint(0, 600), rng.randint(1, 300)))
    wl = q.from_list(rows)
    kw = dict(bmax=rng.choice([64, 128, 512]), kmax=rng.choice([8, 32, None]),
              chunked=rng.random() < 0.8, batches=True, requests=True,
              kv=q.KV(capacity_tokens=rng.choice([3000, 20_000, 10**7]),
                      block_size=rng.choice([1, 16]), restart=rng.choice(["keep", "scratch"]),
                      admission=rng.choice(["lazy", "prompt", "peak"]),
                      watermark=rng.choice([None, None, 0.05])))
    policy = rng.choice(["sarathi", "vllm", "fastertransformer"])

    def outcome():
        try:
            r = q.simulate(wl, policy, **kw)
        except ValueError as error:  # a whole prompt over bmax, a livelock: refused alike
            return type(error).__name__, str(error)
        return r.batch_log, r.kv_log, dict(r.summary)
    fast = outcome()
    monkeypatch.setattr(kv_scheduler, "roomy", lambda engine: False)
    assert outcome() == fast
