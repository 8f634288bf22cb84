"""Cache-aware routing (SPEC 10.6): the routers' exact choices on hand-set
replicas (hits, backlogs, ties, the weight, staleness, session memory), and a
small network where prefix-affinity keeps each group's requests on the
replica that holds its prefix."""

import pytest

import llmqueue as q
from llmqueue.engine.prefix_cache import prefix_request
from llmqueue.models.sessions import Sessions
from llmqueue.models.workload import Arrival, Workload
from llmqueue.network.network import Network
from llmqueue.network.routers import (BASIC, JSQ, ROUTERS, JSQTokens, PowerOfTwo, PrefixAffinity,
                                      PrefixScore, RandomRouter, RoundRobin, SessionSticky,
                                      freeze, make_router, router_names)
from llmqueue.policies.view import Request

H = 16


class Fake:
    """A replica with hand-set figures: ``hits`` maps a request's rid to its hit."""

    def __init__(self, backlog=0, hits=None, pending=0):
        self.backlog, self.pending, self.hits = backlog, pending, dict(hits or {})

    def cached_prefix(self, request):
        return self.hits.get(request.rid, 0)

    def snapshot(self):
        return Fake(self.backlog, self.hits, self.pending)


def req(rid, vp=100, session=None):
    """A request with ids (``vp // H`` of them) of session ``session``."""
    return prefix_request(rid, vp, 10, blocks=tuple(range(vp // H)), hash_block=H,
                          session=session)


class Clock:
    """A hand-moved clock in ticks."""

    def __init__(self):
        self.ticks = 0

    def __call__(self):
        return self.ticks

    def at(self, seconds):
        self.ticks = round(seconds * 1e9)


# -- registry and the routers of SPEC 6.3 ---------------------------------------------
def test_names_are_registered_and_the_basic_ones_listed_apart():
    assert {"prefix-affinity", "prefix-score", "session-sticky"} <= set(ROUTERS)
    assert router_names(cache_aware=False) == list(BASIC) == [
        "random", "round-robin", "jsq", "jsq-tokens", "power-of-two"]
    assert router_names() == list(ROUTERS)
    for name in ROUTERS:
        assert make_router(name).name == name


@pytest.mark.parametrize("cls", [RandomRouter, RoundRobin, JSQ, JSQTokens, PowerOfTwo])
def test_the_basic_routers_ignore_the_request(cls):
    replicas = [Fake(backlog=b, pending=p, hits={0: 50}) for b, p in [(5, 2), (3, 4), (9, 1)]]
    plain, given = cls(seed=4), cls(seed=4)
    for _ in range(20):
        assert plain.choose(replicas) == given.choose(replicas, req(0))


def test_options_reach_the_router_and_unknown_ones_are_refused():
    assert make_router("prefix-score", 0, weight=0.8).weight == 0.8
    assert make_router("prefix-affinity", stale=2.5).stale == 2.5
    assert make_router("session-sticky", sessions=3).sessions == 3
    with pytest.raises(ValueError, match="router 'jsq' takes no option 'weight'; allowed: "):
        make_router("jsq", weight=0.5)
    with pytest.raises(ValueError, match="need a router name"):
        make_router(PrefixScore(), weight=0.5)
    with pytest.raises(ValueError, match="weight must be a number in"):
        PrefixScore(weight=1.5)
    with pytest.raises(ValueError, match="stale must be a finite number > 0"):
        PrefixAffinity(stale=0)
    with pytest.raises(ValueError, match="sessions must be"):
        SessionSticky(sessions=0)
    assert repr(PrefixScore(weight=0.25, stale=1.0)) == "PrefixScore(weight=0.25, stale=1.0)"


# -- prefix-affinity ----------------------------------------------------------------
def test_affinity_takes_the_longest_cached_prefix():
    replicas = [Fake(0, {1: 16}), Fake(900, {1: 64}), Fake(0, {1: 32})]
    assert PrefixAffinity().choose(replicas, req(1)) == 1


def test_affinity_ties_go_to_the_fewest_tokens_then_the_lowest_index():
    router = PrefixAffinity()
    assert router.choose([Fake(50, {1: 32}), Fake(20, {1: 32}), Fake(10, {1: 16})], req(1)) == 1
    assert router.choose([Fake(7, {1: 32}), Fake(7, {1: 32}), Fake(7, {1: 32})], req(1)) == 0
    assert router.choose([Fake(9), Fake(3), Fake(3)], req(1)) == 1  # no hit anywhere: JSQ-tokens


def test_affinity_routes_a_request_without_ids_by_tokens():
    replicas = [Fake(30, {1: 64}), Fake(10), Fake(20)]
    assert PrefixAffinity().choose(replicas, Request(1, 100, 10)) == 1
    assert PrefixAffinity().choose(replicas) == 1


# -- prefix-score -------------------------------------------------------------------
def test_score_weighs_the_hit_ratio_against_the_load():
    # vp 100; backlogs over the largest, 1000: 1, 0, 0.2; hit ratios 0.8, 0, 0.4
    replicas = [Fake(1000, {1: 80}), Fake(0), Fake(200, {1: 40})]
    assert PrefixScore().choose(replicas, req(1)) == 2             # -0.1, 0, 0.1
    assert PrefixScore(weight=0.9).choose(replicas, req(1)) == 0   # 0.62, 0, 0.34
    assert PrefixScore(weight=0.1).choose(replicas, req(1)) == 1   # -0.82, 0, -0.14
    assert PrefixScore(weight=0.0).choose(replicas, req(1)) == 1   # the load alone
    assert PrefixScore(weight=1.0).choose(replicas, req(1)) == 0   # the hit alone


def test_score_reads_zero_over_zero_as_zero_and_ties_go_to_the_lowest_index():
    idle = [Fake(0), Fake(0, {1: 48}), Fake(0, {1: 48})]  # no backlog anywhere: hits alone
    assert PrefixScore().choose(idle, req(1)) == 1
    assert PrefixScore().choose([Fake(0), Fake(0)], req(1)) == 0
    # equal scores (vp 64): 0.5 * 48/64 - 0.5 * 10/10 = -0.125 = 0.5 * 16/64 - 0.5 * 5/10
    assert PrefixScore().choose([Fake(10, {1: 48}), Fake(5, {1: 16})], req(1, vp=64)) == 0
    assert PrefixScore().choose([Fake(5, {1: 16}), Fake(10, {1: 48})], req(1, vp=64)) == 0
    assert PrefixScore().choose([Fake(10, {1: 16}), Fake(5)], req(1, vp=64)) == 1  # -0.375, -0.25
    # no ids (or an empty prompt): the load alone, as JSQ-tokens
    assert PrefixScore().choose([Fake(8, {1: 50}), Fake(4)], Request(1, 100, 10)) == 1
    assert PrefixScore().choose([Fake(8), Fake(4)], Request(1, 0, 10)) == 1


# -- session-sticky ------------------------------------------------------------------
def test_a_session_stays_where_its_first_turn_went():
    replicas = [Fake(30), Fake(10), Fake(20)]
    router = SessionSticky()
    assert router.choose(replicas, req(1, session="a")) == 1
    replicas[1].backlog = 1000
    assert router.choose(replicas, req(2, session="a")) == 1      # stays
    assert router.choose(replicas, req(3, session="b")) == 2      # its own first turn
    assert router.choose(replicas, req(4)) == 2                   # no session: JSQ-tokens
    assert router.choose(replicas, Request(5, 10, 1)) == 2
    assert dict(router.served) == {"a": 1, "b": 2}


def test_sticky_memory_is_bounded_forgetting_the_least_recently_routed():
    replicas = [Fake(0), Fake(5)]
    router = SessionSticky(sessions=2)
    router.choose(replicas, req(1, session="a"))   # a -> 0
    replicas[0].backlog = 10
    router.choose(replicas, req(2, session="b"))   # b -> 1
    router.choose(replicas, req(3, session="a"))   # a routed again: b is now the oldest
    router.choose(replicas, req(4, session="c"))   # c -> 1; b forgotten
    assert list(router.served) == ["a", "c"]
    replicas[1].backlog = 50
    assert router.choose(replicas, req(5, session="b")) == 0  # a first turn again
    assert list(router.served) == ["c", "b"]


# -- staleness ------------------------------------------------------------------------
def test_a_stale_router_reads_a_snapshot_for_that_many_seconds():
    replicas = [Fake(0, {1: 16}), Fake(0, {1: 32})]
    clock = Clock()
    router = PrefixAffinity(stale=1.0)
    router.attach(clock)
    assert router.choose(replicas, req(1)) == 1          # snapshot taken at 0
    replicas[0].hits[1] = 64
    clock.at(0.999999999)
    assert router.choose(replicas, req(1)) == 1          # still the snapshot of t = 0
    assert PrefixAffinity().choose(replicas, req(1)) == 0  # live
    clock.at(1.0)
    assert router.choose(replicas, req(1)) == 0          # refreshed: 1 s old
    replicas[0].hits[1] = 0
    clock.at(1.5)
    assert router.choose(replicas, req(1)) == 0          # the snapshot of t = 1 s
    clock.at(2.0)
    assert router.choose(replicas, req(1)) == 1


def test_a_stale_snapshot_holds_the_backlog_too():
    replicas = [Fake(0), Fake(5)]
    clock = Clock()
    for router in (PrefixScore(stale=2.0), SessionSticky(stale=2.0)):
        router.attach(clock)
        replicas[0].backlog = 0
        clock.at(0.0 if isinstance(router, PrefixScore) else 10.0)
        picks = []
        for rid in range(3):
            picks.append(router.choose(replicas, req(rid)))
            replicas[picks[-1]].backlog += 100   # the snapshot does not see it
        assert picks == [0, 0, 0]


def test_a_stale_router_needs_a_clock():
    with pytest.raises(ValueError, match="needs the replicas' clock"):
        PrefixAffinity(stale=1.0).choose([Fake(0)], req(1))


# -- a network of engines with prefix caches ------------------------------------------
def groups_workload(rounds=20):
    """Two groups, one request of each every 0.5 s (their order alternating):
    64-token prompts whose first three hash blocks are the group's."""
    rows = []
    for i in range(rounds):
        for g in ((0, 1) if i % 2 == 0 else (1, 0)):
            blocks = (("g", g, 0), ("g", g, 1), ("g", g, 2), ("u", g, i))
            rows.append(Arrival(i * 0.5, 64, 8, g, blocks, None, H))
    return Workload(lambda: iter(rows), len(rows), "two groups", hash_block=H)


def run_groups(router, seed=1):
    net = Network(seed=seed)
    net.add_replicas("pool", 2, router=router, bmax=256,
                     kv=q.KV(capacity_tokens=4000, block_size=H, prefix=True))
    net.feed("pool", groups_workload())
    return net.run()


def engines_of_groups(result):
    where = {}
    for name, r in result.engines.items():
        for request in r.request_log:
            where.setdefault(request.klass, set()).add(name)
    return where


def test_affinity_keeps_each_group_on_the_replica_holding_its_prefix():
    affinity = run_groups("prefix-affinity")
    assert engines_of_groups(affinity) == {0: {"pool-0"}, 1: {"pool-1"}}
    hit = affinity.total.summary["prefix_hit_ratio"]
    assert hit == pytest.approx(38 * 48 / (40 * 64))  # all but each group's first hit 3 blocks
    for seed in range(3):
        rnd = run_groups("random", seed).total.summary
        assert rnd["completed"] == 40 and rnd["prefix_hit_ratio"] < hit
    assert engines_of_groups(run_groups("prefix-score")) == {0: {"pool-0"}, 1: {"pool-1"}}


def test_a_stale_snapshot_of_engines_sees_their_caches_as_they_were():
    # a snapshot taken at t = 0 (empty caches, no backlog) and kept all run long
    result = run_groups(PrefixAffinity(stale=1000.0))
    assert result.engines["pool-1"].summary["arrivals"] == 0
    net = Network()
    net.add_replicas("pool", 1, bmax=256, kv=q.KV(capacity_tokens=4000, block_size=H, prefix=True))
    net.feed("pool", groups_workload(rounds=2))
    engine = net.engines["pool-0"]
    before = freeze(engine)
    net.run()
    r = prefix_request(None, 64, 8, blocks=(("g", 0, 0), ("g", 0, 1), ("g", 0, 2)),
                       hash_block=H)
    assert (before.cached_prefix(r), engine.cached_prefix(r), freeze(engine).cached_prefix(r)) \
        == (0, 48, 48)
    assert (before.backlog, before.pending) == (0, 0)


def run_sessions(router, horizon=None):
    net = Network(seed=2)
    net.add_replicas("pool", 3, router=router, bmax=256,
                     kv=q.KV(capacity_tokens=20000, block_size=H, prefix=True))
    log = net.feed_sessions("pool", Sessions(rate=2.0, sessions=12, turns=4, think=1.0,
                                             message=40, decode=24, system=32, seed=3))
    result = net.run(horizon)
    where = {}
    for name, r in result.engines.items():
        for request in r.request_log:
            where.setdefault(request.session, set()).add(name)
    return log, result.total.summary, where


def test_sessions_fed_to_a_pool_stick_to_the_replica_of_their_first_turn():
    log, sticky, where = run_sessions("session-sticky")
    assert log.figures() == {"sessions_started": 12, "sessions_completed": 12,
                             "sessions_cut": 0, "turns_sent": 48}
    assert sticky["completed"] == 48 and len(where) == 12
    assert all(len(engines) == 1 for engines in where.values())
    _, jsq, spread = run_sessions("jsq-tokens")
    assert any(len(engines) > 1 for engines in spread.values())
    assert sticky["prefix_hit_ratio"] > jsq["prefix_hit_ratio"]
    log, cut, _ = run_sessions("session-sticky", horizon=4.0)  # turns due later are never sent
    assert log.turns_sent < 48 and cut["arrivals"] == log.turns_sent
