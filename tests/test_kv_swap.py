"""Preemption by swapping, peak admission with a ``max_tokens`` cap, and KV
caches on the engines of a network (SPEC 7.2-7.3, 7.7).  Iterations last 1 s
unless said otherwise, so times are iteration numbers; every figure below is
worked out by hand from the rules in ``llmqueue/engine/kv_swap.py``."""

import json
import random
import warnings

import pytest
import simpy
from test_kv_engine import TWO, labels, run, seconds
from test_kv_skip import assert_same, both

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.engine import Engine, Stalled
from llmqueue.experiments.base import kv_of
from llmqueue.policies import Sarathi


def swap(capacity, pool, cost=0.0, **kw):
    return q.KV(capacity_tokens=capacity, preemption="swap", swap_tokens=pool,
                swap_seconds_per_token=cost, **kw)


def test_a_swapped_request_resumes_without_recompute_and_pays_the_move():
    # TWO (4 + 4 each) in 10 tokens, as tests/test_kv_engine.py: at t2 A's decode
    # needs a token with none free, so B (the latest start, KV 5) is swapped out;
    # A decodes alone until it leaves; then B comes back with its 5 tokens and
    # its 3 remaining decodes: no prefill again (recompute would run "Bp5").
    # Each move costs 0.1 s per token: t2 and t5 last 1 + 5 * 0.1 = 1.5 s.
    r = run(TWO, kv=swap(10, 10, cost=0.1))
    assert labels(r) == ["Ap4 Bp4", "A B", "A", "A", "A", "B", "B", "B"]
    assert [seconds(b.duration) for b in r.batch_log] == [1, 1, 1.5, 1, 1, 1.5, 1, 1]
    a, b = sorted(r.request_log, key=lambda x: x.rid)
    assert seconds(a.finished) == 5.5 and seconds(b.finished) == 9.0
    assert seconds(b.first_token) == 2 and seconds(b.prefill_done) == 1
    # KV after allocation: B holds nothing on the GPU while swapped (t2-t4)
    assert [tuple(k) for k in r.kv_log] == [
        (8, 8, 0, 0, 2), (10, 10, 0, 0, 0), (6, 6, 1, 0, 0), (7, 7, 0, 0, 0),
        (8, 8, 0, 0, 0), (6, 6, 0, 0, 0), (7, 7, 0, 0, 0), (8, 8, 0, 0, 0)]
    # tokens: each request processed exactly vp + vd = 8, nothing twice
    served = {0: 0, 1: 0}
    for batch in r.batch_log:
        for rid in batch.decode:
            served[rid] += 1
        for rid, n in batch.prefill:
            served[rid] += n
    assert served == {0: 8, 1: 8}
    # B holds 4, 5, (swapped: 0, 0, 0), 6, 7, 8: g = 30, as if never preempted
    assert [(m.preemptions, m.recomputed_tokens, m.memory_area) for m in r.request_memory()] \
        == [(0, 0, 30), (1, 0, 30)]
    assert b.memory.swaps == 1 and not b.memory.swapped
    s = r.summary
    assert (s["preemptions"], s["recomputed_tokens"], s["recompute_fraction"]) == (1, 0, 0)
    assert (s["swap_outs"], s["swapped_out_tokens"], s["swap_ins"], s["swapped_in_tokens"],
            s["swap_fallbacks"], s["swap_max"]) == (1, 5, 1, 5, 0, 5)
    assert s["swap_seconds"] == pytest.approx(1.0)
    # the backlog keeps B's tokens (16 in, 10 processed at t2): no recompute work
    assert (2e9, 2, 6) in r.series


def test_no_new_start_while_a_request_is_swapped():
    # As above, plus C (1 + 1) arriving at t2.5.  From t3 on 4 or more blocks are
    # free, enough for C's first token, but B is swapped: C waits.  At t5 B comes
    # back (that choice began with B swapped: still no start), and C starts at t6.
    r = run(TWO + [(2.5, 1, 1)], kv=swap(10, 10))
    assert labels(r) == ["Ap4 Bp4", "A B", "A", "A", "A", "B", "B+Cp1", "B C"]
    assert [k.new_starts for k in r.kv_log] == [2, 0, 0, 0, 0, 0, 1, 0]


