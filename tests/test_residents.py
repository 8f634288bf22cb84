"""``Residents`` on its own, driven by hand (no simulation).

Every expected value below is worked out on paper from the docstrings of
``llmqueue/engine/residents.py`` and ``llmqueue/policies/view.py`` and SPEC
sections 1-3 and 5; times are integer nanoseconds.
"""

from typing import Dict, List, Sequence, Tuple

import pytest

from llmqueue.common.units import UNLIMITED
from llmqueue.engine.residents import Residents
from llmqueue.policies.view import Plan, Request


def build(specs: Sequence[Tuple[str, int, int]], now: int = 0,
          settle: bool = True) -> Tuple[Residents, Dict[str, Request]]:
    """Residents admitted at ``now`` from ``(rid, vp, vd)`` in this order."""
    res = Residents()
    reqs = {}
    for rid, vp, vd in specs:
        r = Request(rid, vp, vd)
        reqs[rid] = r
        res.admit(r, now)
    if settle:
        res.settle()
    return res, reqs


def plan(reqs: Dict[str, Request], decode: str = "",
         prefill: Sequence[Tuple[str, int]] = ()) -> Plan:
    return Plan([reqs[x] for x in decode], [(reqs[x], n) for x, n in prefill])


def rids(seq) -> List[str]:
    return [r.rid for r in seq]


def state(res: Residents, reqs: Dict[str, Request]):
    """Everything observable about a Residents object and its requests."""
    return (rids(res.decoding), rids(res.prefilling), rids(res), len(res),
            res.prefill_tokens, res.demand,
            {rid: (r.seq, r.prefill_left, r.decode_left, r.admitted, r.prefill_done,
                   r.first_token, r.finished) for rid, r in reqs.items()})


# -- admission ------------------------------------------------------------

def test_admit_waits_in_incoming_until_settle():
    res, reqs = build([("A", 0, 3), ("B", 5, 2)], now=40, settle=False)
    # admitted, but not in the view yet
    assert rids(res._incoming) == ["A", "B"]
    assert res.decoding == [] and res.prefilling == []
    assert res.prefill_tokens == 0 and res.demand == 0
    res.settle()
    assert res._incoming == []
    assert rids(res.decoding) == ["A"] and rids(res.prefilling) == ["B"]
    # demand = 5 prefill tokens of B + 1 decoder (A)
    assert res.prefill_tokens == 5 and res.demand == 6


def test_admit_stamps_admission_and_prefill_done_of_an_empty_prompt():
    res, reqs = build([("A", 0, 3), ("B", 5, 2)], now=40, settle=False)
    assert reqs["A"].admitted == 40 and reqs["B"].admitted == 40
    # vp = 0: nothing to prefill, so its prefill is done at admission
    assert reqs["A"].prefill_done == 40
    assert reqs["B"].prefill_done is None
    assert reqs["A"].first_token is None and reqs["A"].finished is None


def test_admission_order_gives_seq_and_view_order():
    res, reqs = build([("P1", 4, 1), ("D1", 0, 2), ("P2", 3, 1), ("D2", 0, 5),
                       ("P3", 1, 1)])
    assert [reqs[x].seq for x in ("P1", "D1", "P2", "D2", "P3")] == [0, 1, 2, 3, 4]
    assert rids(res.decoding) == ["D1", "D2"]
    assert rids(res.prefilling) == ["P1", "P2", "P3"]
    # seq keeps counting across settles
    late = Request("L", 0, 1)
    res.admit(late, 10)
    assert late.seq == 5


def test_len_and_iter_include_incoming_residents():
    res, reqs = build([("A", 0, 3), ("B", 5, 2)])
    late = Request("C", 2, 2)
    res.admit(late, 7)
    assert len(res) == 3
    assert sorted(rids(res)) == ["A", "B", "C"]
    assert late not in res.prefilling  # not in the view yet
    res.settle()
    assert len(res) == 3 and rids(res.prefilling) == ["B", "C"]


