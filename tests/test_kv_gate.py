"""The KV gate of SPEC 7.3 on hand-made residents: every expectation below is
worked out by hand from the SPEC's rules (the comments show the arithmetic)."""

import itertools

import pytest

from llmqueue.engine.gate import KVOverflow, gate
from llmqueue.engine.kv import KV
from llmqueue.policies.view import FRESH, PREEMPTED, Plan, Request


def req(rid, vp, vd, prefill_left=None, decoded=0, start=None):
    """A resident with ``vp`` prompt and ``vd`` output tokens, ``prefill_left``
    prompt tokens still to do and ``decoded`` output tokens done; started (it
    holds KV) when ``start`` (its start number) is given."""
    r = Request(rid, vp, vd)
    r.prefill_left = vp if prefill_left is None else prefill_left
    r.decode_left = vd - decoded
    r.seq = start if start is not None else FRESH + next(_ADMISSIONS)
    return r


_ADMISSIONS = itertools.count()


def kv_of(r):
    return r.vp + r.vd - r.prefill_left - r.decode_left


def ids(plan):
    return [r.rid for r in plan.decode], [(r.rid, n) for r, n in plan.prefill]


def started_order(*residents):
    return sorted(residents, key=lambda r: r.seq)


LAZY = KV(capacity_tokens=1000)


def test_helpers_build_the_states_meant():
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=0)
    assert kv_of(a) == 12 and a.decode_left == 3
    assert kv_of(req("U", 50, 5)) == 0


def test_budget_is_charged_to_started_items_first_then_new_starts_get_the_rest():
    # A (kv 12) and B (kv 23) decode, C (unstarted) brings a 50-token prompt.
    # budget 30: A 1 + B 1 -> 28 left; C is cut to 28 (chunked), needs 28 blocks,
    # 98 - 28 = 70 >= 0 free afterwards: it starts.
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=0)
    b = req("B", 20, 5, prefill_left=0, decoded=3, start=1)
    c = req("C", 50, 5)
    g = gate(Plan([a, b], [(c, 50)]), LAZY, 100, 30, started_order(a, b))
    assert ids(g.plan) == (["A", "B"], [("C", 28)])
    assert g.starts == [c] and g.victims == []
    assert g.blocks == 30 and g.free == 70


def test_a_prefill_first_proposal_still_charges_running_work_first():
    # orca's order: S's chunk (started, 40 left) then U's prompt (new), then decodes.
    # Pass 1 walks S 40, A 1, B 1 -> 42 of 42; pass 2 has nothing left for U.
    # (Without memory orca at bmax=42 would run S 40 + U 2 and no decode.)
    s = req("S", 100, 5, prefill_left=40, start=0)
    a = req("A", 10, 5, prefill_left=0, decoded=1, start=1)
    b = req("B", 10, 5, prefill_left=0, decoded=1, start=2)
    u = req("U", 60, 5)
    g = gate(Plan([a, b], [(s, 40), (u, 60)]), LAZY, 500, 42, started_order(s, a, b),
             prefill_first=True)
    assert ids(g.plan) == (["A", "B"], [("S", 40)])
    assert g.starts == []


def test_the_victim_is_the_latest_start_not_yet_allocated():
    # A, B, C decode, started in that order (kv 10, 10, 5); 1 block free.
    # A needs 1: fits (free 0).  B needs 1: free 0 -> victim = latest start not
    # allocated = C (its 5 blocks come back, free 5); B fits (free 4).  C's item
    # is gone.  Pass 2 does not run: something was preempted.
    a = req("A", 5, 10, prefill_left=0, decoded=5, start=0)
    b = req("B", 5, 10, prefill_left=0, decoded=5, start=1)
    c = req("C", 5, 10, prefill_left=0, decoded=0, start=2)
    u = req("U", 1, 1)
    g = gate(Plan([a, b, c], [(u, 1)]), LAZY, 1, 100, started_order(a, b, c))
    assert ids(g.plan) == (["A", "B"], [])
    assert g.victims == [c] and g.starts == []
    assert g.blocks == 2 and g.free == 4


