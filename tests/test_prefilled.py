"""Requests that arrive prefilled (``Engine.call(..., prefilled=True)``): the
prompt was processed elsewhere and its KV comes along (disaggregated
serving).  They prefill nothing, hold their prompt's KV from their start, read
it as context, and bring only their decode tokens as work."""

import math
from collections import Counter

import pytest

import llmqueue as q
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import disaggregated as dis
from llmqueue.network.classes import by_class
from llmqueue.network.network import Network
from llmqueue.network.workflows import start_jobs
from llmqueue.policies.view import FRESH, IDLE, Request, SimpleView


@pytest.fixture(autouse=True)
def checked(monkeypatch):
    """Every KV run here checks SPEC 7.3's invariants on every iteration."""
    monkeypatch.setenv("LLMQUEUE_CHECK_INVARIANTS", "1")


def run_calls(calls, *, kv=None, latency=None, policy="sarathi", bmax=128):
    """One engine ``a`` of a network; ``calls`` are ``(vp, vd, prefilled)``
    made at time 0, in order.  Returns its Result with every log, and its
    KV rows (one a batch, with a cache)."""
    net = Network(batches=True)
    engine = net.add_engine("a", policy, bmax=bmax, kmax=None,
                            latency=latency or q.Constant(1.0), kv=kv)
    for vp, vd, prefilled in calls:
        engine.call(vp, vd, prefilled=prefilled)
    net.run()
    return net.combine(["a"]), engine.recorder.memory.log if kv is not None else None


@pytest.mark.parametrize("admission, first_blocks", [("lazy", 7), ("prompt", 7), ("peak", 7)])
def test_a_prefilled_request_holds_its_prompt_from_its_first_iteration(admission,
                                                                         first_blocks):
    """vp=100 arrives prefilled, vd=10: ten decode-only iterations; its KV is
    100 + i after the i-th allocation, in ceil(., 16) blocks (peak reserves
    ceil(110 / 16) = 7 at once), and its memory area is sum(100 + i) = 1055."""
    kv = q.KV(capacity_tokens=160, block_size=16, admission=admission)
    result, kv_log = run_calls([(100, 10, True)], kv=kv)
    assert [(b.decode_tokens, b.prefill_tokens) for b in result.batch_log] == [(1, 0)] * 10
    assert [row.kv_tokens for row in kv_log] == [100 + i for i in range(1, 11)]
    blocks = [row.kv_blocks for row in kv_log]
    assert blocks[0] == first_blocks
    if admission == "lazy":
        assert blocks == [math.ceil((100 + i) / 16) for i in range(1, 11)]
    assert result.request_memory()[0].memory_area == sum(100 + i for i in range(1, 11))
    assert result.summary["completed"] == 1


def test_one_that_must_wait_for_memory_holds_nothing_until_it_starts():
    """Two prefilled (100, 10) and room for one (8 blocks of 16): the second
    starts when the first has finished, and its memory area counts only its
    own ten iterations (an unstarted request holds no KV)."""
    kv = q.KV(capacity_tokens=128, block_size=16)
    result, kv_log = run_calls([(100, 10, True), (100, 10, True)], kv=kv)
    assert [row.kv_tokens for row in kv_log] == [100 + i for i in range(1, 11)] * 2
    assert [m.memory_area for m in result.request_memory()] == [1055, 1055]
    assert result.summary["preemptions"] == 0


def test_its_work_is_its_decode_tokens_only():
    """A prefilled request adds vd, not vp + vd, to the backlog; it is prefilled
    on admission, and an unchunked policy takes a prompt beyond bmax because
    there is nothing to prefill."""
    net = Network()
    engine = net.add_engine("a", "vllm", bmax=128, chunked=False, latency=q.Constant(1.0))
    done = engine.call(1000, 5, prefilled=True)
    assert engine.backlog == 5
    net.run()
    r = done.value
    assert r.prefill_done == r.admitted == 0
    assert r.first_token == 10**9 and r.finished == 5 * 10**9


def test_the_same_iterations_as_a_request_without_prompt_under_the_staircase():
    """The staircase prices processed tokens only: a prefilled (300, 20) runs
    the iterations of a (0, 20), and reports its prompt."""
    prefilled, _ = run_calls([(300, 20, True), (50, 30, False)], latency=q.Staircase())
    bare, _ = run_calls([(0, 20, False), (50, 30, False)], latency=q.Staircase())
    assert prefilled.batch_log == bare.batch_log
    assert sorted(r.vp for r in prefilled.request_log) == [50, 300]