def test_empty_residents():
    res = Residents()
    assert len(res) == 0 and list(res) == [] and res.demand == 0


def test_a_running_batch_never_sees_a_resident_admitted_during_it():
    res, reqs = build([("A", 0, 3), ("B", 0, 5)])
    p = plan(reqs, "AB")
    # the batch has started (plan formed); X and Y are admitted while it runs
    x, y = Request("X", 0, 2), Request("Y", 4, 1)
    res.admit(x, 150)
    res.admit(y, 160)
    # one iteration [100, 300): decodes A and B only
    prefilled, finished = res.apply(p, 1, 100, 200)
    assert (prefilled, finished) == ([], [])
    assert reqs["A"].decode_left == 2 and reqs["B"].decode_left == 4
    assert x.first_token is None and y.prefill_left == 4
    res.settle()
    # X joins with its whole decode left, after A and B (admission order)
    assert rids(res.decoding) == ["A", "B", "X"] and x.decode_left == 2
    assert rids(res.prefilling) == ["Y"]
    # demand = 4 (Y's prompt) + 3 decoders
    assert res.prefill_tokens == 4 and res.demand == 7


def test_incoming_resident_reports_its_whole_decode_left():
    res, reqs = build([("A", 0, 5)])
    res.apply(plan(reqs, "A"), 2, 0, 10)  # shared clock is now 2
    x = Request("X", 0, 4)
    res.admit(x, 20)
    # X has produced nothing: 4 decode tokens still to go (view.py docstring)
    assert [r.decode_left for r in res if r.rid == "X"] == [4]


# -- one iteration --------------------------------------------------------

def one_iteration_state():
    # admission order: A (decodes, 1 left), B (decodes, 4 left), C (prompt 10),
    # D (prompt 3), E (prompt 5), all admitted at t=0
    res, reqs = build([("A", 0, 1), ("B", 0, 4), ("C", 10, 2), ("D", 3, 2), ("E", 5, 1)])
    return res, reqs


def test_bookkeeping_after_settle():
    res, reqs = one_iteration_state()
    assert rids(res.decoding) == ["A", "B"]
    assert rids(res.prefilling) == ["C", "D", "E"]
    # prefill tokens 10 + 3 + 5 = 18; demand 18 + 2 decoders = 20
    assert res.prefill_tokens == 18 and res.demand == 20


def test_apply_one_iteration_with_decodes_a_partial_and_a_completing_chunk():
    res, reqs = one_iteration_state()
    A, B, C, D, E = (reqs[x] for x in "ABCDE")
    # decodes A, B; C gets 6 of its 10 (partial); D gets all 3 (completes); E nothing.
    # iteration [2000, 2700): end = 2000 + 700 = 2700
    prefilled, finished = res.apply(plan(reqs, "AB", [("C", 6), ("D", 3)]), 1, 2000, 700)
    assert prefilled == [D] and finished == [A]
    # A: 1 - 1 = 0 left, first and last token at the iteration end
    assert (A.decode_left, A.first_token, A.finished) == (0, 2700, 2700)
    assert A.prefill_done == 0
    # B: 4 - 1 = 3 left, first token at 2700
    assert (B.decode_left, B.first_token, B.finished) == (3, 2700, None)
    # C: 10 - 6 = 4 left, prefill not done (its decode_left: see the test below)
    assert (C.prefill_left, C.prefill_done, C.first_token) == (4, None, None)
    # D: 3 - 3 = 0, prefill done at 2700, no decode token yet (6a)
    assert (D.prefill_left, D.prefill_done, D.decode_left, D.first_token) == (0, 2700, 2, None)
    # E: untouched
    assert (E.prefill_left, E.prefill_done) == (5, None)
    assert rids(res.decoding) == ["B", "D"]
    assert rids(res.prefilling) == ["C", "E"]
    # prefill tokens 18 - 6 - 3 = 9 (C 4 + E 5); demand 9 + 2 decoders (B, D) = 11
    assert res.prefill_tokens == 9 and res.demand == 11
    assert len(res) == 4 and A not in list(res)


