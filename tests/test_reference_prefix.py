"""The plain reference stepper of SPEC 10.2's prefix cache
(``llmqueue.engine.reference_prefix``) on cases worked out by hand.

Every case runs ``sarathi`` with 1 s iterations (``Constant(1.0)``), no kmax and
a large budget, so an iteration's batch is easy to follow; times are in
seconds in the comments and in nanoseconds in the records.  ``H`` is the hash
block, ``B`` the KV block size, ``m = H / B``.
"""

import random
from types import SimpleNamespace

import pytest

import llmqueue as q
from llmqueue.engine.reference_prefix import run_reference_prefix
from llmqueue.policies.builtin import make_policy

S = 10**9
SARATHI = make_policy("sarathi")


def run(rows, blocks, block_size=1, sessions=(), hash_block=None, **kv):
    """The reference on ``rows`` with a cache of ``blocks`` blocks."""
    cache = q.KV(num_blocks=blocks, block_size=block_size, prefix=True, **kv)
    return run_reference_prefix(rows, SARATHI, cache, sessions=sessions, hash_block=hash_block,
                                bmax=64, kmax=None, latency=q.Constant(1.0))


def steps(ref):
    """``(start s, decodes, chunks)`` of each batch."""
    return [(b.start / S, b.decode, b.prefill) for b in ref.batches]


def check_identity(ref, blocks):
    """Each choice: in use + evictable + empty = N, nothing negative, and the
    blocks in use at the choice are the KV log's (counted after the iteration)."""
    assert len(ref.cache_log) == len(ref.kv_log)
    for row, kv_row in zip(ref.cache_log, ref.kv_log):
        assert row.in_use + row.evictable + row.empty == blocks
        assert min(row.in_use, row.evictable, row.empty) >= 0
        assert row.in_use == kv_row.kv_blocks


def test_a_second_request_hits_the_prefix_the_first_left():
    # H = 4, B = 2 (m = 2), 20 blocks.  A = 10 + 2 at 0 with ids (1, 2, 3): only
    # floor(10/4) = 2 full blocks count, ids (1, 2).  [0,1) A's prompt (kv 10: 5
    # blocks) inserts 1 and 2 (kv reaches 4 and 8); decodes [1,2), [2,3); at 3 it
    # releases both: evictable.  B = 9 + 1 at 5, ids (1, 2): h = 2 (8 <= 9), k =
    # min(2, 8 // 4) = 2: a hit of 8 tokens, 1 to compute, at [5,6); decode [6,7).
    rows = [(0.0, 10, 2, None, (1, 2, 3), None, 4), (5.0, 9, 1, None, (1, 2), None, 4)]
    ref = run(rows, 20, block_size=2)
    assert steps(ref) == [(0, (), ((0, 10),)), (1, (0,), ()), (2, (0,), ()),
                          (5, (), ((1, 1),)), (6, (1,), ())]
    assert ref.cached_tokens == {0: 0, 1: 8}
    f = ref.figures
    assert (f.prefix_hit_tokens, f.recompute_hit_tokens, f.prefill_computed_tokens,
            f.evictions, f.first_hit_tokens, f.first_prompt_tokens) == (8, 0, 11, 0, 8, 19)
    assert f.prefix_hit_ratio == 8 / 19
    # B's KV holds its hit: 9 tokens after its chunk, ceil(9/2) = 5 blocks (2 entries
    # of 2, one own); the entries count once, and A had released them
    assert [k.kv_tokens for k in ref.kv_log] == [10, 11, 12, 9, 10]
    assert [k.kv_blocks for k in ref.kv_log] == [5, 6, 6, 5, 5]
    assert [(c.in_use, c.evictable, c.empty) for c in ref.cache_log] == [
        (5, 0, 15), (6, 0, 14), (6, 0, 14), (5, 0, 15), (5, 0, 15)]
    check_identity(ref, 20)


def test_the_hit_leaves_at_least_one_token_to_compute():
    # H = 4, B = 2, 20 blocks.  A = 8 + 2 at 0, ids (1, 2): both inserted at [0,1),
    # released at 3.  B = 8 + 1 at 5, ids (1, 2): h = 2 but k = min(2, 7 // 4) = 1:
    # 4 tokens hit, 4 computed at [5,6); when its KV reaches 8, id 2 has an entry
    # already, so B keeps those 2 blocks as its own: ceil(8/2) = 4 blocks, of
    # which 2 are entry 1's; entry 2 stays evictable (2 blocks).  C = 4 + 1 at 10,
    # ids (1,): k = min(1, 3 // 4) = 0; D = 0 + 2 at 12: no prompt, no lookup.
    rows = [(0.0, 8, 2, None, (1, 2), None, 4), (5.0, 8, 1, None, (1, 2), None, 4),
            (10.0, 4, 1, None, (1,), None, 4), (12.0, 0, 2, None, (), None, 4)]
    ref = run(rows, 20, block_size=2)
    assert steps(ref)[3:5] == [(5, (), ((1, 4),)), (6, (1,), ())]
    assert ref.cached_tokens == {0: 0, 1: 4, 2: 0, 3: 0}
    assert [(c.in_use, c.evictable) for c in ref.cache_log][3:5] == [(4, 2), (5, 2)]
    assert ref.figures.prefill_computed_tokens == 8 + 4 + 4
    check_identity(ref, 20)


