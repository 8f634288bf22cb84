"""Per-request token timing (SPEC 8.5): scheduling delay, largest inter-token gap,
the gap histogram and SLO attainment on them, against hand computations and a
brute-force reading of the batch log."""

import collections
import random

import pytest

import llmqueue as q
from llmqueue.engine import tokens as tokens_module
from llmqueue.engine.recorder import Recorder
from llmqueue.policies.builtin import ClassPriority, make_policy
from llmqueue.theory.slo import SLO, attainment

NS = 1e-9
# t(b) = 10 ms + 20 ms * ceil(b / 4)
STAIRS = q.Staircase(0.01, 0.02, 4)
# vllm, bmax 8.  A (8 + 3, class x) at 0; B (6 + 2, y) at 5 ms; C (4 + 1, y) at 140 ms.
#   0-50 ms: A's prompt (8 tokens)          50-100: B's prompt (6)
#   100-130: decodes A B (A1, B1)            130-160: decodes A B (A2, B2: B done)
#   160-190: C's prompt (4; A waits)         190-220: decodes A C (A3: A done, C1)
# A: tokens at 130, 160, 220 ms -> gaps 30, 60; scheduled at 0.
# B: tokens at 130, 160 -> gap 30; scheduled at 50, arrived at 5: delay 45 ms.
# C: one token; scheduled at 160, arrived at 140: delay 20 ms.
HAND = [(0.0, 8, 3, "x"), (0.005, 6, 2, "y"), (0.14, 4, 1, "y")]


@pytest.fixture(scope="module")
def hand():
    return q.simulate(q.from_list(HAND), "vllm", bmax=8, kmax=None, latency=STAIRS,
                      batches=True, requests=True)


def test_hand_run_batches_are_as_computed(hand):
    rows = [(round(b["start"], 9), round(b["duration"], 9), b["decode"], b["prefill"])
            for b in hand.batches()]
    assert rows == [(0.0, 0.05, [], {0: 8}), (0.05, 0.05, [], {1: 6}),
                    (0.1, 0.03, [0, 1], {}), (0.13, 0.03, [0, 1], {}),
                    (0.16, 0.03, [], {2: 4}), (0.19, 0.03, [0, 2], {})]


def test_exact_largest_gap_and_scheduling_delay(hand):
    by_id = {r.rid: v for r, v in hand.token_times.items()}
    assert by_id == {0: (0, 60_000_000), 1: (50_000_000, 30_000_000), 2: (160_000_000, None)}
    a, b, c = hand.latencies()
    assert a.tbt_max == pytest.approx(0.06) and a.sched_delay == 0
    assert b.tbt_max == pytest.approx(0.03) and b.sched_delay == pytest.approx(0.045)
    assert c.tbt_max is None and c.sched_delay == pytest.approx(0.02)
    assert (a.klass, b.klass, c.klass) == ("x", "y", "y")
    # streams in finishing order (B, A, C): gaps of vd > 1 requests, delays of all
    assert list(hand.tbt_max) == pytest.approx([0.03, 0.06])
    assert list(hand.sched_delay) == pytest.approx([0.045, 0.0, 0.02])


def test_summary_quantiles_over_every_gap(hand):
    # three gaps: 30 (A), 60 (A), 30 (B) ms; delays 0, 20, 45 ms
    s = hand.summary
    assert s["tbt_p50"] == pytest.approx(0.03) and s["tbt_p90"] == pytest.approx(0.06)
    assert s["tbt_p99"] == pytest.approx(0.06)
    assert s["sched_delay_p50"] == pytest.approx(0.02)
    assert hand.gaps.count == 3


def test_tbt_and_scheduling_delay_gate_attainment(hand):
    records = hand.latencies()
    assert attainment(records, SLO(tbt=0.07)).joint == 1.0
    assert attainment(records, SLO(tbt=0.05)).joint == pytest.approx(2 / 3)  # A's 60 ms gap
    assert attainment(records, SLO(sched_delay=0.05)).joint == 1.0
    assert attainment(records, SLO(sched_delay=0.03)).joint == pytest.approx(2 / 3)  # B
    assert attainment(records, SLO(tbt=0.05, sched_delay=0.03)).good == 1  # only C


def test_per_class_slo_attainment(hand):
    slo = {"x": SLO(tbt=0.07), "y": SLO(sched_delay=0.03)}
    result = attainment(hand.latencies(), slo)
    assert result.joint == pytest.approx(2 / 3)  # A good, B late, C good
    assert result.by_class["x"].joint == 1.0 and result.by_class["y"].joint == 0.5
    tight = attainment(hand.latencies(), {"x": SLO(tbt=0.05), "y": SLO(sched_delay=0.05)})
    assert tight.by_class["x"].joint == 0.0 and tight.by_class["y"].joint == 1.0


def test_unfinished_requests_are_not_good():
    r = q.simulate(q.from_list(HAND), "vllm", bmax=8, kmax=None, latency=STAIRS,
                   horizon=0.15, requests=True)
    records = r.latencies()
    assert [x.finished for x in records] == [False, False, False]
    assert attainment(records, SLO(e2e=100.0)).joint == 0.0


def brute_force(result):
    """First scheduled time and token end times of every request, from the batch log."""
    scheduled, tokens = {}, collections.defaultdict(list)
    for b in result.batch_log:
        for rid in b.decode:
            scheduled.setdefault(rid, b.start)
            tokens[rid].append(b.start + b.duration)
        for rid, _ in b.prefill:
            scheduled.setdefault(rid, b.start)
    return scheduled, tokens


