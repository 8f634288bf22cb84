"""Small engine runs with a KV cache, every figure worked out by hand from
SPEC 7.1-7.3 and 7.7 (iterations last 1 s, so times are iteration numbers)."""

import warnings

import pytest

import llmqueue as q
from llmqueue.engine import KVOverflow, Stalled

ONE = q.Constant(1.0)


def run(rows, policy="sarathi", **kw):
    kw.setdefault("bmax", None)
    kw.setdefault("kmax", None)
    return q.simulate(q.from_list(rows), policy, latency=ONE, batches=True, requests=True,
                      timeseries=True, check_invariants=True, **kw)


def labels(result):
    """Batches as ``A B+Ap4``: decodes, then prefill chunks, requests named A, B, ..."""
    out = []
    for b in result.batch_log:
        d = " ".join("ABCDE"[i] for i in b.decode)
        p = " ".join(f"{'ABCDE'[i]}p{n}" for i, n in b.prefill)
        out.append(d + ("+" if d and p else "") + p)
    return out


def seconds(ticks):
    return None if ticks is None else ticks / 1e9


# Two requests of 4 + 4 tokens (peak 8 each) in a cache of 10 tokens: both start,
# both prefill (8 in use), both decode once (10), then A's next decode needs a
# token with none free, so B, the latest start, is preempted (its 5 tokens come
# free) and A decodes alone until it finishes at t=5; B then restarts.
TWO = [(0.0, 4, 4), (0.0, 4, 4)]


def test_two_requests_that_cannot_both_fit_keep():
    r = run(TWO, kv=q.KV(capacity_tokens=10))
    # keep: B had decoded 1 token, so it restarts with a prompt of 4 + 1 = 5 and 3
    # decodes left; it waits while A runs (3 free < 5), starts when A leaves at t=5
    assert labels(r) == ["Ap4 Bp4", "A B", "A", "A", "A", "Bp5", "B", "B", "B"]
    a, b = sorted(r.request_log, key=lambda x: x.rid)
    assert seconds(a.finished) == 5 and seconds(b.finished) == 9
    assert seconds(b.first_token) == 2  # its first token, before the preemption
    assert seconds(b.prefill_done) == 1  # its first prefill end is kept
    assert [tuple(k) for k in r.kv_log] == [
        (8, 8, 0, 0, 2), (10, 10, 0, 0, 0), (6, 6, 1, 0, 0), (7, 7, 0, 0, 0),
        (8, 8, 0, 0, 0), (5, 5, 0, 5, 1), (6, 6, 0, 0, 0), (7, 7, 0, 0, 0), (8, 8, 0, 0, 0)]
    mem = {m.id: m for m in r.request_memory()}
    assert (mem[0].preemptions, mem[0].recomputed_tokens, mem[0].memory_area) == (0, 0, 30)
    # B holds 4, 5, then nothing for three iterations, then 5, 6, 7, 8
    assert (mem[1].preemptions, mem[1].recomputed_tokens, mem[1].memory_area) == (1, 5, 35)
    assert q.kv_area(4, 4) == 30  # A, never preempted, holds exactly g
    s = r.summary
    assert (s["batches"], s["preemptions"], s["recomputed_tokens"], s["ignored"]) == (9, 1, 5, 0)
    assert s["preemptions_per_iteration"] == s["iterations_with_preemption"] == 1 / 9
    assert s["recompute_fraction"] == 5 / 21  # 8 + 2 + 1 + 1 + 1 + 5 + 1 + 1 + 1 tokens
    assert s["kv_mean"] == pytest.approx(65 / 9) and s["kv_max"] == 10
    assert s["kv_utilization"] == pytest.approx(65 / 90)
    assert s["memory_area_mean"] == 32.5
    assert s["throughput_requests_per_s"] == 2 / 9
    # the backlog rises by B's 5 dropped tokens at t=2 (SPEC 7.7)
    assert s["backlog_final"] == 0
    assert (2e9, 2, 16 - 10 + 5) in r.series  # 16 tokens in, 10 processed, 5 to redo
    assert r.kv_series == [(0, 8, 8), (1e9, 10, 10), (2e9, 6, 6), (3e9, 7, 7), (4e9, 8, 8),
                           (5e9, 5, 5), (6e9, 6, 6), (7e9, 7, 7), (8e9, 8, 8), (9e9, 0, 0)]


