"""What a policy reads (issue #33, item 6): the current time, the waiting
line and, with a KV cache, the free blocks and each resident's KV, in
documented units; a user's policy reads them through a read-only view with no
way to the engine's mutating methods; and the batches stay those of before."""

from __future__ import annotations

import pytest

import llmqueue as q
from llmqueue.engine.residents import EngineView, Residents
from llmqueue.policies import (ClassPriority, Plan, Sarathi, SimpleView, make_request, make_view,
                               population)

#: Three requests, one second per iteration, two slots: hand-checkable.
#: r0 (100 + 3) arrives at 0 and prefills alone in [0, 1); r1 (50 + 2) and
#: r2 (30 + 2) arrive at 0.5 s: r1 takes the second slot, r2 waits.
ROWS = [(0.0, 100, 3), (0.5, 50, 2), (0.5, 30, 2)]
OPTIONS = dict(kmax=2, latency=q.Constant(1.0))
SARATHI = Sarathi()


def spy(log):
    """Sarathi, noting the view of each batch choice."""
    def policy(view, budget):
        log.append(snapshot(view))
        return SARATHI(view, budget)
    return policy


def snapshot(view):
    residents = tuple(view.decoding) + tuple(view.prefilling)
    return dict(view=view, type=type(view), now=view.now, now_ns=view.now_ns,
                decoding=[r.rid for r in view.decoding],
                prefilling=[r.rid for r in view.prefilling],
                waiting=[(r.rid, r.arrival, r.arrival_s, r.prefill_left) for r in view.waiting],
                kv_tokens={r.rid: view.kv_tokens(r) for r in residents},
                kv_blocks={r.rid: view.kv_blocks(r) for r in residents},
                free_blocks=view.free_blocks, free_tokens=view.free_tokens,
                block_size=view.block_size, kv=view.kv, population=population(view),
                draining=view.draining)


def at(log, now):
    return next(s for s in log if s["now"] == now)


def test_the_view_at_one_second_with_a_kv_cache():
    log = []
    kv = q.KV(num_blocks=20, block_size=16)
    q.simulate(q.from_list(ROWS), spy(log), kv=kv, **OPTIONS)
    first = at(log, 0.0)
    assert first["prefilling"] == [0] and first["waiting"] == [] and first["free_blocks"] == 20
    s = at(log, 1.0)
    assert s["type"] is EngineView
    assert s["now"] == 1.0 and s["now_ns"] == 1_000_000_000  # seconds, and nanoseconds
    assert s["decoding"] == [0] and s["prefilling"] == [1]
    # r2 waits for a slot: arrived at 0.5 s (500_000_000 ns), its whole prompt left
    assert s["waiting"] == [(2, 500_000_000, 0.5, 30)]
    # r0 holds its prompt, 100 tokens in ceil(100 / 16) = 7 blocks; r1 holds nothing yet
    assert s["kv_tokens"] == {0: 100, 1: 0} and s["kv_blocks"] == {0: 7, 1: 0}
    assert s["free_blocks"] == 13 and s["block_size"] == 16 and s["free_tokens"] == 13 * 16
    assert s["kv"] == kv and s["population"] == 2
    assert s["draining"]  # both slots taken: nobody can join before this batch
    # one decode later r0 holds 101 tokens (still 7 blocks) and r1 its 50 (4 blocks)
    s = at(log, 2.0)
    assert s["kv_tokens"] == {0: 101, 1: 50} and s["kv_blocks"] == {0: 7, 1: 4}
    assert s["free_blocks"] == 20 - 7 - 4


def test_the_view_without_a_cache():
    log = []
    q.simulate(q.from_list(ROWS), spy(log), **OPTIONS)
    s = at(log, 1.0)
    assert s["type"] is EngineView and s["now_ns"] == 10**9
    assert s["decoding"] == [0] and s["prefilling"] == [1] and s["waiting"][0][0] == 2
    assert s["kv"] is None and s["free_blocks"] is None and s["block_size"] is None
    assert s["free_tokens"] is None and s["kv_blocks"] == {0: None, 1: None}
    assert s["kv_tokens"] == {0: 100, 1: 0}  # without a cache: the tokens processed


MUTATORS = ["admit", "settle", "apply", "preempt", "start", "release", "serve", "chooser",
            "recompute", "book_areas", "repeats", "context", "free", "tokens", "clock",
            "prefill_tokens", "residents", "env", "waiting_line", "submit"]


@pytest.mark.parametrize("kv", [None, q.KV(num_blocks=20, block_size=16)],
                         ids=["no-cache", "cache"])
def test_mutators_are_not_reachable(kv):
    log = []
    q.simulate(q.from_list(ROWS), spy(log), kv=kv, **OPTIONS)
    view = at(log, 1.0)["view"]
    for name in MUTATORS:
        with pytest.raises(AttributeError):
            getattr(view, name)
    with pytest.raises(AttributeError):
        view.decoding.append(view.prefilling[0])  # tuples: read-only
    with pytest.raises(AttributeError):
        view.waiting.sort()
    for name in ("decoding", "now", "free_blocks", "waiting"):
        with pytest.raises(AttributeError):
            setattr(view, name, ())
    with pytest.raises(AttributeError):
        view.extra = 1  # no new attributes either (slots)
    assert not any(callable(getattr(view, n)) for n in dir(view)
                   if not n.startswith("_") and n not in ("kv_tokens", "kv_blocks", "part"))