def test_eviction_takes_the_least_recently_used_and_the_deeper_block_first():
    # H = B = 2 (m = 1: an entry is a block), 4 blocks.  A = 4 + 1 at 0, ids
    # (a1, a2): inserted at [0,1); A finishes at 2: both evictable, last use 2.
    # B = 4 + 1 at 2.5, ids (b1, b2): its prompt takes 2 empty blocks at 2.5
    # (empty 0); its decode at 3.5 takes a third (kv 5): empty -1, evict among
    # a1 (2, depth 0) and a2 (2, depth 1) the deeper, a2.  B finishes at 4.5: b1,
    # b2 evictable at 4.5.  C = 5 + 1 at 5, no ids, takes 3 blocks: empty 4 - 3 - 3
    # = -2: evict a1 (last use 2), then b2 (4.5, deeper than b1).  D = 5 + 1 at 10,
    # ids (b1, b2): only b1 is left: h = 1, hit 2; it computes b2 again (a new
    # entry).  E = 3 + 1 at 15, ids (a1,): nothing left of A; its 2 blocks leave
    # 4 - 2 - 2 = 0 empty beside b1, b2: no eviction.
    rows = [(0.0, 4, 1, None, ("a1", "a2")), (2.5, 4, 1, None, ("b1", "b2")),
            (5.0, 5, 1), (10.0, 5, 1, None, ("b1", "b2")), (15.0, 3, 1, None, ("a1",))]
    ref = run(rows, 4, block_size=2, hash_block=2)
    assert ref.figures.evictions == 3
    assert ref.cached_tokens == {0: 0, 1: 0, 2: 0, 3: 2, 4: 0}
    # after each choice: blocks in use, evictable, entries
    assert [(c.in_use, c.evictable, c.entries) for c in ref.cache_log] == [
        (2, 0, 0), (3, 0, 2),          # A: prompt, decode (a1, a2 held)
        (2, 2, 2), (3, 1, 3),          # B: prompt; decode (a2 evicted)
        (3, 1, 1), (3, 1, 1),          # C: prompt (a1, b2 evicted), decode; b1 kept
        (3, 0, 1), (3, 0, 2),          # D: revives b1, inserts b2 again
        (2, 2, 2), (2, 2, 3)]          # E: 2 blocks, b1 and b2 kept; inserts a1
    check_identity(ref, 4)


def test_a_start_pays_for_the_evictable_entries_it_revives():
    # H = 2, B = 1 (m = 2), 10 blocks.  A = 4 + 1 at 0, ids (x1, x2): inserted at
    # [0,1); A finishes at 2: 4 evictable blocks.  F = 4 + 4 at 2.5, no ids: 4
    # blocks at 2.5, then one more per decode at 3.5, 4.5, 5.5, 6.5; it finishes
    # at 7.5.  G = 5 + 1 at 3.6, ids (x1, x2): hit 4, 1 to compute.  At 4.5 F's
    # decode leaves 10 - 6 = 4 free blocks; G needs 1 of its own plus 2 * 2 to
    # revive x1 and x2: 5 > 4, so it waits (it would fit if revival were free).
    # At 5.5 F takes its 7th block: empty 10 - 7 - 4 = -1 evicts x2 (deeper); G's
    # hit drops to 2 (prefill left 3): it needs 3 + 2 = 5 > 3 at 5.5 and > 2 at
    # 6.5.  At 7.5, F gone, G starts: hit 2, computes 3 (re-inserting x2).
    rows = [(0.0, 4, 1, None, ("x1", "x2")), (2.5, 4, 4), (3.6, 5, 1, None, ("x1", "x2"))]
    ref = run(rows, 10, hash_block=2)
    assert steps(ref) == [(0, (), ((0, 4),)), (1, (0,), ()), (2.5, (), ((1, 4),)),
                          (3.5, (1,), ()), (4.5, (1,), ()), (5.5, (1,), ()), (6.5, (1,), ()),
                          (7.5, (), ((2, 3),)), (8.5, (2,), ())]
    assert ref.cached_tokens == {0: 0, 1: 0, 2: 2}
    assert ref.figures.evictions == 1
    check_identity(ref, 10)