def test_prefilling_residents_keep_their_whole_decode_left():
    res, reqs = one_iteration_state()
    res.apply(plan(reqs, "AB", [("C", 6), ("D", 3)]), 1, 2000, 700)
    # C (vd 2) and E (vd 1) have decoded nothing: all their decode tokens are left
    assert (reqs["C"].decode_left, reqs["E"].decode_left) == (2, 1)


def test_later_iterations_keep_admission_order_and_stamp_first_tokens():
    res, reqs = one_iteration_state()
    A, B, C, D, E = (reqs[x] for x in "ABCDE")
    res.apply(plan(reqs, "AB", [("C", 6), ("D", 3)]), 1, 2000, 700)
    # iteration 2, [2700, 3200): decodes B, D; C's last 4 and E's 5 complete both prompts
    prefilled, finished = res.apply(plan(reqs, "BD", [("C", 4), ("E", 5)]), 1, 2700, 500)
    assert prefilled == [C, E] and finished == []
    assert (B.decode_left, B.first_token) == (2, 2700)  # first token stays the first one
    assert (D.decode_left, D.first_token) == (1, 3200)
    assert (C.prefill_done, C.decode_left, C.first_token) == (3200, 2, None)
    assert (E.prefill_done, E.decode_left, E.first_token) == (3200, 1, None)
    # C (seq 2) goes between B (seq 1) and D (seq 3); E (seq 4) last
    assert rids(res.decoding) == ["B", "C", "D", "E"] and res.prefilling == []
    assert res.prefill_tokens == 0 and res.demand == 4
    # iteration 3, [3200, 3600): all four decode; D (1 left) and E (1 left) finish
    prefilled, finished = res.apply(plan(reqs, "BCDE"), 1, 3200, 400)
    assert prefilled == [] and set(finished) == {D, E}
    assert D.finished == 3600 and E.finished == 3600
    assert (E.first_token, C.first_token) == (3600, 3600)
    assert (B.decode_left, C.decode_left) == (1, 1)
    assert rids(res.decoding) == ["B", "C"] and res.demand == 2


def test_first_token_of_a_multi_iteration_run_is_the_end_of_its_first_iteration():
    res, reqs = build([("A", 0, 4), ("B", 0, 6)])
    # 3 iterations of 100 from 1000: first ends 1100, run ends 1300
    res.apply(plan(reqs, "AB"), 3, 1000, 100)
    assert reqs["A"].first_token == 1100 and reqs["B"].first_token == 1100
    assert reqs["A"].decode_left == 1 and reqs["B"].decode_left == 3


# -- the shared decode clock ----------------------------------------------

def test_full_decode_batch_ticks_the_shared_clock_not_the_residents():
    res, reqs = build([("A", 0, 3), ("B", 0, 5)])
    marks = [reqs["A"].end_mark, reqs["B"].end_mark]  # 0 + 3, 0 + 5
    assert marks == [3, 5]
    res.apply(plan(reqs, "AB"), 2, 0, 10)
    assert res.clock[0] == 2
    assert [reqs["A"].end_mark, reqs["B"].end_mark] == marks  # untouched
    assert (reqs["A"].decode_left, reqs["B"].decode_left) == (1, 3)


