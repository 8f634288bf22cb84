"""Multi-turn sessions on an engine (SPEC 10.5): closed loops with think
times, each turn hitting the transcript its previous turn left cached, and
sessions cut by a turn that can never fit."""

from collections import defaultdict

import pytest

import llmqueue as q
from llmqueue.common.units import to_ticks
from llmqueue.models import Sessions
from llmqueue.models.sizes import Geometric

H = 16


def sessions(count=40, **kw):
    kw = {"turns": Geometric(4), "think": 2.0, "message": Geometric(40),
          "decode": Geometric(30), "seed": 7, **kw}
    return Sessions(rate=0.5, sessions=count, **kw)


def by_session(result):
    turns = defaultdict(list)
    for r in sorted(result.request_log, key=lambda r: r.rid):
        turns[r.session].append(r)
    return turns


def test_each_turn_waits_for_the_last_and_hits_its_transcript():
    work = sessions()
    result = q.simulate(work, bmax=512, kmax=None, requests=True,
                        kv=q.KV(capacity_tokens=10**7, block_size=16, prefix=True))
    scripts = {s.sid: s for s in work}
    turns = by_session(result)
    assert len(turns) == 40
    assert result.summary["sessions_completed"] == 40 and result.summary["sessions_cut"] == 0
    for sid, requests in turns.items():
        script = scripts[sid].turns
        assert [(r.vp, r.vd) for r in requests] == [(t.prefill, t.decode) for t in script]
        for k in range(1, len(requests)):
            before, now = requests[k - 1], requests[k]
            # a closed loop: the next turn comes its think time after the last one ended
            assert now.arrival == before.finished + to_ticks(script[k].think)
            # an unlimited cache holds the whole transcript so far (prompt and output
            # blocks); the hit stops one token short of the prompt
            held = (before.vp + before.vd) // H
            assert now.memory.cached == min(held, (now.vp - 1) // H) * H
        assert requests[0].memory.cached == 0  # nothing is shared across sessions


def test_without_ids_the_sessions_keep_their_sizes_and_share_nothing():
    work = sessions(count=10)
    plain = q.simulate(work.without_ids(), bmax=512, kmax=None, requests=True,
                       kv=q.KV(capacity_tokens=10**7, block_size=16))
    cached = q.simulate(work, bmax=512, kmax=None, requests=True,
                        kv=q.KV(capacity_tokens=10**7, block_size=16, prefix=True))
    size = sorted((r.vp, r.vd) for r in plain.request_log)
    assert size == sorted((r.vp, r.vd) for r in cached.request_log)
    assert plain.summary["sessions_completed"] == 10
    # the cache only removes prefill work: the same requests, each done sooner or as soon
    assert cached.summary["prefill_computed_tokens"] < sum(v for v, _ in size)
    with pytest.raises(ValueError, match="prefix cache"):
        q.simulate(work, bmax=512, kv=q.KV(capacity_tokens=10**7, block_size=16))


def test_a_turn_that_can_never_fit_cuts_its_session():
    # a cache of 600 tokens, 37 whole blocks of 16 (592 tokens): transcripts outgrow it
    work = sessions(count=20, turns=8, message=60, decode=60)
    with pytest.warns(UserWarning, match="never fit"):
        result = q.simulate(work, bmax=512, kmax=None, requests=True,
                            kv=q.KV(capacity_tokens=600, block_size=16, prefix=True))
    s = result.summary
    assert s["sessions_cut"] == 20 and s["sessions_completed"] == 0
    # turn k's prompt is 60 k + 60 (k - 1) tokens, 120 k with its output: turn 4
    # (480 tokens) fits, turn 5 (600 > 592) never can
    assert s["completed"] == 20 * 4 and s["ignored"] == 20
