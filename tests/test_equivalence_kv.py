"""The fast engine under a KV cache against the plain reference of SPEC 7
(``llmqueue.engine.reference_kv``): batch for batch, memory for memory."""

import functools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmqueue as q
from llmqueue.engine.errors import Stalled
from llmqueue.engine.reference import run_reference
from llmqueue.engine.reference_kv import run_reference_kv
from llmqueue.policies.builtin import ClassPriority, FunctionPolicy, Sarathi, make_policy
from llmqueue.policies.view import Plan
from llmqueue.policies.wait import Wait

pytestmark = pytest.mark.filterwarnings("ignore:request .* can never fit")

NAMES = ["sarathi", "orca", "vllm", "fastertransformer"]
CASES = 20


def request_times(requests):
    """Each request's times."""
    return sorted((r.rid, r.arrival, r.admitted, r.prefill_done, r.first_token, r.finished)
                  for r in requests)


def request_memory(requests):
    """Each request's memory record."""
    return sorted((r.rid, r.memory.ignored, r.memory.preemptions, r.memory.swaps,
                   r.memory.recomputed, r.memory.area) for r in requests)


def compare(rows, policy, kv, **options):
    """Run both engines; assert they agree; return the reference's result
    (``None`` when both stall)."""
    try:
        ref = run_reference_kv(q.from_list(rows), policy, kv, **options)
    except Stalled:
        with pytest.raises(Stalled):
            q.simulate(q.from_list(rows), policy, kv=kv, **options)
        return None
    fast = q.simulate(q.from_list(rows), policy, kv=kv, batches=True, requests=True,
                      **options)
    assert fast.batch_log == ref.batches
    assert list(fast.kv_log) == ref.kv_log
    assert request_times(fast.request_log) == request_times(ref.requests)
    assert request_memory(fast.request_log) == request_memory(ref.requests)
    s = fast.summary
    # counted at the choice, so a choice cut off by the horizon counts too
    assert s["preemptions"] == sum(r.memory.preemptions for r in ref.requests)
    assert s["ignored"] == sum(r.memory.ignored for r in ref.requests)
    # counted when the iteration ends, as the reference's rows are
    if ref.kv_log and not options.get("warmup"):
        rows_preempting = sum(1 for row in ref.kv_log if row[2])
        assert s["iterations_with_preemption"] == rows_preempting / len(ref.kv_log)
        assert s["recomputed_tokens"] == sum(row[3] for row in ref.kv_log)
    # a run without logs books its memory figures in closed form: the same figures
    bare = q.simulate(q.from_list(rows), policy, kv=kv, **options).summary
    keys = ("batches", "preemptions", "iterations_with_preemption", "recomputed_tokens",
            "kv_mean", "kv_max", "kv_utilization", "memory_area_mean", "completed")
    assert {k: bare[k] for k in keys} == {k: s[k] for k in keys}
    return ref


def random_rows(rng, n, rate):
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rate)
        rows.append((round(t, 3), rng.choice([0, rng.randint(1, 30), rng.randint(30, 200)]),
                     rng.randint(1, 60)))
    return rows