def test_a_roofline_reads_the_prefilled_prompt_as_context():
    """Its decode iterations cost what the decode iterations of the same request
    prefilled here cost (the same KV read each time), more than without it."""
    roofline = q.Roofline("H100", "llama-3-8b")
    arrived = run_calls([(4000, 6, True)], latency=roofline)[0].batch_log
    local = run_calls([(4000, 6, False)], latency=roofline)[0].batch_log
    bare = run_calls([(0, 6, False)], latency=roofline)[0].batch_log
    # the local request prefills in chunks of bmax, then decodes at KV 4000, 4001, ...
    local_decodes = [b.duration for b in local if b.prefill_tokens == 0]
    arrived_times = [b.duration for b in arrived]
    assert arrived_times == local_decodes
    assert all(a > z for a, z in zip(arrived_times, (b.duration for b in bare)))


def test_preempted_it_recomputes_its_prompt_here():
    """Two prefilled (15, 10) in 40 tokens of KV (blocks of 1): both start
    (16 + 16), then cannot both grow to 25; the later one is preempted, drops
    its KV and re-prefills it (recomputed tokens); both finish, and the
    iterations process exactly the decode tokens plus the recomputed ones."""
    kv = q.KV(capacity_tokens=40)
    result, kv_log = run_calls([(15, 10, True), (15, 10, True)], kv=kv)
    s = result.summary
    assert s["completed"] == 2 and s["preemptions"] >= 1
    assert s["recomputed_tokens"] > 0
    processed = sum(b.decode_tokens + b.prefill_tokens for b in result.batch_log)
    assert processed == 2 * 10 + s["recomputed_tokens"]
    assert max(row.kv_tokens for row in kv_log) <= 40


def test_disaggregated_decode_hops_hold_the_transferred_kv():
    """On the decode pool (decode-only, every resident served every iteration,
    a roomy cache) each hop of vd decode tokens arrives with vp = prompt + 1
    tokens of KV: its memory area is exactly sum(vp + i for i in 1..vd)."""
    params = dis.EXPERIMENT.resolve({"kv": "400000", "kv_block": "16"})
    rows = dict(dis.run({**params, "load": 0.5}, RunOptions(horizon=60.0, seed=3)))
    decode = rows["disaggregated/decode"]
    records = {m.id: m for m in decode.request_memory()}
    hops = [r for r in decode.request_log if r.finished is not None]
    assert len(hops) > 50
    for r in hops:
        m = records[r.rid]
        assert m.preemptions == 0
        assert m.memory_area == r.vd * r.vp + r.vd * (r.vd + 1) // 2
    assert decode.summary["kv_mean"] > 100 * decode.summary["pending_mean"]


@pytest.mark.parametrize("policy", ["sarathi", "vllm", "orca", "fastertransformer"])
@pytest.mark.parametrize("kv", [
    q.KV(capacity_tokens=40, preemption="swap", swap_tokens=100),
    q.KV(capacity_tokens=40, restart="scratch"),
    q.KV(capacity_tokens=64, block_size=16, admission="prompt"),
    q.KV(capacity_tokens=48, block_size=8, admission="peak"),
], ids=["swap", "scratch", "prompt-16", "peak-8"])
def test_prefilled_and_local_requests_share_a_tight_cache(policy, kv):
    """Prefilled and ordinary requests under every preemption, restart and
    admission mode, with the invariants checked on every iteration: all
    finish, and the iterations process their work (decode tokens, and the
    prompts of the ordinary ones) plus exactly the recomputed tokens."""
    calls = [(15, 10, True), (15, 10, True), (5, 6, False), (0, 4, False), (12, 3, True)]
    result, _ = run_calls(calls, kv=kv, policy=policy, bmax=64)
    s = result.summary
    assert s["completed"] == len(calls)
    work = sum(vd + (0 if prefilled else vp) for vp, vd, prefilled in calls)
    processed = sum(b.decode_tokens + b.prefill_tokens for b in result.batch_log)
    assert processed == work + s["recomputed_tokens"]


def test_by_class_counts_the_tokens_served_here():
    """by_class's tokens per second are the tokens served by the finished
    requests: a prefilled one's decode tokens, not its prompt (served
    elsewhere: a disaggregated job's prompt is counted once, on the prefill
    engine)."""
    result, _ = run_calls([(300, 20, True), (50, 30, False)])
    row = by_class(result.request_log)[None]
    end = max(r.finished for r in result.request_log)
    assert row["tokens_per_s"] * end / 1e9 == pytest.approx(20 + 50 + 30)