def test_several_victims_until_the_item_fits():
    # S (started first, kv 10) wants a 12-token chunk with nothing free: victims
    # from the latest start back: D (kv 3, free 3), C (kv 5, free 8 < 12), B (kv 6,
    # free 14 >= 12); S's chunk runs and 2 blocks stay free.
    s = req("S", 40, 1, prefill_left=30, start=0)
    b = req("B", 2, 10, prefill_left=0, decoded=4, start=1)
    c = req("C", 2, 10, prefill_left=0, decoded=3, start=2)
    d = req("D", 2, 10, prefill_left=0, decoded=1, start=3)
    g = gate(Plan([], [(s, 12)]), LAZY, 0, 100, started_order(s, b, c, d))
    assert [kv_of(r) for r in (s, b, c, d)] == [10, 6, 5, 3]
    assert g.victims == [d, c, b]
    assert ids(g.plan) == ([], [("S", 12)]) and g.free == 2


def test_when_the_item_itself_is_the_victim_it_is_dropped_and_pass_one_ends():
    # Proposal order B then A (B started after A); nothing free.  B needs 1: the
    # latest start not yet allocated is B itself: B is preempted, its item
    # dropped, and pass 1 ends, so A is not served in this batch either.
    a = req("A", 5, 10, prefill_left=0, decoded=5, start=0)
    b = req("B", 5, 10, prefill_left=0, decoded=5, start=1)
    g = gate(Plan([b, a], []), LAZY, 0, 100, started_order(a, b))
    assert g.victims == [b] and not g.plan
    assert g.free == 10  # B's 10 blocks came back


def test_new_starts_stop_at_the_first_that_does_not_fit():
    # free 40: U1 needs 50 (fails) -> U2 (needs 5) must not start (head of line).
    u1, u2 = req("U1", 50, 1), req("U2", 5, 1)
    g = gate(Plan([], [(u1, 50), (u2, 5)]), LAZY, 40, 1000, [])
    assert not g.plan and g.starts == []
    # with room for U1 both start, in proposal order
    g = gate(Plan([], [(u1, 50), (u2, 5)]), LAZY, 60, 1000, [])
    assert g.starts == [u1, u2] and g.free == 5


def test_new_starts_follow_the_wait_line_across_decodes_and_prompts():
    """A plan lists its decodes apart from its chunks; pass 2 starts the
    unstarted ones in the wait line's order all the same (SPEC 7.2, 7.3 step
    4): a preempted request waiting to recompute (P, key PREEMPTED) before
    later admissions without a prompt to prefill (D1, D2: an unstarted decoder
    holds nothing and needs a block for its first token)."""
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=0)   # kv 12, decodes: 1 block
    d1 = req("D1", 0, 5, prefill_left=0)                        # unstarted decoders,
    d2 = req("D2", 0, 5, prefill_left=0)                        # admitted after P ...
    p = req("P", 40, 5, prefill_left=40)
    p.seq = PREEMPTED                                            # ... which was preempted
    # free 42: A takes 1 -> 41; P's 40 -> 1; D1 takes the last block; D2 waits
    g = gate(Plan([a, d1, d2], [(p, 40)]), LAZY, 42, 128, started_order(a))
    assert ids(g.plan) == (["A", "D1"], [("P", 40)])
    assert g.starts == [p, d1]
    # free 40: A -> 39; P's 40 does not fit and stops the line: D1 and D2 wait behind it
    g = gate(Plan([a, d1, d2], [(p, 40)]), LAZY, 40, 128, started_order(a))
    assert ids(g.plan) == (["A"], [])
    assert g.starts == [] and g.free == 39
    # a prefill-first proposal gives the same line
    g = gate(Plan([a, d1, d2], [(p, 40)]), LAZY, 42, 128, started_order(a), prefill_first=True)
    assert g.starts == [p, d1]


def test_fresh_starts_keep_the_proposal_order_behind_the_preempted():
    """Without a victim among them, new starts follow the proposal (SPEC 7.3
    step 3), a decodes-first policy's decodes before its chunks: D (no prompt,
    admitted after U) starts before U, as ``sarathi`` serves it without a
    cache; a prefill-first proposal starts U first.  A victim P still heads
    both lines."""
    u = req("U", 10, 2, prefill_left=10)
    d = req("D", 0, 3, prefill_left=0)
    u.seq, d.seq = FRESH + 1, FRESH + 2  # U admitted before D
    g = gate(Plan([d], [(u, 10)]), LAZY, 100, 4, [])
    assert g.starts == [d, u] and ids(g.plan) == (["D"], [("U", 3)])
    g = gate(Plan([d], [(u, 10)]), LAZY, 100, 4, [], prefill_first=True)
    assert g.starts == [u] and ids(g.plan) == ([], [("U", 4)])
    p = req("P", 2, 5, prefill_left=2)
    p.seq = PREEMPTED
    g = gate(Plan([d], [(p, 2), (u, 10)]), LAZY, 100, 4, [])
    assert g.starts == [p, d, u] and ids(g.plan) == (["D"], [("P", 2), ("U", 1)])