@pytest.mark.parametrize("admission, both", [("lazy", True), ("peak", False)])
def test_one_gate_call_revives_an_entry_once(admission, both):
    # H = 2, B = 1 (m = 2), 6 blocks.  A = 4 + 1 at 0, ids (x1, x2), done at 2:
    # x1, x2 evictable (4 blocks).  G1 and G2 = 5 + 1 at 3, ids (x1, x2): hit 4
    # each.  lazy: G1 needs 1 + 4 (revives both) of 6 free; G2 only its own 1
    # block (already revived by G1): 1 of 1: both start at 3.  peak: G1 needs
    # 6 - 4 + 4 = 6 of 6; G2 needs 6 - 4 = 2 of 0: it waits for G1's finish.
    rows = [(0.0, 4, 1, None, ("x1", "x2")), (3.0, 5, 1, None, ("x1", "x2")),
            (3.0, 5, 1, None, ("x1", "x2"))]
    ref = run(rows, 6, hash_block=2, admission=admission)
    first = ((), ((1, 1), (2, 1))) if both else ((), ((1, 1),))
    assert steps(ref)[2][1:] == first
    assert ref.cached_tokens == {0: 0, 1: 4, 2: 4}
    check_identity(ref, 6)


def test_a_preempted_request_hits_its_own_entries_at_its_restart():
    # H = 2, B = 1 (m = 2), 10 blocks, keep.  X = 3 + 3 at 0 (no ids): prompt
    # [0,1), decodes [1,2) .. [3,4).  V = 4 + 3 at 0.5, ids (v1, v2): its prompt at
    # [1,2) (8 blocks in use), inserting v1, v2; decodes at [2,3) (10 blocks).  At
    # 3 X's decode finds no block: V, the latest start, is preempted: its own
    # block and its entries (nobody else holds them: evictable) free 5.  V keeps
    # its decoded token: P = 5; at 4 (X done) its lookup finds v1, v2: k =
    # min(2, 4 // 2) = 2, a hit of 4 (its own work), 1 token recomputed.
    rows = [(0.0, 3, 3), (0.5, 4, 3, None, ("v1", "v2"))]
    ref = run(rows, 10, hash_block=2)
    assert steps(ref) == [(0, (), ((0, 3),)), (1, (0,), ((1, 4),)), (2, (0, 1), ()),
                          (3, (0,), ()), (4, (), ((1, 1),)), (5, (1,), ()), (6, (1,), ())]
    assert [k.preemptions for k in ref.kv_log] == [0, 0, 0, 1, 0, 0, 0]
    assert [(c.in_use, c.evictable) for c in ref.cache_log] == [
        (3, 0), (8, 0), (10, 0), (6, 4), (5, 0), (6, 0), (7, 0)]
    f = ref.figures
    assert (f.prefix_hit_tokens, f.recompute_hit_tokens, f.first_hit_tokens) == (4, 4, 0)
    assert ref.cached_tokens == {0: 0, 1: 0}  # the first start's hit
    assert ref.requests[1].memory.recomputed == 1
    check_identity(ref, 10)


def turn(prefill, decode, blocks, out_blocks=(), think=0.0):
    """One turn of a session script."""
    return SimpleNamespace(prefill=prefill, decode=decode, blocks=blocks,
                           out_blocks=out_blocks, think=think)


def test_decoding_completes_out_blocks_and_the_next_turn_hits_them():
    # H = 2, B = 1, 20 blocks; one session from 0.  Turn 1 = 3 + 4, ids (a1,) and
    # out_blocks (a2, a3) (positions 1 and 2: tokens [2,4) and [4,6), the second
    # half of block 1 being its first decoded token).  [0,1) prompt: kv 3, a1;
    # decodes [1,2) kv 4: a2; [2,3) kv 5; [3,4) kv 6: a3; [4,5) kv 7: done at 5.
    # Turn 2 arrives 2 s later, at 7: 8 + 1, ids (a1, a2, a3, b4): h = 3, k =
    # min(3, 7 // 2) = 3: a hit of 6, 2 to compute at [7,8) (inserting b4).
    script = SimpleNamespace(start=0.0, turns=(turn(3, 4, ("a1",), ("a2", "a3")),
                                               turn(8, 1, ("a1", "a2", "a3", "b4"), (), 2.0)))
    ref = run([], 20, sessions=[script], hash_block=2)
    assert steps(ref) == [(0, (), ((0, 3),)), (1, (0,), ()), (2, (0,), ()), (3, (0,), ()),
                          (4, (0,), ()), (7, (), ((1, 2),)), (8, (1,), ())]
    assert [c.entries for c in ref.cache_log] == [0, 1, 2, 2, 3, 3, 4]
    assert ref.cached_tokens == {0: 0, 1: 6}
    assert [(r.arrival / S, r.finished / S) for r in ref.requests] == [(0, 5), (7, 9)]
    assert ref.figures.entries_max == 4
    check_identity(ref, 20)


