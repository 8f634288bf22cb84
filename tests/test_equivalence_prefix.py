"""The fast engine's prefix cache against the plain reference of SPEC 10.2
(``llmqueue.engine.reference_prefix``): batch for batch, memory for memory,
hit for hit, on prompts of shared groups and unique suffixes, small caches
that evict and preempt, both restart modes, the three admission modes, block
sizes 1, 2 and 4 with hash blocks of one or two blocks, and multi-turn
sessions."""

import functools
import random

import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_equivalence_kv import NAMES, request_times

import llmqueue as q
from llmqueue.common.units import to_ticks
from llmqueue.engine.errors import Stalled
from llmqueue.engine.kv_recorder import MemoryRecorder
from llmqueue.engine.processes import Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.reference_prefix import run_reference_prefix
from llmqueue.engine.sessions import feed_sessions
from llmqueue.models.sessions import Sessions
from llmqueue.models.workload import Arrival, Workload
from llmqueue.policies.builtin import make_policy

pytestmark = pytest.mark.filterwarnings("ignore:request .* can never fit")

CASES = 24


def request_memory(requests, cached):
    """Each request's memory record and its first start's hit (``cached(r)``)."""
    return sorted((r.rid, r.memory.ignored, r.memory.preemptions, r.memory.recomputed,
                   r.memory.area, cached(r)) for r in requests)


def engine_cached(r):
    """The engine's record of ``r``'s first start's hit (``None``: never started)."""
    return getattr(r.memory, "cached", None)


def compare(rows, policy, kv, **options):
    """Run both engines on ``rows``; assert they agree; return the reference's
    result (``None`` when both stall)."""
    workload = Workload(lambda: iter(rows), len(rows), "prefix rows")
    try:
        ref = run_reference_prefix(rows, policy, kv, **options)
    except Stalled:
        with pytest.raises(Stalled):
            q.simulate(workload, policy, kv=kv, **options)
        return None
    fast = q.simulate(workload, policy, kv=kv, batches=True, requests=True,
                      check_invariants=True, **options)
    assert fast.batch_log == ref.batches
    assert list(fast.kv_log) == ref.kv_log
    assert request_times(fast.request_log) == request_times(ref.requests)
    assert request_memory(fast.request_log, engine_cached) == request_memory(
        ref.requests, lambda r: ref.cached_tokens[r.rid])
    s, f = fast.summary, ref.figures
    assert {k: s[k] for k in FIGURES} == {
        "prefix_hit_tokens": f.prefix_hit_tokens, "prefix_hit_ratio": f.prefix_hit_ratio,
        "recompute_hit_tokens": f.recompute_hit_tokens, "evictions": f.evictions,
        "prefill_computed_tokens": f.prefill_computed_tokens,
        "cache_entries_max": f.entries_max, "cache_blocks_mean": f.cache_blocks_mean,
        "preemptions": sum(r.memory.preemptions for r in ref.requests)}
    return ref


FIGURES = ("prefix_hit_tokens", "prefix_hit_ratio", "recompute_hit_tokens", "evictions",
           "prefill_computed_tokens", "cache_entries_max", "cache_blocks_mean", "preemptions")