def test_a_pools_batch_log_keeps_each_engines_kv_rows_beside_its_batches():
    """Two engines with caches, one serving a prefilled request: the combined
    batch log (merged by start time) carries every engine's KV row beside the
    batch it belongs to, so `--batches` of a network run has the KV columns."""
    net = Network(batches=True)
    a = net.add_engine("a", bmax=128, kmax=None, latency=q.Constant(1.0),
                       kv=q.KV(capacity_tokens=160, block_size=16))
    b = net.add_engine("b", bmax=128, kmax=None, latency=q.Constant(0.7),
                       kv=q.KV(capacity_tokens=1000))
    a.call(100, 10, prefilled=True)
    b.call(20, 5)
    net.run()
    both = net.combine(["a", "b"])
    own = [pair for e in (a, b) for pair in zip(e.recorder.batch_log, e.recorder.memory.log)]
    assert Counter(zip(both.batch_log, both.kv_log)) == Counter(own)
    assert [row.start for row in both.batch_log] == sorted(row.start for row, _ in own)
    assert {kv.kv_tokens for row, kv in zip(both.batch_log, both.kv_log)
            if row.decode == (0,) and row.duration == 10**9} == set(range(101, 111))


@pytest.mark.parametrize("vp, prefilled", [(300, True), (0, False)])
def test_a_preempted_request_is_never_overtaken_by_later_arrivals(vp, prefilled):
    """Requests of one size, FCFS under a cache that preempts: a preempted
    request waits at the head of the line (SPEC 7.3 step 4), so nobody who
    arrived after it starts before it and the requests finish in arrival
    order.  Later arrivals that bring nothing to prefill (prefilled, or no
    prompt) are unstarted decoders; they used to start ahead of it, and the
    preempted requests then never came back."""
    net = Network(seed=1)
    engine = net.add_engine("dec", "sarathi", bmax=512, kmax=None,
                            kv=q.KV(capacity_tokens=1000))

    def job(ctx):
        yield ctx.call("dec", vp, 200, prefilled=prefilled)

    start_jobs(net, job, rate=0.5, seed=1)
    net.run(horizon=300)
    memory = engine.recorder.memory
    done = sorted(r.id for r in net.combine(["dec"]).requests() if r.finished is not None)
    assert memory.preemptions > 10
    assert len(done) > 40 and done == list(range(len(done)))


def test_wait_starts_requests_that_arrive_prefilled():
    """WAIT's unstarted residents are those holding no KV: a prefilled request
    waiting for its start counts towards the quota (it used to count as
    started, so WAIT never became ready and idled for ever)."""
    started = Request("S", 10, 5, seq=0)
    started.prefill_left = 0
    started.decode_left = 3  # decoded 2: holds 12 tokens
    fresh = [Request(f"P{i}", 100, 10, seq=FRESH + i, prefilled=True) for i in range(2)]
    view = SimpleView([started, *fresh], [])
    plan = q.Wait(n=2).plan(view, 128)
    assert [r.rid for r in plan.decode] == ["S", "P0", "P1"] and plan.prefill == []
    assert q.Wait(n=3).plan(view, 128) is IDLE  # not ready: two of three


def test_wait_serves_a_decode_pool_of_prefilled_requests():
    """A WAIT engine fed prefilled requests (a disaggregated decode pool)
    runs them all: 12 calls of (1000, 100), quota 4, a cache for about 5.
    Once the network has nothing else to do the engine drains (SPEC 7.5):
    the last group (3 < 4) starts too, instead of idling for ever."""
    result, _ = run_calls([(1000, 100, True)] * 12, kv=q.KV(capacity_tokens=5600),
                          policy=q.Wait(n=4))
    s = result.summary
    assert s["completed"] == 12 and s["preemptions"] == 0
    assert sum(b.decode_tokens for b in result.batch_log) == 12 * 100
    assert sum(b.prefill_tokens for b in result.batch_log) == 0


def test_a_cache_that_never_binds_leaves_sarathi_batches_with_a_promptless_request_unchanged():
    """SPEC 7.4: ``sarathi`` + ``lazy`` keeps its token choices.  A request
    with no prompt (2) admitted with an older prompt (1) gets its decode
    first, as without a cache: new starts follow the proposal, decodes first
    (7.3 step 3).  Before, they followed admission order and 1's chunk took
    the budget: batch 2 was decode [0] + 3 prompt tokens, not [0, 2] + 2."""
    rows = [(0, 1, 5), (0.01, 10, 2), (0.01, 0, 3)]
    logs = []
    for kv in (None, q.KV(capacity_tokens=10**6)):
        r = q.simulate(q.from_list(rows), "sarathi", bmax=4, kmax=None, kv=kv, batches=True)
        logs.append([(b["decode"], b["prefill"]) for b in r.batches()])
    assert logs[0][1] == ([0, 2], {1: 2})
    assert logs[1] == logs[0]