def test_a_never_fit_turn_ends_its_session():
    # 8 blocks: turn 2 (9 + 1) can never fit; turn 3 never comes.
    script = SimpleNamespace(start=1.0, turns=(turn(2, 1, ()), turn(9, 1, (), (), 0.5),
                                               turn(1, 1, (), (), 0.5)))
    ref = run([], 8, sessions=[script], hash_block=1)
    assert [(r.vp, r.arrival / S, r.finished) for r in ref.requests] == [
        (2, 1, 3 * S), (9, 3.5, None)]
    assert [r.memory.ignored for r in ref.requests] == [False, True]


def test_a_block_completed_twice_stays_the_other_requests_own_copy():
    # H = 2, B = 1 (m = 2), 20 blocks.  A = 4 + 1 and B = 4 + 3 at 0, ids (s1, s2):
    # nothing cached, both compute their prompts at [0,1).  When the progress is
    # applied A (first in the plan) inserts s1, s2; B finds them and keeps its 4
    # blocks as its own.  At 1: A 5 tokens (4 in entries, 1 own), B 5 own: 10 in
    # use (6 if B had deduplicated).  A finishes at 2: s1, s2 evictable (4 blocks)
    # while B still runs with its copy.  C = 5 + 1 at 5, ids (s1, s2): hit 4.
    rows = [(0.0, 4, 1, None, ("s1", "s2")), (0.0, 4, 3, None, ("s1", "s2")),
            (5.0, 5, 1, None, ("s1", "s2"))]
    ref = run(rows, 20, hash_block=2)
    assert [(c.in_use, c.evictable, c.entries) for c in ref.cache_log][:4] == [
        (8, 0, 0), (10, 0, 2), (6, 4, 2), (7, 4, 2)]
    assert ref.cached_tokens == {0: 0, 1: 0, 2: 4}
    check_identity(ref, 20)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="multiple of the block size"):
        run([(0.0, 8, 1, None, (1, 2), None, 6)], 20, block_size=4)
    with pytest.raises(ValueError, match="prefix=False"):
        run_reference_prefix([(0.0, 8, 1, None, (1, 2), None, 4)], SARATHI,
                             q.KV(capacity_tokens=64), latency=q.Constant(1.0))
    with pytest.raises(ValueError, match="one hash block"):
        run([(0.0, 8, 1, None, (1, 2), None, 4), (0.0, 8, 1, None, (1,), None, 2)], 20)


def random_case(seed):
    """Rows with shared groups and unique suffixes, a small cache."""
    rng = random.Random(seed)
    size = rng.choice([1, 2, 4])
    h = size * rng.choice([1, 2])
    rows, t = [], 0.0
    for i in range(25):
        t += round(rng.expovariate(3.0), 3)
        group = rng.randrange(3)
        vp = rng.randint(0, 40)
        ids = tuple(f"g{group}.{j}" if j < 4 else f"u{i}.{j}" for j in range(vp // h + 1))
        rows.append((t, vp, rng.randint(1, 12), None, ids, None, h))
    kv = q.KV(capacity_tokens=rng.choice([64, 96, 128]), block_size=size, prefix=True,
              admission=rng.choice(["lazy", "prompt", "peak"]),
              restart=rng.choice(["keep", "scratch"]))
    return rows, kv


@pytest.mark.filterwarnings("ignore:request .* can never fit")
@pytest.mark.parametrize("seed", range(12))
def test_random_runs_keep_the_invariants(seed):
    rows, kv = random_case(seed)
    ref = run_reference_prefix(rows, make_policy(["sarathi", "orca", "vllm"][seed % 3]), kv,
                               bmax=32, kmax=None, latency=q.Constant(0.05))
    check_identity(ref, kv.blocks)
    for r in ref.requests:  # hits never reach the whole prompt
        cached = ref.cached_tokens[r.rid]
        assert cached is None or cached <= max(r.vp - 1, 0)
    f = ref.figures
    assert f.first_hit_tokens + f.recompute_hit_tokens == f.prefix_hit_tokens
    assert f.first_hit_tokens == sum(c or 0 for c in ref.cached_tokens.values())
    done = [r for r in ref.requests if r.finished is not None]
    assert len(done) == sum(1 for r in ref.requests if not r.memory.ignored)
    # every finished request computed its prompt but for its hits
    assert f.prefill_computed_tokens == sum(b.prefill_tokens for b in ref.batches)