def prefix_rows(rng, n, h, groups, rate, out_share=0.5):
    """``n`` arrivals: a prompt is its group's shared prefix (ids ``(g, j)``) and
    a suffix of its own (ids ``(i, j)``), a share with ``out_blocks``."""
    rows, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        g = rng.randrange(len(groups))
        vp = groups[g] + rng.choice([0, rng.randint(0, 10), rng.randint(10, 80)])
        vd = rng.randint(1, 40)
        ids = [(g, j) if (j + 1) * h <= groups[g] else (i, j) for j in range((vp + vd) // h + 1)]
        out = tuple(ids[vp // h:(vp + vd) // h]) if rng.random() < out_share else None
        rows.append(Arrival(round(t, 3), vp, vd, None, tuple(ids[:vp // h + 1]), out, h))
    return rows


def case(seed):
    """The random configuration number ``seed``: rows, policy, cache, options."""
    rng = random.Random(5000 + seed)
    block = [1, 2, 4][seed % 3]
    h = block * rng.choice([1, 2])
    groups = [rng.randint(0, 60) for _ in range(rng.randint(1, 4))]
    rows = prefix_rows(rng, rng.choice([30, 50]), h, groups, rng.choice([5.0, 15.0]))
    chunked = rng.random() < 0.75
    kv = q.KV(capacity_tokens=rng.choice([160, 256, 400]), block_size=block, prefix=True,
              admission=["lazy", "prompt", "peak"][seed // 4 % 3],
              restart=["keep", "scratch"][seed // 12 % 2], watermark=rng.choice([None, 0.0, 0.05]))
    options = dict(bmax=rng.choice([16, 64, 128]) if chunked else 256,
                   kmax=rng.choice([None, 4, 32]),
                   latency=rng.choice([q.Staircase(0.002, 0.01, 64), q.Constant(0.02)]),
                   horizon=rng.choice([None, 6.0]))
    return rows, make_policy(NAMES[seed % 4], chunked=chunked), kv, options


@functools.lru_cache(maxsize=None)
def outcome(seed):
    """``(preemptions, evictions, restart hits, first hits)`` of case ``seed``
    once both engines agreed on it."""
    rows, policy, kv, options = case(seed)
    ref = compare(rows, policy, kv, **options)
    assert ref is not None
    f = ref.figures
    return (sum(r.memory.preemptions for r in ref.requests), f.evictions,
            f.recompute_hit_tokens, f.first_hit_tokens)


@pytest.mark.parametrize("seed", range(CASES))
def test_random_configurations_match_the_reference(seed):
    outcome(seed)


def test_the_random_cases_share_evict_and_preempt():
    results = [outcome(seed) for seed in range(CASES)]
    assert sum(1 for *_, first in results if first) >= CASES - 2, results  # shared prefixes hit
    assert sum(1 for _, evicted, _, _ in results if evicted) >= CASES * 3 // 4, results
    preempting = [seed for seed, (count, _, _, _) in enumerate(results) if count]
    assert len(preempting) >= CASES // 3, results
    for restart in ("keep", "scratch"):  # a victim re-hits its own work under both
        assert any(results[seed][2] and case(seed)[2].restart == restart
                   for seed in preempting), results
    for seed in range(CASES):  # SPEC 7.2: peak admission never needs to preempt
        if case(seed)[2].admission == "peak":
            assert results[seed][0] == 0


def run_sessions(sessions, policy, kv, hash_block, bmax, kmax, latency, horizon):
    """The fast engine playing ``sessions`` (:func:`feed_sessions`): its batch
    log, KV log and requests."""
    env = simpy.Environment()
    until = to_ticks(horizon) if horizon is not None else None
    recorder = Recorder(bmax, batches=True, requests=True)
    recorder.memory = MemoryRecorder(kv, batches=True)
    engine = Engine(env, policy, bmax=bmax, kmax=kmax, latency=latency, recorder=recorder,
                    until=until, kv=kv, check_invariants=True)
    feed_sessions(env, engine.send, sessions, until, hash_block, on_end=engine.end_arrivals)
    env.run(until=until)
    return (recorder.batch_log, list(recorder.memory.log),
            list(recorder.request_log) + list(engine.residents) + list(engine.waiting))


SESSION_CASES = 10


@functools.lru_cache(maxsize=None)
def session_outcome(seed):
    """``(turns, turns never fit, preemptions, first hits)`` of session case
    ``seed`` once both engines agreed on it; its think times are 0 (the next
    turn arrives as the last one finishes) in one case of three."""
    rng = random.Random(7000 + seed)
    block = [1, 2, 4][seed % 3]
    h = block * rng.choice([1, 2])
    think = 0.0 if seed % 3 == 0 else rng.choice([0.05, 0.3])
    sessions = list(Sessions(rate=rng.choice([2.0, 6.0]), sessions=12, turns=rng.choice([2, 4]),
                             think=think, message=rng.choice([8, 20]),
                             decode=rng.choice([6, 15]), system=rng.choice([16, 40]), groups=3,
                             hash_block=h, seed=seed))
    # a session's transcript outgrows 100 tokens: a turn that never fits ends it
    kv = q.KV(capacity_tokens=100 if seed % 5 == 4 else rng.choice([160, 300]),
              block_size=block, prefix=True,
              admission=["lazy", "prompt", "peak"][seed % 3 if seed % 2 else 0],
              restart=rng.choice(["keep", "scratch"]))
    policy = make_policy(NAMES[seed % 4])
    options = dict(bmax=rng.choice([16, 64]), kmax=rng.choice([None, 4]),
                   latency=q.Constant(0.02), horizon=rng.choice([None, 3.0]))
    ref = run_reference_prefix([], policy, kv, sessions=sessions, hash_block=h, **options)
    batches, kv_log, requests = run_sessions(sessions, policy, kv, h, **options)
    assert batches == ref.batches
    assert kv_log == ref.kv_log
    assert request_times(requests) == request_times(ref.requests)
    assert {r.rid: engine_cached(r) for r in requests} == ref.cached_tokens
    return (len(ref.requests), sum(r.memory.ignored for r in ref.requests),
            sum(r.memory.preemptions for r in ref.requests), ref.figures.first_hit_tokens)


@pytest.mark.parametrize("seed", range(SESSION_CASES))
def test_random_sessions_match_the_reference(seed):
    session_outcome(seed)


def test_the_session_cases_hit_their_own_transcripts_and_cut_sessions():
    results = [session_outcome(seed) for seed in range(SESSION_CASES)]
    assert all(first for *_, first in results), results
    assert any(ignored for _, ignored, _, _ in results), results  # a session ends unfit
    assert any(preempted for _, _, preempted, _ in results), results


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(0, 24),
                               st.integers(1, 12), st.integers(0, 8), st.booleans()),
                     min_size=1, max_size=10),
       name=st.sampled_from(NAMES), block=st.sampled_from([1, 2, 4]), mult=st.sampled_from([1, 2]),
       capacity=st.integers(8, 80), admission=st.sampled_from(["lazy", "prompt", "peak"]),
       restart=st.sampled_from(["keep", "scratch"]), bmax=st.sampled_from([4, 8, 32]),
       kmax=st.sampled_from([None, 2, 5]), watermark=st.sampled_from([None, 0.0, 0.1]),
       chunked=st.booleans(), horizon=st.sampled_from([None, 0.3, 0.7]))
def test_property_tiny_caches_match_the_reference(reqs, name, block, mult, capacity, admission,
                                                  restart, bmax, kmax, watermark, chunked,
                                                  horizon):
    # requests of group g > 0 share up to 24 prompt tokens; group 0 shares nothing
    h = block * mult
    rows = []
    for i, (t, g, shared, vd, extra, out) in enumerate(sorted(reqs)):
        vp = shared + extra if g else extra
        ids = [(g, j) if g and (j + 1) * h <= shared else (i, j)
               for j in range((vp + vd) // h + 1)]
        rows.append(Arrival(t / 20, vp, vd, None, tuple(ids[:vp // h + 1]),
                            tuple(ids[vp // h:(vp + vd) // h]) if out else None, h))
    kv = q.KV(capacity_tokens=max(capacity, block), block_size=block, admission=admission,
              restart=restart, watermark=watermark, prefix=True,
              preemption="none" if admission == "peak" else "recompute")
    compare(rows, make_policy(name, chunked=chunked), kv, bmax=bmax if chunked else max(bmax, 40),
            kmax=kmax, latency=q.Constant(0.05), horizon=horizon)