def check_against_the_batch_log(result):
    scheduled, tokens = brute_force(result)
    kept = {r.rid: v for r, v in result.token_times.items()}
    gaps = [b - a for ends in tokens.values() for a, b in zip(ends, ends[1:])]
    checked = 0
    for r in result.request_log:
        if r.finished is None:
            continue
        first, largest = kept[r.rid]
        assert first == scheduled[r.rid]
        ends = tokens[r.rid]
        mine = [b - a for a, b in zip(ends, ends[1:])]
        assert largest == (max(mine) if r.vd > 1 else None), r.rid
        checked += 1
    return checked, gaps


def random_rows(rng, n):
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rng.choice([3.0, 10.0, 30.0]))
        rows.append((round(t, 3), rng.choice([0, rng.randint(1, 40), rng.randint(40, 600)]),
                     rng.randint(1, 90), rng.choice(["x", "y"])))
    return q.from_list(rows)


@pytest.mark.parametrize("seed", range(8))
def test_largest_gaps_match_the_batch_log(seed):
    # partial decode batches (small budgets, class priority), prefill-only steps,
    # skip-ahead, a context model: every finished request's figures are exact
    rng = random.Random(seed)
    name = ["sarathi", "orca", "vllm", "fastertransformer"][seed % 4]
    policy = make_policy(name)
    if seed % 3 == 0:
        policy = ClassPriority(policy, ["y", "x"])
    latency = [None, q.Roofline("A100-80GB", "codellama-34b")][seed % 2]
    result = q.simulate(random_rows(rng, 150), policy, bmax=rng.choice([16, 64, 256]),
                        kmax=rng.choice([None, 4, 32]), latency=latency, batches=True,
                        requests=True)
    checked, gaps = check_against_the_batch_log(result)
    assert checked > 50
    assert sum(result.gaps.counts.values()) + result.gaps.zeros == len(gaps)


@pytest.mark.parametrize("seed", range(4))
def test_largest_gaps_match_the_batch_log_under_preemption(seed):
    rng = random.Random(100 + seed)
    swap = dict(preemption="swap", swap_tokens=5000) if seed % 2 else {}  # KV kept on the CPU
    kv = q.KV(capacity_tokens=rng.choice([1500, 3000]), block_size=rng.choice([1, 16]),
              admission=rng.choice(["lazy", "prompt"]), restart=rng.choice(["keep", "scratch"]),
              **swap)
    result = q.simulate(random_rows(rng, 150), ["sarathi", "orca"][seed % 2], bmax=128,
                        kmax=None, kv=kv, batches=True, requests=True)
    assert result.summary["preemptions"] > 0
    checked, _ = check_against_the_batch_log(result)
    assert checked > 50


def test_histogram_quantiles_within_one_bin_of_the_exact_ones(monkeypatch):
    # a roofline run has a new gap length nearly every iteration: with few
    # exact lengths kept, the gaps go to the 1 % bins
    monkeypatch.setattr(tokens_module, "FLUSH", 16)
    result = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", bmax=128, kmax=100,
                        latency=q.Roofline("A100-80GB", "codellama-34b"), horizon=60.0,
                        batches=True, requests=True)
    _, gaps = check_against_the_batch_log(result)
    gaps.sort()
    assert len(set(gaps)) > 100 and result.gaps.count == len(gaps)
    for p in (50, 90, 99):
        exact = gaps[max(1, -(-p * len(gaps) // 100)) - 1] * NS
        assert result.summary[f"tbt_p{p}"] == pytest.approx(exact, rel=0.01)


def test_warmup_forgets_earlier_gaps():
    w = q.renewal(0.4675, 290, 990)
    whole = q.simulate(w, "vllm", horizon=150.0, requests=True)
    later = q.simulate(w, "vllm", horizon=150.0, warmup=75.0, requests=True)
    assert 0 < later.gaps.count < whole.gaps.count
    assert len(later.sched_delay) == len(later.ttft) < len(whole.sched_delay)


def test_no_more_than_a_few_gap_maxima_are_kept():
    # memory of the gap structure does not grow with the iterations
    from llmqueue.engine.processes import Engine
    from llmqueue.engine.simulate import feed
    import simpy
    for name in ("sarathi", "orca", "vllm"):
        env = simpy.Environment()
        engine = Engine(env, make_policy(name), bmax=128, recorder=Recorder(128, tokens=True),
                        until=10**12)
        env.process(feed(env, engine, q.renewal(0.4675, 290, 990), 10**12))
        env.run(until=3 * 10**11)
        times = engine.recorder.tokens
        assert len(times._gap) < 100 and len(times.counts) <= tokens_module.FLUSH
        assert len(times.records) <= 100  # the residents only


def test_token_timing_is_kept_with_the_request_log_only():
    # a few microseconds per request: runs without a request log do not pay them
    w = q.renewal(0.4675, 290, 990)
    plain = q.simulate(w, "sarathi", horizon=60.0)
    kept = q.simulate(w, "sarathi", horizon=60.0, requests=True)
    assert plain.gaps is None and plain.token_times is None and len(plain.tbt_max) == 0
    assert all(plain.summary[k] is None for k in ("tbt_p50", "tbt_p99", "sched_delay_p50"))
    assert kept.summary["tbt_p50"] == pytest.approx(q.Staircase().tokens_time(128))
    # everything else is the same run
    same = {k: v for k, v in plain.summary.items() if not k.startswith(("tbt", "sched"))}
    assert same == {k: v for k, v in kept.summary.items() if not k.startswith(("tbt", "sched"))}
    assert Recorder(8, tokens=True).tokens is not None and Recorder(8).tokens is None