def test_two_requests_that_cannot_both_fit_scratch():
    r = run(TWO, kv=q.KV(capacity_tokens=10, restart="scratch"))
    # scratch: B restarts with its 4-token prompt and all 4 decodes; its first
    # re-decode (position 5) is a recompute too: 4 + 1 = 5 recomputed tokens
    assert labels(r) == ["Ap4 Bp4", "A B", "A", "A", "A", "Bp4", "B", "B", "B", "B"]
    b = max(r.request_log, key=lambda x: x.rid)
    assert seconds(b.finished) == 10 and seconds(b.first_token) == 2
    assert [k.recomputed_tokens for k in r.kv_log] == [0, 0, 0, 0, 0, 4, 1, 0, 0, 0]
    mem = r.request_memory()[1]
    # B holds 4, 5, then 4, 5, 6, 7, 8 after its restart
    assert (mem.preemptions, mem.recomputed_tokens, mem.memory_area) == (1, 5, 39)
    assert r.summary["recompute_fraction"] == 5 / 21  # 8 + 2 + 1 + 1 + 1 + 4 + 4 tokens


def test_block_size_two():
    # blocks of 2: 10 tokens = 5 blocks.  t0: A and B take 2 blocks each (4 tokens).
    # t1: each decode goes 4 -> 5 tokens, a third block each, with 1 free: A takes
    # it, B (the latest start) is its own victim, so A decodes alone and B's 2
    # blocks come back.  t2: A's 6th token fits its third block (needs 0), and B
    # (keep: it never decoded, its prompt is still 4) starts again in the 2 free.
    r = run(TWO, kv=q.KV(capacity_tokens=10, block_size=2))
    assert labels(r)[:3] == ["Ap4 Bp4", "A", "A+Bp4"]
    assert [tuple(k) for k in r.kv_log[:3]] == [(8, 4, 0, 0, 2), (5, 3, 1, 0, 0),
                                                 (10, 5, 0, 4, 1)]


def test_peak_admission_never_preempts_even_with_preemption_none():
    r = run(TWO, kv=q.KV(capacity_tokens=10, admission="peak", preemption="none"))
    # A reserves 8 of 10; B needs 8: it waits for A (head of line), then runs alone
    assert labels(r) == ["Ap4", "A", "A", "A", "A", "Bp4", "B", "B", "B", "B"]
    assert r.summary["preemptions"] == 0
    assert [k.kv_blocks for k in r.kv_log] == [8] * 10
    assert [k.kv_tokens for k in r.kv_log] == [4, 5, 6, 7, 8] * 2


def test_preemption_none_raises_on_overflow():
    with pytest.raises(KVOverflow):
        run(TWO, kv=q.KV(capacity_tokens=10, preemption="none"))


def test_vllm_falls_back_to_decodes_when_no_prompt_can_start():
    # vllm + prompt (watermark 0): A (4 + 4) starts at t0; B (7 + 2) arrives at
    # t0.5.  From t1 vllm proposes B's prompt alone, which needs 7 blocks with 5
    # or fewer free: the batch is empty, so the decodes of the started residents
    # run instead (SPEC 7.3 step 5), until A leaves at t5 and B fits.
    rows = [(0.0, 4, 4), (0.5, 7, 2)]
    r = run(rows, "vllm", kv=q.KV(capacity_tokens=10, admission="prompt", watermark=0))
    assert labels(r) == ["Ap4", "A", "A", "A", "A", "Bp7", "B", "B"]
    assert r.summary["preemptions"] == 0
    # without memory vllm would have run B's prompt at t1
    plain = run(rows, "vllm")
    assert labels(plain)[:2] == ["Ap4", "Bp7"]


def test_prompt_admission_reserves_the_prompt_of_a_chunked_start():
    # chunks of 2 (bmax 2): A's 4-token prompt reserves 4 blocks at its start
    r = run([(0.0, 4, 2)], bmax=2, kv=q.KV(capacity_tokens=10, admission="prompt",
                                           watermark=0))
    assert labels(r) == ["Ap2", "Ap2", "A", "A"]
    assert [(k.kv_tokens, k.kv_blocks) for k in r.kv_log] == [(2, 4), (4, 4), (5, 5), (6, 6)]


def test_a_never_fit_request_is_ignored_with_a_warning_and_the_run_completes():
    rows = [(0.0, 8, 5), (0.0, 2, 2), (1.0, 20, 20)]
    with pytest.warns(UserWarning, match="can never fit the KV cache"):
        r = run(rows, kv=q.KV(capacity_tokens=10))
    s = r.summary
    assert (s["arrivals"], s["completed"], s["ignored"]) == (3, 1, 2)
    assert s["arrivals"] == s["completed"] + s["residents_final"] + s["waiting_final"] + \
        s["ignored"]
    assert s["pending_max"] == 1 and s["backlog_final"] == 0
    assert [m.ignored for m in r.request_memory()] == [True, False, True]
    assert labels(r) == ["Bp2", "B", "B"]


def test_the_watermark_counts_against_never_fit():
    # prompt mode keeps floor(0.01 * 200) = 2 blocks free: 199 tokens never fit
    kv = q.KV(capacity_tokens=200, admission="prompt")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run([(0.0, 100, 98)], kv=kv)
    with pytest.warns(UserWarning):
        r = run([(0.0, 100, 99)], kv=kv)
    assert r.summary["ignored"] == 1