@pytest.mark.parametrize("hint", [1, None])
def test_the_shortcut_for_a_full_decode_batch_starts_whom_pass_two_starts(hint):
    """With every decoder started and their blocks known (``decode_need``),
    the gate takes a shortcut; it must walk new starts as pass 2 does: the
    victim V (50 blocks, 39 free) first, which stops the line, so F, listed
    first, does not start either."""
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=0)  # its decode: 1 block
    f, v = req("F", 5, 1), req("V", 50, 1)
    v.seq = PREEMPTED
    g = gate(Plan([a], [(f, 5), (v, 50)]), LAZY, 40, 128, started_order(a), decode_need=hint)
    assert g.starts == [] and ids(g.plan) == (["A"], []) and g.free == 39
    g = gate(Plan([a], [(f, 5), (v, 50)]), LAZY, 60, 128, started_order(a), decode_need=hint)
    assert g.starts == [v, f] and ids(g.plan) == (["A"], [("F", 5), ("V", 50)])


def test_whole_prompts_are_never_cut_and_block_the_line():
    # chunked=false, 30 tokens of budget left: U1's 50-token prompt stops pass 2
    # even though U2's 5 tokens would fit.
    a = req("A", 1, 100, prefill_left=0, decoded=1, start=0)
    u1, u2 = req("U1", 50, 1), req("U2", 5, 1)
    g = gate(Plan([a], [(u1, 50), (u2, 5)]), LAZY, 500, 31, [a], chunked=False)
    assert ids(g.plan) == (["A"], [])


def test_prompt_mode_reserves_the_whole_prompt_and_keeps_the_watermark():
    kv = KV(capacity_tokens=1000, admission="prompt")  # watermark 0.01 -> 10 blocks
    assert kv.reserve == 10
    # S started a 100-token prompt (40 done): its next chunk is already reserved.
    s = req("S", 100, 5, prefill_left=60, start=0)
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=1)  # a decode needs 1
    u = req("U", 50, 5)  # a new start needs its whole prompt: 50 blocks
    # free 60: S 30 tokens need 0, A needs 1 -> 59; U: 59 - 50 = 9 < 10: no start
    g = gate(Plan([a], [(s, 30), (u, 50)]), kv, 60, 1000, started_order(s, a))
    assert ids(g.plan) == (["A"], [("S", 30)]) and g.blocks == 1 and g.starts == []
    # free 61: 60 - 50 = 10 >= 10: U starts with a 20-token chunk under budget 51
    g = gate(Plan([a], [(s, 30), (u, 50)]), kv, 61, 51, started_order(s, a))
    assert ids(g.plan) == (["A"], [("S", 30), ("U", 20)])
    assert g.blocks == 51 and g.free == 10


def test_peak_mode_never_preempts_and_starts_only_what_fits_whole():
    kv = KV(capacity_tokens=100, admission="peak")
    a = req("A", 10, 50, prefill_left=0, decoded=20, start=0)  # holds 60 blocks
    b = req("B", 10, 30, prefill_left=0, decoded=5, start=1)   # holds 40 blocks
    u = req("U", 5, 5)
    # nothing free, yet both decode (their peaks are reserved); U needs 10: waits
    g = gate(Plan([a, b], [(u, 5)]), kv, 0, 1000, started_order(a, b))
    assert ids(g.plan) == (["A", "B"], []) and g.victims == [] and g.blocks == 0