def test_a_full_swap_pool_falls_back_to_recompute():
    # a pool of 4 tokens cannot hold B's 5: B is recomputed exactly as with
    # preemption="recompute" (test_kv_engine), and nothing moves, so no cost
    r = run(TWO, kv=swap(10, 4, cost=0.1))
    assert labels(r) == ["Ap4 Bp4", "A B", "A", "A", "A", "Bp5", "B", "B", "B"]
    assert [seconds(b.duration) for b in r.batch_log] == [1] * 9
    s = r.summary
    assert (s["preemptions"], s["swap_outs"], s["swap_fallbacks"], s["recomputed_tokens"]) == \
        (1, 0, 1, 5)
    assert s["swap_seconds"] == 0


def test_swapped_requests_come_back_oldest_swap_out_first_as_the_latest_start():
    # A (4 + 8), B and C (4 + 4) in 14 tokens.
    # t1: decodes need 3, 2 free: A, B fit, C (latest start) is its own victim:
    #     swapped with 4 tokens.  t2, t3: A B (12, 14); C needs 4 + 1 > free.
    # t4: A needs 1, none free: B (KV 7) is swapped.  Line: C, B.
    # t5: A takes 1 of 6 free; C (head) needs 5 = the 5 left: back, with a decode.
    # t6: A needs 1, none free: C, now the latest start, is swapped again.  Line: B, C.
    # t7, t8: B (head) needs 7 + 1 > free: nobody comes back (head of line).
    # t9: A has left: B (8) then C (6) come back, in that order.
    r = run([(0.0, 4, 8), (0.0, 4, 4), (0.0, 4, 4)], kv=swap(14, 100))
    assert labels(r) == ["Ap4 Bp4 Cp4", "A B", "A B", "A B", "A", "A C", "A", "A", "A",
                         "B C", "C", "C"]
    assert [k.preemptions for k in r.kv_log] == [0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0]
    s = r.summary
    assert (s["swap_outs"], s["swapped_out_tokens"], s["swap_ins"], s["swap_max"]) == \
        (3, 4 + 7 + 5, 3, 7 + 5)
    assert s["recomputed_tokens"] == 0
    assert [m.memory_area for m in r.request_memory()] == [q.kv_area(4, 8), 30, 30]


def test_swap_keeps_a_run_that_never_preempts_identical():
    # with room for everything, swap changes nothing (it is only a preemption mode)
    rows = [(0.0, 30, 7), (0.5, 12, 3), (1.5, 40, 5)]
    plain = run(rows, kv=q.KV(capacity_tokens=1000))
    swapped = run(rows, kv=swap(1000, 50, cost=1.0))
    assert swapped.batch_log == plain.batch_log and swapped.kv_log == plain.kv_log
    assert swapped.summary["swap_outs"] == 0


