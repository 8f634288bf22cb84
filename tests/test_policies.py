"""Policies as pure functions on hand-made resident states (SPEC 3)."""

import pytest

from llmqueue import ClassPriority, make_policy, make_view
from llmqueue.policies.builtin import take_prefill


def shape(plan):
    return ([r.rid for r in plan.decode], [(r.rid, n) for r, n in plan.prefill])


# A, B, C decoding; D (300 prefill left) and E (50 left) prefilling, in admission order.
STATE = [("A", 0, 5), ("B", 0, 5), ("C", 0, 5), ("D", 300, 9), ("E", 50, 9)]


@pytest.mark.parametrize("name, budget, expected", [
    ("sarathi", 128, (["A", "B", "C"], [("D", 125)])),
    ("sarathi", 2, (["A", "B"], [])),
    ("sarathi", 400, (["A", "B", "C"], [("D", 300), ("E", 50)])),
    ("orca", 128, ([], [("D", 128)])),
    ("orca", 352, (["A", "B"], [("D", 300), ("E", 50)])),
    ("vllm", 128, ([], [("D", 128)])),
    ("vllm", 400, ([], [("D", 300), ("E", 50)])),
    ("fastertransformer", 128, (["A", "B", "C"], [])),
    ("fastertransformer", 2, (["A", "B"], [])),
])
def test_chunked_batches(name, budget, expected):
    assert shape(make_policy(name)(make_view(STATE), budget)) == expected


@pytest.mark.parametrize("name, budget, expected", [
    # D (300) does not fit: it blocks E behind it (head-of-line blocking)
    ("sarathi", 128, (["A", "B", "C"], [])),
    ("orca", 128, (["A", "B", "C"], [])),  # decodes fill what the blocked prompt left
    ("vllm", 320, ([], [("D", 300)])),
    ("orca", 353, (["A", "B", "C"], [("D", 300), ("E", 50)])),
])
def test_whole_prompts_block_the_walk(name, budget, expected):
    plan = make_policy(name, chunked=False)(make_view(STATE), budget)
    assert shape(plan) == expected


def test_decoding_only_state():
    view = make_view([("A", 0, 1), ("B", 0, 2)])
    for name in ("sarathi", "orca", "vllm", "fastertransformer"):
        assert shape(make_policy(name)(view, 10)) == (["A", "B"], [])


def test_prefill_only_state_fastertransformer_serves_prefill():
    view = make_view([("D", 100, 1), ("E", 100, 1)])
    assert shape(make_policy("fastertransformer")(view, 150)) == ([], [("D", 100), ("E", 50)])


def test_take_prefill_cap_bounds_prefill_only():
    view = make_view([("D", 300, 1), ("E", 300, 1)])
    assert [(r.rid, n) for r, n in take_prefill(view.prefilling, 1000, True, cap=256)] == \
        [("D", 256)]


def test_sarathi_chunk_cap_leaves_decodes_riding_along():
    view = make_view([("A", 0, 3), ("D", 3000, 5)])
    plan = make_policy("sarathi", chunk=1024)(view, 10**9)
    assert shape(plan) == (["A"], [("D", 1024)])


def test_policies_do_not_change_the_state():
    view = make_view(STATE)
    before = [(r.rid, r.prefill_left, r.decode_left) for r in view.decoding + view.prefilling]
    for name in ("sarathi", "orca", "vllm", "fastertransformer"):
        make_policy(name)(view, 200)
    assert [(r.rid, r.prefill_left, r.decode_left)
            for r in view.decoding + view.prefilling] == before


def test_class_priority_spends_budget_on_the_top_class_first():
    # classes: A, D are "chat"; B, C, E are "batch"
    view = make_view(STATE, classes=["chat", "batch", "batch", "chat", "batch"])
    plan = ClassPriority(make_policy("sarathi"), ["batch", "chat"])(view, 60)
    # batch first: decodes B, C then E's 50 prefill (52 tokens); chat gets 8: A, then D 7
    assert shape(plan) == (["B", "C", "A"], [("E", 50), ("D", 7)])
    plan = ClassPriority(make_policy("sarathi"), ["chat", "batch"])(view, 60)
    # chat first: A's decode and 59 of D's prompt use the whole budget
    assert shape(plan) == (["A"], [("D", 59)])


def test_unknown_scheduler_is_a_value_error_naming_the_choices():
    with pytest.raises(ValueError, match="scheduler must be one of sarathi, orca"):
        make_policy("fifo")


def test_a_plain_function_is_a_policy():
    def decodes_only(view, budget):
        from llmqueue import Plan
        return Plan(view.decoding[:budget], ())

    policy = make_policy(decodes_only)
    assert policy.name == "decodes_only"
    assert not policy.stationary
    assert shape(policy(make_view(STATE), 2)) == (["A", "B"], [])


def test_class_priority_gives_nothing_once_the_budget_is_spent():
    # found in review: whole-prefill under priority handed a 0-token chunk to class y
    from llmqueue.policies.builtin import WholePrefill
    view = make_view([(0, 5, 3), (1, 5, 3)], classes=["x", "y"])
    assert shape(ClassPriority(WholePrefill(), ["x", "y"])(view, 4)) == ([], [(0, 4)])


def test_step_fill_under_class_priority_still_sees_the_whole_pool():
    # found in review: the full-pool test counted only one class's residents.  With
    # kmax 3 the pool is full only counting both classes: class x (1 decode) may add
    # prefill to the end of its step (127), then class y decodes with what is left
    from llmqueue.policies.builtin import StepFill
    view = make_view([(0, 0, 5), (1, 2000, 9), (2, 0, 5)], classes=["x", "x", "y"])
    ranked = ClassPriority(StepFill(kmax=3), ["x", "y"])(view, 1024)
    assert shape(ranked) == ([0, 2], [(1, 127)])
    # with a free slot class x fills like Sarathi: its prompt takes the rest of the budget
    assert shape(ClassPriority(StepFill(kmax=4), ["x", "y"])(view, 1024)) == \
        ([0], [(1, 1023)])