def test_a_recomputed_prompt_larger_than_bmax_with_whole_prompts_stops_clearly():
    # whole prompts, bmax 5: B is preempted after 1 decode; keep makes its new
    # prompt 4 + 1 = 5 (fits); after 2 decodes it would be 6 > bmax: never runs
    rows = [(0.0, 4, 4), (0.0, 4, 4)]
    r = run(rows, bmax=5, chunked=False, kv=q.KV(capacity_tokens=10))
    assert r.summary["completed"] == 2
    with pytest.raises(Stalled, match="bmax"):
        run([(0.0, 1, 9), (0.0, 1, 9)], bmax=2, chunked=False, kv=q.KV(capacity_tokens=12))


def test_kmax_slots_and_memory_together():
    # kmax 1: B waits for A's slot; memory is large: no preemption
    r = run(TWO, kmax=1, kv=q.KV(capacity_tokens=100))
    assert labels(r) == ["Ap4", "A", "A", "A", "A", "Bp4", "B", "B", "B", "B"]
    assert r.summary["preemptions"] == 0


def test_vllm_lazy_decodes_the_others_when_a_chunk_preempts_itself():
    # lazy admission checks only a new start's first chunk.  At t12 A holds 13 of
    # 30 tokens; B's first 10-token chunk fits (7 left), its second needs 10, so B,
    # the latest start, is its own victim.  SPEC 7.3 step 5 comes before step 1's
    # re-proposal: with the gated batch empty and A still started, vllm gets its
    # other phase, A's decode, and only then proposes B's prompt again.  So each
    # of B's tries buys A a token: 8 tries (80 recomputed tokens) take A from 11
    # decodes to 19, when B's first chunk no longer fits (9 free); A's 20th decode
    # ends it, and B runs alone.
    rows = [(0.0, 2, 20), (12.0, 20, 1)]
    r = run(rows, "vllm", bmax=10, kv=q.KV(capacity_tokens=30))
    assert labels(r) == ["Ap2"] + ["A"] * 11 + ["Bp10", "A"] * 8 + ["A", "Bp10", "Bp10", "B"]
    assert (r.summary["preemptions"], r.summary["recomputed_tokens"]) == (8, 80)
    # prompt admission reserves B's whole prompt: it waits, A decodes, all finish
    r = run(rows, "vllm", bmax=10, kv=q.KV(capacity_tokens=30, admission="prompt"))
    assert r.summary["completed"] == 2
    assert r.summary["preemptions"] == 0


def test_vllm_lazy_chunked_smallest_case_finishes_in_14_iterations():
    # issue 30 A1 (c = 1, a = 0, b0 = 1: one second an iteration): the trace 1.0,4,3
    # and 2.0,2,6, vllm, bmax 2, kv 8, chunked.  It stopped with "livelock" at 66 s.
    rows = [(1.0, 4, 3), (2.0, 2, 6)]
    r = q.simulate(q.from_list(rows), "vllm", bmax=2, kmax=None, kv=q.KV(capacity_tokens=8),
                   latency=q.Staircase(1.0, 0.0, 1), batches=True, requests=True)
    assert r.summary["batches"] == 14 and r.summary["completed"] == 2


def test_kv_none_keeps_summaries_without_memory_figures():
    r = q.simulate(q.from_list(TWO), "sarathi", latency=ONE)
    assert "preemptions" not in r.summary and "kv" not in r.params


def test_orca_charges_running_work_first_under_memory():
    # bmax 4; A decodes from t1; B's 10-token prompt arrives at t1.  Without memory
    # orca fills the budget with B's prompt first (no decode); with a KV cache the
    # gate charges A's started decode first and B's new start gets the other 3.
    rows = [(0.0, 1, 5), (1.0, 10, 1)]
    assert labels(run(rows, "orca", bmax=4))[:2] == ["Ap1", "Bp4"]
    assert labels(run(rows, "orca", bmax=4, kv=q.KV(capacity_tokens=100)))[:2] == \
        ["Ap1", "A+Bp3"]


def test_a_policy_may_idle_on_purpose_until_an_arrival():
    # a policy that waits for two residents (SPEC 7.5's explicit Idle): the
    # first request arrives at t0, the GPU idles until the second at t3
    from llmqueue.policies import IDLE, Sarathi

    sarathi = Sarathi()

    def pairs(view, budget):
        if len(view.decoding) + len(view.prefilling) < 2:
            return IDLE
        return sarathi.plan(view, budget)

    r = run([(0.0, 2, 2), (3.0, 2, 2)], pairs, kv=q.KV(capacity_tokens=100))
    assert [seconds(b.start) for b in r.batch_log][:1] == [3.0]
    assert labels(r)[0] == "Ap2 Bp2"