def skip_case(seed):
    """Run a random swap configuration with and without skip-ahead; assert the
    two agree and return the swap-outs it made (None if it stalled)."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(rng.randint(5, 50)):
        t += rng.expovariate(rng.choice([8.0, 30.0, 100.0]))
        rows.append((round(t, 3), rng.randint(1, 200), rng.randint(1, 150)))
    block = rng.choice([1, 16])
    kv = q.KV(capacity_tokens=rng.randint(350, 700) * block, block_size=block,
              admission=rng.choice(["lazy", "prompt"]), preemption="swap",
              swap_tokens=rng.choice([block, 500 * block, 10**6]),
              swap_seconds_per_token=rng.choice([0.0, 1e-4]))
    kw = dict(bmax=rng.choice([None, 64, 256]), kmax=rng.choice([None, 50]), kv=kv,
              latency=rng.choice([q.Constant(0.01), q.Staircase()]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fast, slow = both(rows, "sarathi", **kw)
    except Stalled:
        return None
    assert_same(fast, slow)
    return fast.summary["swap_outs"]


def test_skip_ahead_is_exact_with_swap():
    swaps = [skip_case(seed) for seed in range(12)]
    assert sum(n or 0 for n in swaps) > 50  # the cases do swap


# -- peak admission with max_tokens ------------------------------------------

def test_peak_with_max_tokens_reserves_the_cap_for_every_request():
    # 18 tokens, cap 10: A reserves 10 blocks, B needs 10 with 8 free: it waits
    # for A, where reserving vp + vd = 8 each would run both at once.  C (6 + 6
    # = 12 > 10) could never be served under that reservation: ignored, warned.
    rows = TWO + [(0.0, 6, 6)]
    with pytest.warns(UserWarning, match="max_tokens=10"):
        r = run(rows, kv=q.KV(capacity_tokens=18, admission="peak", max_tokens=10))
    assert labels(r) == ["Ap4", "A", "A", "A", "A", "Bp4", "B", "B", "B", "B"]
    assert [k.kv_blocks for k in r.kv_log] == [10] * 10
    assert [k.kv_tokens for k in r.kv_log] == [4, 5, 6, 7, 8] * 2
    s = r.summary
    assert (s["completed"], s["ignored"], s["preemptions"]) == (2, 1, 0)
    assert s["kv_utilization"] == pytest.approx(10 / 18)
    uncapped = run(TWO, kv=q.KV(capacity_tokens=18, admission="peak"))
    assert labels(uncapped)[:2] == ["Ap4 Bp4", "A B"]


def test_max_tokens_counts_in_blocks():
    # blocks of 4: a cap of 10 tokens reserves ceil(10 / 4) = 3 blocks
    r = run(TWO, kv=q.KV(num_blocks=6, block_size=4, admission="peak", max_tokens=10))
    assert labels(r)[:2] == ["Ap4 Bp4", "A B"]  # 3 + 3 blocks of 6
    assert {k.kv_blocks for k in r.kv_log} == {6}


@pytest.mark.parametrize("kwargs, message", [
    ({"preemption": "swap"}, "swap' needs a swap pool: swap_tokens must be an integer >= 1"),
    ({"preemption": "swap", "swap_tokens": 0}, "swap_tokens must be an integer >= 1"),
    ({"preemption": "swap", "swap_tokens": 3, "block_size": 4, "capacity_tokens": 16},
     r"swap_tokens \(kv_swap on the command line\) must hold at least one block"),
    ({"swap_tokens": 100}, "swap_tokens and swap_seconds_per_token need preemption='swap'"),
    ({"swap_seconds_per_token": 0.1}, "need preemption='swap'"),
    ({"preemption": "swap", "swap_tokens": 10, "swap_seconds_per_token": -1.0},
     "swap_seconds_per_token must be a number >= 0"),
    ({"admission": "peak", "max_tokens": 0}, "max_tokens must be an integer >= 1"),
    ({"max_tokens": 50}, "max_tokens is the reservation of admission='peak'"),
    ({"admission": "prompt", "max_tokens": 50}, "max_tokens is the reservation"),
    ({"admission": "peak", "max_tokens": 101}, "max_tokens must fit the cache"),
])
def test_bad_swap_and_max_tokens_settings_name_the_parameter(kwargs, message):
    kwargs = {"capacity_tokens": 100, **kwargs}
    with pytest.raises(ValueError, match=message):
        q.KV(**kwargs)


# -- networks of engines with KV caches --------------------------------------

def test_an_engine_backlog_counts_recompute_work_and_not_swapped_kv():
    # the routers read Engine.backlog: after B's preemption at t2 (10 of 16
    # tokens processed) it holds B's 5 tokens to redo under recompute (SPEC 7.7),
    # none under swap
    for kv, backlog in ((q.KV(capacity_tokens=10), 16 - 10 + 5), (swap(10, 10), 16 - 10)):
        env = simpy.Environment()
        engine = Engine(env, Sarathi(), bmax=None, kmax=None, latency=q.Constant(1.0), kv=kv)
        engine.call(4, 4)
        engine.call(4, 4)
        env.run(until=2.5e9)
        assert (engine.pending, engine.backlog) == (2, backlog)


def test_each_replica_of_a_pool_has_its_own_cache():
    # round-robin over two replicas: each engine's run is the single-engine run
    # of the arrivals it was sent, with a cache of its own
    rng = random.Random(4)
    rows = [(i + 0.5, rng.randint(1, 60), rng.randint(1, 40)) for i in range(0, 40, 2)]
    kv = q.KV(capacity_tokens=120, preemption="swap", swap_tokens=60)
    net = q.Network(batches=True)
    net.add_replicas("e", 2, "round-robin", bmax=64, kmax=None, latency=q.Constant(1.0), kv=kv)
    net.feed("e", q.from_list(rows))
    result = net.run()
    for i in range(2):
        mine = result.engines[f"e-{i}"]
        sent = sorted(x.arrival for x in mine.request_log)
        assert len(sent) == len(rows) // 2  # every other arrival
        alone = q.simulate(q.from_list([row for row in rows if row[0] * 1e9 in sent]),
                           "sarathi", bmax=64, kmax=None, latency=q.Constant(1.0), kv=kv,
                           batches=True)
        assert mine.batch_log == alone.batch_log and mine.kv_log == alone.kv_log
        for key in ("preemptions", "recomputed_tokens", "kv_max", "swap_outs", "swap_ins",
                    "ignored", "memory_area_mean"):
            assert mine.summary[key] == alone.summary[key], key
        # the network's run lasts until its last engine is done: same KV integral
        assert mine.summary["kv_mean"] * mine.summary["duration"] == \
            pytest.approx(alone.summary["kv_mean"] * alone.summary["duration"])
    engines = [result.engines["e-0"].summary, result.engines["e-1"].summary]
    assert sum(s["preemptions"] for s in engines) > 0  # memory bound somewhere
    total = result.total.summary
    assert total["arrivals"] == len(rows) == total["completed"] + total["ignored"]
    for key in ("preemptions", "swap_outs", "recomputed_tokens", "ignored"):
        assert total[key] == sum(s[key] for s in engines)
    assert result.total.params["engines"] == ["e-0", "e-1"]


def test_a_network_without_kv_reports_no_memory():
    net = q.Network()
    net.add_replicas("e", 2, latency=q.Constant(1.0))
    net.feed("e", q.from_list([(0.0, 5, 5), (0.5, 5, 5)]))
    result = net.run()
    assert "preemptions" not in result.total.summary
    assert "preemptions" not in result.engines["e-0"].summary


# -- the command line ----------------------------------------------------------

def test_the_cli_keys_reach_the_cache(capsys):
    p = {"kv": 1000, "kv_block": 4, "kv_admission": "lazy", "kv_preemption": "swap",
         "kv_restart": "keep", "kv_watermark": None, "kv_swap": 400, "kv_swap_cost": 1e-6,
         "kv_max_tokens": None}
    assert kv_of(p) == q.KV(capacity_tokens=1000, block_size=4, preemption="swap",
                            swap_tokens=400, swap_seconds_per_token=1e-6)
    assert main(["run", "single", "--set", "kv=30000", "--set", "kv_preemption=swap",
                 "--set", "kv_swap=20000", "--set", "kv_swap_cost=0.000001",
                 "--horizon", "60", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["swap_outs"] > 0 and row["recomputed_tokens"] == 0
    assert row["swap_seconds"] == pytest.approx(
        1e-6 * (row["swapped_out_tokens"] + row["swapped_in_tokens"]))
    for setting, message in ((["kv=1000", "kv_max_tokens=100"], "max_tokens is the reservation"),
                             (["kv_swap=100"], "kv_swap needs a KV cache"),
                             (["kv=1000", "kv_swap=100"], "need preemption='swap'")):
        argv = ["run", "single", "--horizon", "5"]
        for s in setting:
            argv += ["--set", s]
        assert main(argv) == 2
        assert message in capsys.readouterr().err