def case(seed):
    """The random configuration number ``seed``: rows, policy, cache, options."""
    rng = random.Random(1000 + seed)
    name = NAMES[seed % 4]
    chunked = rng.random() < 0.75
    block = rng.choice([1, 16])
    # every policy meets lazy and prompt; peak (which never preempts) one case in five
    admission = "peak" if seed % 5 == 4 else ["lazy", "prompt"][seed // 4 % 2]
    kv = q.KV(capacity_tokens=rng.choice([192, 256, 320, 480]), block_size=block,
              admission=admission,
              restart=rng.choice(["keep", "scratch"]),
              watermark=rng.choice([None, 0.0, 0.05]))
    bmax = rng.choice([16, 64, 128]) if chunked else 256
    latency = rng.choice([q.Staircase(0.002, 0.01, 64), q.Constant(0.02),
                          q.Roofline("A100-80GB", "codellama-34b")])
    options = dict(bmax=bmax, kmax=rng.choice([None, 4, 32]), latency=latency,
                   horizon=rng.choice([None, 12.0]))
    return random_rows(rng, 80, rng.choice([8.0, 20.0])), make_policy(name, chunked=chunked), \
        kv, options


@functools.lru_cache(maxsize=None)
def outcome(seed):
    """``(preemptions, stalled, ignored)`` of case ``seed`` once both engines agreed on it."""
    rows, policy, kv, options = case(seed)
    ref = compare(rows, policy, kv, **options)
    if ref is None:
        return 0, True, 0
    return (sum(r.memory.preemptions for r in ref.requests), False,
            sum(r.memory.ignored for r in ref.requests))


@pytest.mark.parametrize("seed", range(CASES))
def test_random_configurations_match_the_reference(seed):
    outcome(seed)


def test_the_random_cases_really_preempt():
    results = [outcome(seed) for seed in range(CASES)]
    preempting = [seed for seed, (count, _, _) in enumerate(results) if count]
    assert len(preempting) >= CASES // 2, results
    assert sum(stalled for _, stalled, _ in results) <= 2, results
    assert sum(1 for _, _, ignored in results if ignored) >= 2, results  # never-fit arrivals
    for seed in range(CASES):  # SPEC 7.2: peak admission never needs to preempt
        if case(seed)[2].admission == "peak":
            assert results[seed][0] == 0
    for name in NAMES:  # every policy meets preemption
        assert any(seed % 4 == NAMES.index(name) for seed in preempting), (name, results)


def test_a_victim_is_the_latest_start_and_returns_at_the_front():
    # sarathi, lazy, 7 tokens of cache, bmax 3, 1 s iterations.  A = 3 + 3 at 0,
    # B = 1 + 3 at 0.5 (starts at 1 s, after A), C = 2 + 1 at 2.5 s.  At 3 s A and
    # B hold 5 + 2 = 7 tokens: A's decode needs a block, so B, the latest start,
    # is preempted (not A, the item being allocated) and no new start is tried.
    # Under keep B returns with 1 + 1 = 2 prompt tokens, ahead of C, which was
    # admitted before B's preemption; both are recomputed positions.
    rows = [(0.0, 3, 3), (0.5, 1, 3), (2.5, 2, 1)]
    ref = compare(rows, make_policy("sarathi"), q.KV(capacity_tokens=7), bmax=3, kmax=None,
                  latency=q.Constant(1.0))
    assert [(b.decode, b.prefill) for b in ref.batches] == [
        ((), ((0, 3),)), ((0,), ((1, 1),)), ((0, 1), ()), ((0,), ()),
        ((), ((1, 2), (2, 1))), ((1,), ((2, 1),)), ((1, 2), ())]
    assert [k.preemptions for k in ref.kv_log] == [0, 0, 0, 1, 0, 0, 0]
    assert [k.kv_tokens for k in ref.kv_log] == [3, 5, 7, 6, 3, 5, 7]
    assert [(r.memory.preemptions, r.memory.recomputed) for r in ref.requests] == [
        (0, 0), (1, 2), (0, 0)]
    s = 10**9
    assert [(r.first_token, r.finished) for r in ref.requests] == [
        (2 * s, 4 * s), (3 * s, 7 * s), (7 * s, 7 * s)]


# Issue 30's three cases where both steppers had agreed on a misreading of SPEC 7
# (c = 1, a = 0, b0 = 1: one second an iteration; no kmax; blocks of one token).
STEP = q.Staircase(1.0, 0.0, 1)


def test_vllm_lazy_chunked_decodes_the_others_before_proposing_again():
    # SPEC 7.3 step 5 before step 1: B's second chunk preempts B itself, the gated
    # batch is empty and A is still started: vllm decodes A, then tries B again.
    ref = compare([(1.0, 4, 3), (2.0, 2, 6)], make_policy("vllm"), q.KV(capacity_tokens=8),
                  bmax=2, kmax=None, latency=STEP)
    assert ref is not None and len(ref.batches) == 14  # it stopped with "livelock" at 66 s


def test_wait_starts_its_group_first_come_first_served():
    # WAIT(2), 11 tokens.  At 5 s, A done, B (preempted: 3 + 2 to recompute), C (5 + 1)
    # and D (0 + 1) are unstarted and the arrivals are over: B and C start (10 of 11
    # blocks).  At 6 s B's decode preempts C; D, behind C in the line, may not start
    # before it: C restarts with D at 8 s, and D finishes at 9 s (it jumped ahead of C
    # at 1 s, and finished at 2 s, when the gate walked decodes before prompts).
    rows = [(0.0, 3, 4), (0.0, 3, 4), (0.5, 5, 1), (0.5, 0, 1)]
    ref = compare(rows, Wait(n=2), q.KV(capacity_tokens=11), bmax=None, kmax=None,
                  latency=STEP)
    assert [r.finished for r in ref.requests] == [5e9, 8e9, 10e9, 9e9]
    assert [(b.decode, b.prefill) for b in ref.batches][1] == ((0, 1), ())  # not D


def test_orca_whole_prompts_start_a_decoder_behind_a_prompt_over_the_budget():
    # orca, whole prompts, bmax 10, ample memory: A's 5-token prompt fits, C's 8 does
    # not; B (no prompt) still starts with its decode, as without a cache: 3 iterations.
    rows = [(1.0, 5, 2), (1.0, 0, 3), (1.0, 8, 1)]
    options = dict(bmax=10, kmax=None, latency=STEP)
    policy = make_policy("orca", chunked=False)
    ref = compare(rows, policy, q.KV(capacity_tokens=1000), **options)
    plain = q.simulate(q.from_list(rows), policy, batches=True, **options)
    assert ref is not None and ref.batches == plain.batch_log and len(ref.batches) == 3


WAIT_CASES = 10


@functools.lru_cache(maxsize=None)
def wait_outcome(seed):
    """``(preemptions, idle gaps)`` of random WAIT case ``seed`` once both engines
    agreed on it: one quota or two classes (gate all or any), strict or decode
    idling, small caches (so its quotas overflow and it preempts), prompts of
    zero tokens among the others, a fixed count or a horizon."""
    rng = random.Random(3000 + seed)
    rows = random_rows(rng, 60, rng.choice([5.0, 20.0]))
    idle = rng.choice(["strict", "decode"])
    if seed % 2:
        rows = [(t, p, d, rng.choice("ab")) for t, p, d in rows]
        policy = Wait(n={"a": rng.randint(1, 3), "b": rng.randint(1, 3)},
                      classify=lambda r: r.klass, gate=rng.choice(["all", "any"]), idle=idle)
    else:
        policy = Wait(n=rng.randint(1, 4), idle=idle)
    kv = q.KV(capacity_tokens=rng.choice([256, 400, 800]), block_size=rng.choice([1, 16]),
              restart=rng.choice(["keep", "scratch"]))
    ref = compare(rows, policy, kv, bmax=None, kmax=rng.choice([None, 3, 8]),
                  latency=rng.choice([q.Constant(0.05), q.Staircase(0.002, 0.01, 64)]),
                  horizon=rng.choice([None, 8.0]))
    assert ref is not None
    gaps = sum(1 for a, b in zip(ref.batches, ref.batches[1:]) if b.start > a.start + a.duration)
    return sum(r.memory.preemptions for r in ref.requests), gaps


@pytest.mark.parametrize("seed", range(WAIT_CASES))
def test_random_wait_configurations_match_the_reference(seed):
    wait_outcome(seed)


def test_the_wait_cases_really_preempt_and_idle():
    results = [wait_outcome(seed) for seed in range(WAIT_CASES)]
    assert sum(1 for count, _ in results if count) >= 3, results
    assert sum(1 for _, gaps in results if gaps) >= 3, results  # strict WAIT idles


def test_run_reference_takes_a_kv_cache():
    rows = [(0.0, 20, 5), (0.1, 30, 8)]
    kv = q.KV(capacity_tokens=64, block_size=16, admission="prompt")
    batches, requests = run_reference(q.from_list(rows), make_policy("vllm"), bmax=32,
                                      kmax=None, kv=kv)
    assert batches == run_reference_kv(q.from_list(rows), make_policy("vllm"), kv, bmax=32,
                                       kmax=None).batches
    assert all(r.finished is not None for r in requests)


SWAP_CASES = 8


@functools.lru_cache(maxsize=None)
def swap_outcome(seed):
    """``(swaps, recomputed victims)`` of random swap case ``seed`` (a pool of 64
    or 256 tokens: some victims swap, others fall back to recompute) once both
    engines agreed on it."""
    rng = random.Random(2000 + seed)
    name = NAMES[seed % 4]
    kv = q.KV(capacity_tokens=rng.choice([192, 256]), block_size=rng.choice([1, 16]),
              admission="prompt" if name == "vllm" else rng.choice(["lazy", "prompt"]),
              preemption="swap", swap_tokens=rng.choice([64, 256]),
              restart=rng.choice(["keep", "scratch"]),
              swap_seconds_per_token=rng.choice([0.0, 1e-4]))
    latency = rng.choice([q.Staircase(0.002, 0.01, 64),
                          q.Roofline("A100-80GB", "codellama-34b")])
    ref = compare(random_rows(rng, 80, 12.0), make_policy(name), kv, bmax=64,
                  kmax=rng.choice([None, 32]), latency=latency, horizon=rng.choice([None, 12.0]))
    assert ref is not None
    swaps = sum(r.memory.swaps for r in ref.requests)
    return swaps, sum(r.memory.preemptions for r in ref.requests) - swaps


@pytest.mark.parametrize("seed", range(SWAP_CASES))
def test_random_swap_configurations_match_the_reference(seed):
    swap_outcome(seed)


def test_the_swap_cases_really_swap():
    results = [swap_outcome(seed) for seed in range(SWAP_CASES)]
    assert sum(1 for swaps, _ in results if swaps) >= SWAP_CASES // 2, results
    assert any(fallbacks for _, fallbacks in results), results  # a full pool recomputes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(1, 25)),
                     min_size=1, max_size=12),
       name=st.sampled_from(NAMES), block=st.sampled_from([1, 4, 16]),
       capacity=st.integers(48, 160), admission=st.sampled_from(["lazy", "prompt", "peak"]),
       restart=st.sampled_from(["keep", "scratch"]), bmax=st.sampled_from([8, 32, 64]),
       kmax=st.sampled_from([None, 2, 5]), watermark=st.sampled_from([None, 0.0, 0.1]),
       chunked=st.booleans(), swap=st.booleans())