def test_the_package_policies_read_the_residents_themselves(monkeypatch):
    """The fast path: no facade, no copy for the built-in rules."""
    seen = []
    plan = Sarathi.plan

    def noted(self, view, budget):
        seen.append(type(view))
        return plan(self, view, budget)

    monkeypatch.setattr(Sarathi, "plan", noted)
    q.simulate(q.from_list(ROWS), "sarathi", **OPTIONS)
    assert seen and all(issubclass(t, Residents) for t in seen)
    seen.clear()  # class priority over it: each class's share, a SimpleView, as before
    q.simulate(q.from_list(ROWS), ClassPriority(Sarathi(), ["x"]), **OPTIONS)
    assert seen and set(seen) == {SimpleView}


def test_class_priority_over_a_users_policy_shows_each_share_the_engine():
    log = []
    policy = ClassPriority(q.policies.FunctionPolicy(spy(log)), ["a"])
    rows = [(0.0, 100, 3, "b"), (0.5, 50, 2, "a"), (0.5, 30, 2, "a")]
    q.simulate(q.from_list(rows), policy, kv=q.KV(num_blocks=20, block_size=16), **OPTIONS)
    shares = [s for s in log if s["now"] == 1.0]
    assert [(s["decoding"], s["prefilling"]) for s in shares] == [([], [1]), ([0], [])]
    for s in shares:
        assert s["type"] is EngineView and s["population"] == 2
        assert s["free_blocks"] == 13 and [w[0] for w in s["waiting"]] == [2]


@pytest.mark.parametrize("kv", [None, q.KV(capacity_tokens=8000, block_size=16),
                                q.KV(capacity_tokens=8000, preemption="swap", swap_tokens=4000),
                                q.KV(capacity_tokens=8000, prefix=True)],
                         ids=["no-cache", "blocks", "swap", "prefix"])
def test_a_users_sarathi_makes_sarathis_batches(kv):
    """The read-only view changes no decision: a user's function that calls
    Sarathi forms the built-in's batches, preemptions and swaps included."""
    log = []

    def user(view, budget):
        log.append(type(view))
        return SARATHI(view, budget)

    workload = q.compose(q.Poisson(3.0), q.UniformInt(20, 600), q.UniformInt(5, 300), seed=2)
    ours = q.simulate(workload, "sarathi", kv=kv, horizon=100.0, batches=True)
    theirs = q.simulate(workload, user, kv=kv, horizon=100.0, batches=True)
    assert ours.summary == theirs.summary
    assert list(ours.batches()) == list(theirs.batches())
    assert set(log) == {EngineView}
    if kv is not None:
        assert ours.summary["preemptions"] > 0


def test_units_of_a_hand_made_view():
    kv = q.KV(num_blocks=10, block_size=16)
    view = make_view([make_request("A", 40, 10, done=45),  # decoding: 45 tokens of KV
                      make_request("B", 100, 5, done=20, arrival=1.25),  # 20 of its prompt done
                      ("C", 30, 4)],  # nothing processed: holds no KV yet
                     now=2.5, waiting=[("D", 70, 8)], kv=kv)
    assert isinstance(view, SimpleView)
    assert view.now == 2.5 and view.now_ns == 2_500_000_000
    a, (b, c) = view.decoding[0], view.prefilling
    assert (a.decode_left, b.prefill_left, c.prefill_left) == (5, 80, 30)
    assert b.arrival == 1_250_000_000 and b.arrival_s == 1.25
    assert [view.kv_tokens(r) for r in (a, b, c)] == [45, 20, 0]
    assert [view.kv_blocks(r) for r in (a, b, c)] == [3, 2, 0]
    assert view.free_blocks == 10 - 5 and view.free_tokens == 80 and view.block_size == 16
    assert [(r.rid, r.vp, r.prefill_left) for r in view.waiting] == [("D", 70, 70)]
    plain = make_view([("A", 0, 3), ("B", 50, 9)])  # the old form is unchanged
    assert plain.kv is None and plain.free_blocks is None and plain.now == 0.0
    assert SARATHI(plain, 10) == Plan([plain.decoding[0]], [(plain.prefilling[0], 9)])


def test_make_request_refuses_a_finished_request():
    with pytest.raises(ValueError, match="done"):
        make_request("A", 10, 5, done=15)


def test_a_users_policy_keeps_the_residents_under_30_attributes():
    """The read-only view costs the residents one attribute (``shown``), and
    CPython 3.11 specializes attribute reads only below 30 (tests/test_hot_paths.py)."""
    import simpy

    from llmqueue.engine.processes import Engine

    for kv in (None, q.KV(capacity_tokens=1000, block_size=16),
               q.KV(capacity_tokens=1000, block_size=16, prefix=True),
               q.KV(capacity_tokens=1000, preemption="swap", swap_tokens=100)):
        engine = Engine(simpy.Environment(), q.make_policy(spy([])), kv=kv)
        assert engine.residents.shown is not None
        assert len(vars(engine.residents)) < 30, sorted(vars(engine.residents))