def test_partial_decode_batch_advances_only_the_chosen_decoders():
    res, reqs = build([("A", 0, 3), ("B", 0, 5), ("C", 0, 2)])
    prefilled, finished = res.apply(plan(reqs, "AC"), 1, 500, 50)
    assert res.clock[0] == 0  # a partial batch does not tick the shared clock
    assert (reqs["A"].decode_left, reqs["B"].decode_left, reqs["C"].decode_left) == (2, 5, 1)
    assert (reqs["A"].first_token, reqs["B"].first_token, reqs["C"].first_token) == (550, None, 550)
    assert (prefilled, finished) == ([], [])
    # C's last token in a second partial batch [550, 600): C finishes, B still untouched
    prefilled, finished = res.apply(plan(reqs, "C"), 1, 550, 50)
    assert finished == [reqs["C"]] and reqs["C"].finished == 600
    assert reqs["B"].decode_left == 5 and rids(res.decoding) == ["A", "B"]
    # a full batch [600, 650) then gives B its first token; A keeps its own
    res.apply(plan(reqs, "AB"), 1, 600, 50)
    assert (reqs["A"].first_token, reqs["B"].first_token) == (550, 650)
    assert (reqs["A"].decode_left, reqs["B"].decode_left) == (1, 4)


def test_a_prompt_completed_after_the_clock_ticked_gets_its_whole_decode():
    res, reqs = build([("A", 0, 5), ("P", 2, 3)])
    # [0, 10) and [10, 20): A decodes twice, P's prompt in chunks of 1
    res.apply(plan(reqs, "A", [("P", 1)]), 2, 0, 10)
    assert res.clock[0] == 2 and reqs["P"].prefill_done == 20
    assert reqs["P"].decode_left == 3 and reqs["A"].decode_left == 3
    res.apply(plan(reqs, "AP"), 3, 20, 10)
    # P: 3 decodes done at 50, first token at 30; A: 3 - 3 = 0, finished at 50 too
    assert (reqs["P"].first_token, reqs["P"].finished) == (30, 50)
    assert reqs["A"].finished == 50 and res.decoding == []


# -- repeats ----------------------------------------------------------------

@pytest.mark.parametrize("specs, decode, prefill, expected", [
    # two decoders, 3 and 5 left, both served: the 3rd run finishes the first one
    ([("A", 0, 3), ("B", 0, 5)], "AB", [], 3),
    # partial batch: only the chosen decoders count (C's 2 left does not limit)
    ([("A", 0, 3), ("B", 0, 5), ("C", 0, 2)], "AB", [], 3),
    ([("A", 0, 3), ("B", 0, 5), ("C", 0, 2)], "B", [], 5),
    # chunk 4 of a 10-token prompt: 10 -> 6 -> 2, a 3rd chunk of 4 no longer fits
    ([("P", 10, 1)], "", [("P", 4)], 2),
    # chunk 4 of 12: 12 -> 8 -> 4 -> 0, the 3rd run completes the prompt
    ([("P", 12, 1)], "", [("P", 4)], 3),
    # a whole prompt in one chunk completes at once
    ([("P", 7, 1)], "", [("P", 7)], 1),
    # decoders 3 and 5 with chunk 4 of 10: min(3, 2) = 2
    ([("A", 0, 3), ("B", 0, 5), ("P", 10, 1)], "AB", [("P", 4)], 2),
    # the smallest over several chunks: 9 // 3 = 3 and 20 // 5 = 4
    ([("P", 9, 1), ("Q", 20, 1)], "", [("P", 3), ("Q", 5)], 3),
    # a single decode token left: 1
    ([("A", 0, 1), ("B", 0, 5)], "AB", [], 1),
])
def test_repeats_by_hand(specs, decode, prefill, expected):
    res, reqs = build(specs)
    assert res.repeats(plan(reqs, decode, prefill)) == expected


def test_repeats_of_an_empty_plan_is_unlimited():
    res, reqs = build([("A", 0, 3)])
    assert res.repeats(Plan([], [])) == UNLIMITED


def test_repeats_after_partial_batches_and_finishes():
    res, reqs = build([("A", 0, 3), ("B", 0, 5), ("C", 0, 1)])
    res.apply(plan(reqs, "AC"), 1, 0, 10)  # A 2, B 5, C finishes
    assert rids(res.decoding) == ["A", "B"]
    # full batch of A (2 left) and B (5 left): 2
    assert res.repeats(plan(reqs, "AB")) == 2
    res.apply(plan(reqs, "AB"), 2, 10, 10)  # A finishes at 30, B 3 left
    assert reqs["A"].finished == 30
    assert res.repeats(plan(reqs, "B")) == 3