def test_blocks_are_counted_in_blocks():
    kv = KV(num_blocks=100, block_size=4)
    a = req("A", 4, 10, prefill_left=0, decoded=4, start=0)   # kv 8: 8 -> 9 needs a block
    b = req("B", 4, 10, prefill_left=0, decoded=5, start=1)   # kv 9: 9 -> 10 needs none
    s = req("S", 20, 1, prefill_left=14, start=2)              # kv 6: +5 -> 11, 2 -> 3 blocks
    u = req("U", 9, 1)                                         # first chunk 9: 3 blocks
    g = gate(Plan([a, b], [(s, 5), (u, 9)]), kv, 10, 1000, started_order(a, b, s))
    assert g.blocks == 1 + 0 + 1 + 3 and g.free == 5
    assert kv.blocks == 100 and kv.tokens == 400


def test_the_decoders_in_one_piece_give_the_same_batch_as_item_by_item():
    a = req("A", 10, 5, prefill_left=0, decoded=2, start=0)
    b = req("B", 20, 5, prefill_left=0, decoded=3, start=1)
    c = req("C", 50, 5)
    decode = [a, b]
    slow = gate(Plan(decode, [(c, 50)]), LAZY, 100, 30, [a, b])
    fast = gate(Plan(decode, [(c, 50)]), LAZY, 100, 30, [a, b], decode_need=2)
    assert ids(slow.plan) == ids(fast.plan) and slow.free == fast.free
    assert fast.plan.decode is decode  # the resident list itself, not a copy
    # when they do not fit, the one-piece path falls back to the walk
    tight = gate(Plan(decode, []), LAZY, 1, 30, [a, b], decode_need=2)
    assert tight.victims == [b] and ids(tight.plan) == (["A"], [])


def test_preemption_none_raises_on_overflow():
    kv = KV(capacity_tokens=10, preemption="none")
    a = req("A", 5, 10, prefill_left=0, decoded=5, start=0)
    with pytest.raises(KVOverflow, match="preemption='none'"):
        gate(Plan([a], []), kv, 0, 100, [a])


def test_the_gate_changes_nothing():
    a = req("A", 5, 10, prefill_left=0, decoded=5, start=0)
    b = req("B", 5, 10, prefill_left=0, decoded=0, start=1)
    before = [(r.seq, r.prefill_left, r.decode_left) for r in (a, b)]
    gate(Plan([a, b], []), LAZY, 0, 100, [a, b])
    assert [(r.seq, r.prefill_left, r.decode_left) for r in (a, b)] == before


@pytest.mark.parametrize("kwargs, message", [
    ({}, "exactly one of capacity_tokens or num_blocks"),
    ({"capacity_tokens": 10, "num_blocks": 2}, "exactly one"),
    ({"capacity_tokens": 3, "block_size": 4}, "at least one block"),
    ({"capacity_tokens": 0}, "capacity_tokens must be an integer >= 1"),
    ({"num_blocks": 0}, "num_blocks must be an integer >= 1"),
    ({"capacity_tokens": 10, "block_size": 0}, "block_size must be an integer >= 1"),
    ({"capacity_tokens": 10, "admission": "eager"}, "admission must be one of lazy, prompt"),
    ({"capacity_tokens": 10, "preemption": "swap"}, "swap' needs a swap pool: swap_tokens"),
    ({"capacity_tokens": 10, "preemption": "drop"}, "preemption must be one of recompute"),
    ({"capacity_tokens": 10, "restart": "again"}, "restart must be one of keep, scratch"),
    ({"capacity_tokens": 10, "watermark": 1.0}, r"watermark must be a number in \[0, 1\)"),
    ({"capacity_tokens": 10, "watermark": -0.1}, r"watermark must be a number in \[0, 1\)"),
])
def test_kv_refuses_bad_settings_naming_the_parameter(kwargs, message):
    with pytest.raises(ValueError, match=message):
        KV(**kwargs)


def test_kv_sizes_and_defaults():
    assert KV(capacity_tokens=131_000).blocks == 131_000
    kv = KV(capacity_tokens=1000, block_size=16)
    assert (kv.blocks, kv.tokens) == (62, 992)
    assert KV(capacity_tokens=1000, admission="prompt").watermark_share == 0.01
    assert KV(capacity_tokens=1000).reserve == 0
    assert KV(capacity_tokens=1000, admission="prompt", watermark=0.1).reserve == 100
    # never-fit: ceil((vp + vd) / B) > N - reserve
    assert KV(capacity_tokens=10).fits_ever(4, 6)
    assert not KV(capacity_tokens=10).fits_ever(5, 6)
    assert not KV(num_blocks=100, admission="prompt").fits_ever(50, 50)  # reserve 1