def test_property_small_caches_match_the_reference(rows, name, block, capacity, admission,
                                                   restart, bmax, kmax, watermark, chunked,
                                                   swap):
    arrivals = sorted((t / 10, vp, vd) for t, vp, vd in rows)
    kv = q.KV(capacity_tokens=max(capacity, block), block_size=block, admission=admission,
              restart=restart, watermark=watermark,  # peak never overflows: no preemption
              preemption="none" if admission == "peak" else "swap" if swap else "recompute",
              swap_tokens=32 if swap and admission != "peak" else None)
    compare(arrivals, make_policy(name, chunked=chunked), kv, bmax=max(bmax, 40) if not chunked
            else bmax, kmax=kmax, latency=q.Constant(0.05))


def test_a_preempted_request_without_prompt_keeps_its_prefill_end():
    # sarathi, lazy, 6 tokens, 1 s iterations.  A = 3 + 3 at 0, B = 0 + 3 at 0.5 s:
    # B's prefill ends on admission (0.5 s), it decodes at [1, 2) beside A (5 of 6
    # tokens), and at 2 s its next decode finds no block: B (the latest start) is
    # preempted and, under keep, recomputes 0 + 1 tokens at [4, 5).  Its first
    # incarnation's prefill end (0.5 s) and first token (2 s) stay.
    rows = [(0.0, 3, 3), (0.5, 0, 3)]
    kv = q.KV(capacity_tokens=6)
    options = dict(bmax=8, kmax=None, latency=q.Constant(1.0))
    ref = run_reference_kv(q.from_list(rows), make_policy("sarathi"), kv, **options)
    s = 10**9
    assert [(r.prefill_done, r.first_token) for r in ref.requests] == [(s, 2 * s),
                                                                       (s // 2, 2 * s)]
    fast = q.simulate(q.from_list(rows), "sarathi", kv=kv, requests=True, **options)
    b = next(r for r in fast.request_log if r.rid == 1)
    assert (b.memory.preemptions, b.prefill_done, b.first_token) == (1, s // 2, 2 * s)


def test_recomputed_tokens_of_a_request_count_only_processed_iterations():
    # The front-of-the-line case above with C left out: B is preempted at 3 s and
    # recomputes its 2 prompt tokens at [4, 5); a horizon at 4.5 s cuts that off.
    rows = [(0.0, 3, 3), (0.5, 1, 3)]
    kv = q.KV(capacity_tokens=7)
    options = dict(bmax=8, kmax=None, latency=q.Constant(1.0), horizon=4.5)
    ref = run_reference_kv(q.from_list(rows), make_policy("sarathi"), kv, **options)
    assert [(r.memory.preemptions, r.memory.recomputed) for r in ref.requests] == [
        (0, 0), (1, 0)]
    fast = q.simulate(q.from_list(rows), "sarathi", kv=kv, requests=True, **options)
    assert fast.summary["recomputed_tokens"] == 0
    assert sum(r.memory.recomputed for r in fast.request_log) == 0


@pytest.mark.parametrize("horizon", [5.0, 4.5, 5.5])
def test_a_run_the_horizon_ends_or_cuts_books_as_with_logs(horizon):
    # iterations of 1 s from 0: the last run ends at the horizon (5.0: SimPy never
    # processes its end), is cut by it (4.5) or ends before it (5.5); a run without
    # logs must still count the KV its last iteration took up to the horizon
    rows = [(0.0, 3, 10), (0.2, 2, 10)]
    kv = q.KV(capacity_tokens=64, block_size=4)
    options = dict(bmax=8, kmax=None, latency=q.Constant(1.0), horizon=horizon)
    ref = compare(rows, make_policy("sarathi"), kv, **options)
    held = [3, 6, 8, 10, 12, 14]  # KV after each allocation: A's prompt, B's with a decode, ...
    ends = [min(j + 1, horizon) - j for j in range(len(held)) if j < horizon]
    mean = sum(h * span for h, span in zip(held, ends)) / horizon
    assert q.simulate(q.from_list(rows), "sarathi", kv=kv, **options).summary["kv_mean"] == \
        pytest.approx(mean)
    assert ref is not None


def shortest_prompt_first(view, budget):
    """A user policy: every decoder (the view's own list), then prompts
    shortest first: it lists preempted prompts out of their key order."""
    left = budget - len(view.decoding)
    chunks = []
    for r in sorted(view.prefilling, key=lambda r: (r.prefill_left, r.rid)):
        if left <= 0:
            break
        chunks.append((r, min(r.prefill_left, left)))
        left -= chunks[-1][1]
    return Plan(view.decoding, chunks)


@pytest.mark.parametrize("policy", ["classes", "shortest-first"])
@pytest.mark.parametrize("seed", range(6))
def test_policies_that_reorder_the_wait_line_match_the_reference(seed, policy):
    """Pass 2 walks the preempted residents by their order keys, however the
    policy lists them (``ClassPriority`` groups by class first; a user
    policy may sort prompts by size), then the rest in proposal order: the
    engine, its shortcut for a proposal that serves every decoder, and the
    reference agree batch for batch."""
    rng = random.Random(seed)
    rows = [(t, p, d, rng.choice("ab")) for t, p, d in random_rows(rng, 60, 20.0)]
    kv = q.KV(capacity_tokens=rng.choice([192, 256, 320]))
    chosen = (ClassPriority(Sarathi(), ["a", "b"]) if policy == "classes"
              else FunctionPolicy(shortest_prompt_first))
    ref = compare(rows, chosen, kv, bmax=64, kmax=None, latency=q.Constant(0.02))
    assert ref is not None and sum(r.memory.preemptions for r in ref.requests) > 0