@pytest.mark.parametrize("specs, decode, prefill", [
    ([("A", 0, 3), ("B", 0, 5)], "AB", []),
    ([("A", 0, 4), ("B", 0, 6), ("P", 12, 2), ("Q", 5, 1)], "AB", [("P", 4)]),
    ([("A", 0, 4), ("B", 0, 2), ("C", 0, 6), ("P", 9, 1)], "AC", [("P", 3)]),
])
def test_repeats_means_no_phase_change_before_the_last_run(specs, decode, prefill):
    res, reqs = build(specs)
    p = plan(reqs, decode, prefill)
    k = res.repeats(p)
    for i in range(k - 1):
        assert res.apply(p, 1, i * 10, 10) == ([], [])
    prefilled, finished = res.apply(p, 1, (k - 1) * 10, 10)
    assert prefilled or finished


# -- k iterations at once equal k single iterations --------------------------

@pytest.mark.parametrize("specs, decode, prefill, k", [
    # full decode batch + a chunk that completes on the last run: min(3, 12 // 4 = 3)
    ([("A", 0, 3), ("B", 0, 5), ("C", 12, 2), ("D", 10, 1)], "AB", [("C", 4)], 3),
    # partial decode batch (B skipped) + a completing chunk: min(3, 4, 4 // 2 = 2)
    ([("A", 0, 3), ("B", 0, 5), ("C", 0, 4), ("D", 4, 1)], "AC", [("D", 2)], 2),
    # decode-only run up to a finish
    ([("A", 0, 6), ("B", 0, 4), ("C", 0, 9)], "ABC", [], 4),
    # prefill-only run that stops short of completing (7 // 2 = 3 leaves 1)
    ([("A", 0, 2), ("P", 7, 1)], "", [("P", 2)], 3),
])
def test_apply_k_equals_k_single_applies(specs, decode, prefill, k):
    start, t = 1000, 100
    many, many_reqs = build(specs)
    single, single_reqs = build(specs)
    assert many.repeats(plan(many_reqs, decode, prefill)) >= k
    got = many.apply(plan(many_reqs, decode, prefill), k, start, t)
    acc = ([], [])
    for i in range(k):
        p, f = single.apply(plan(single_reqs, decode, prefill), 1, start + i * t, t)
        acc[0].extend(p)
        acc[1].extend(f)
    assert sorted(rids(got[0])) == sorted(rids(acc[0]))
    assert sorted(rids(got[1])) == sorted(rids(acc[1]))
    assert state(many, many_reqs) == state(single, single_reqs)


def test_apply_k_by_hand():
    # the first case above, worked out: iterations end 1100, 1200, 1300
    res, reqs = build([("A", 0, 3), ("B", 0, 5), ("C", 12, 2), ("D", 10, 1)])
    A, B, C, D = (reqs[x] for x in "ABCD")
    prefilled, finished = res.apply(plan(reqs, "AB", [("C", 4)]), 3, 1000, 100)
    assert prefilled == [C] and finished == [A]
    assert (A.first_token, A.finished, A.decode_left) == (1100, 1300, 0)
    assert (B.first_token, B.finished, B.decode_left) == (1100, None, 2)
    assert (C.prefill_left, C.prefill_done, C.decode_left, C.first_token) == (0, 1300, 2, None)
    assert (D.prefill_left, D.prefill_done) == (10, None)
    assert rids(res.decoding) == ["B", "C"] and rids(res.prefilling) == ["D"]
    # prefill 22 - 12 = 10; demand 10 + 2 decoders
    assert res.prefill_tokens == 10 and res.demand == 12
