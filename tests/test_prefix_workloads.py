"""Workloads with prefixes (SPEC 10.5): Mooncake JSONL traces, prefix groups,
multi-turn sessions and the process that plays sessions into an engine."""

import itertools
import json
import math
import os
import warnings
from collections import Counter

import numpy as np
import pytest
import simpy

import llmqueue as q
from llmqueue.common.units import to_ticks
from llmqueue.engine.errors import RequestIgnored
from llmqueue.engine.sessions import feed_sessions
from llmqueue.models import Geometric, PrefixGroups, Sessions, compose, zipf_popularity
from llmqueue.models.arrivals import Poisson, Renewal
from llmqueue.models.prefixes import BlockIds
from llmqueue.models.traces import read_trace
from llmqueue.theory.prefix import ideal_hit_ratio

MOONCAKE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                        "shared", "traces", "mooncake")


# --- Mooncake JSONL ------------------------------------------------------------------------

def line(ts, vp, vd, ids):
    return json.dumps({"timestamp": ts, "input_length": vp, "output_length": vd,
                       "hash_ids": ids}) + "\n"


def jsonl(tmp_path, text, name="t.jsonl"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SMALL = (line(0, 1030, 7, [0, 1, 2]) + "\n" + line(3000, 600, 2, [0, 5])
         + line(1500, 512, 1, [0]))


def test_mooncake_file_is_read_exactly(tmp_path):
    trace = read_trace(jsonl(tmp_path, SMALL))
    assert trace.format == "mooncake" and trace.hash_block == 512 and len(trace) == 3
    # sorted by time (stable); ms become seconds
    assert trace.times.tolist() == [0.0, 1.5, 3.0]
    assert trace.prefill.tolist() == [1030, 512, 600] and trace.decode.tolist() == [7, 1, 2]
    assert trace.blocks == [(0, 1, 2), (0,), (0, 5)] and trace.classes is None
    work = trace.workload()
    assert list(work) == [q.Arrival(0.0, 1030, 7, None, (0, 1, 2), None, 512),
                          q.Arrival(1.5, 512, 1, None, (0,), None, 512),
                          q.Arrival(3.0, 600, 2, None, (0, 5), None, 512)]
    assert list(work) == list(work)  # replayable
    assert work.hash_block == 512 and work.count == 3


def test_mooncake_figures_are_those_of_the_same_csv_trace(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("arrival,prefill,decode\n0,1030,7\n3,600,2\n1.5,512,1\n")
    ours, theirs = read_trace(jsonl(tmp_path, SMALL)).workload(), q.read_csv(str(csv))
    assert [a[:4] for a in ours] == [a[:4] for a in theirs]
    for name in ("count", "rate", "mean_prefill", "mean_decode"):
        assert getattr(ours, name) == getattr(theirs, name)
    assert ours.description == f"3 requests of {tmp_path / 't.jsonl'} (mooncake)"
    # limit and rate keep each request's ids with it
    trace = read_trace(jsonl(tmp_path, SMALL))
    part = list(trace.workload(limit=2, rate=2.0))
    assert [a.blocks for a in part] == [(0, 1, 2), (0,)] and part[1].time == pytest.approx(0.5)


def test_mooncake_format_hash_block_and_extension(tmp_path):
    other = jsonl(tmp_path, SMALL, "t.trace")
    assert read_trace(other, format="mooncake").blocks == [(0, 1, 2), (0,), (0, 5)]
    with pytest.raises(ValueError, match="header must be"):
        read_trace(other)  # no .jsonl: read as CSV
    upper = jsonl(tmp_path, SMALL, "T.JSONL")
    assert read_trace(upper, hash_block=256).hash_block == 256
    assert read_trace(upper, hash_block=256).workload().hash_block == 256
    with pytest.raises(ValueError, match="header must be"):
        read_trace(upper, format="csv")
    csv = tmp_path / "a.csv"
    csv.write_text("arrival,prefill,decode\n0,1,1\n")
    with pytest.raises(ValueError, match="hash_block applies to Mooncake"):
        read_trace(str(csv), hash_block=16)
    with pytest.raises(ValueError, match="format must be one of"):
        read_trace(str(csv), format="parquet")
    with pytest.raises(ValueError, match="hash_block must be an integer >= 1"):
        read_trace(upper, hash_block=0)
    # a CSV format named outright must be the one of the header
    assert read_trace(str(csv), format="generic").format == "generic"
    with pytest.raises(ValueError, match=r"a.csv:1: format='azure-2023'.*'generic'"):
        read_trace(str(csv), format="azure-2023")


@pytest.mark.parametrize("mode, decodes", [("one", [1, 4]), ("drop", [4])])
def test_mooncake_zero_outputs_as_the_csv_reader(tmp_path, mode, decodes):
    path = jsonl(tmp_path, line(0, 10, 0, [1]) + line(5, 20, 4, [2]))
    trace = read_trace(path, zero_decode=mode)
    assert trace.decode.tolist() == decodes and trace.zero_decode_rows == 1
    assert len(trace.blocks) == len(decodes)
    with pytest.raises(ValueError, match=r"t.jsonl:1: output_length must be an integer >= 1"):
        read_trace(path, zero_decode="error")


@pytest.mark.parametrize("text, fragment", [
    ('{"timestamp": 0, "input_length": 5', "not valid JSON"),
    ("[1, 2, 3]", "expected a JSON object"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "missing key 'hash_ids'"),
    ('{"input_length": 5, "output_length": 1, "hash_ids": []}', "missing key 'timestamp'"),
    (line(0, -5, 1, [1]), "input_length must be a whole number of tokens"),
    (line(0, 5, -1, [1]), "output_length must be a whole number of tokens"),
    (line(0, 5.5, 1, [1]), "input_length must be a whole number"),
    (line(0, True, 1, [1]), "input_length must be a whole number"),
    (line(-1, 5, 1, [1]), "timestamp must be a number of milliseconds"),
    (line("0", 5, 1, [1]), "timestamp must be a number of milliseconds"),
    (line(0, 5, 1, "0 1"), "hash_ids must be a list of integers"),
    (line(0, 5, 1, {"a": 1}), "hash_ids must be a list of integers"),
    (line(0, 5, 1, [1, "b"]), "hash_ids must be a list of integers"),
    (line(0, 5, 1, [1, 2.0]), "hash_ids must be a list of integers"),
    ("[" * 100000, "not valid JSON"),
])
def test_a_malformed_line_is_one_line_naming_file_and_line(tmp_path, text, fragment):
    path = jsonl(tmp_path, line(0, 5, 1, [1]) + "\n" + text.rstrip("\n") + "\n")
    with pytest.raises(ValueError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: ") and fragment in message and "\n" not in message


def test_mooncake_whole_float_lengths_are_read(tmp_path):
    trace = read_trace(jsonl(tmp_path, line(0.5, 12.0, 3.0, [7])))
    assert trace.prefill.tolist() == [12] and trace.times.tolist() == [0.0005]


def test_mooncake_size_limit_as_for_csv(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMQUEUE_MAX_REQUESTS", "2")
    three = jsonl(tmp_path, line(0, 5, 1, [1]) * 3)
    with pytest.raises(ValueError, match="limit is 2 requests per run"):
        read_trace(three)
    # blank lines are no requests
    assert len(read_trace(jsonl(tmp_path, line(0, 5, 1, [1]) * 2 + "\n\n  \n", "b.jsonl"))) == 2


@pytest.mark.parametrize("name, count, mean_input, mean_output, ideal", [
    ("conversation_trace.jsonl", 12031, 12035, 343, 0.3733),
    ("synthetic_trace.jsonl", 3993, 15325, 149, 0.6504)])
def test_the_real_mooncake_files(name, count, mean_input, mean_output, ideal):
    path = os.path.join(MOONCAKE, name)
    if not os.path.isfile(path):
        pytest.skip(f"{MOONCAKE} holds no {name}")
    trace = read_trace(path)
    assert len(trace) == count and trace.format == "mooncake" and trace.zero_decode_rows == 0
    assert trace.prefill.mean() == pytest.approx(mean_input, abs=0.5)
    assert trace.decode.mean() == pytest.approx(mean_output, abs=0.5)
    # one id per 512 tokens, the last maybe partial
    assert [len(b) for b in trace.blocks] == [-(-int(vp) // 512) for vp in trace.prefill]
    work = trace.workload()
    assert work.count == count and work.mean_prefill == pytest.approx(trace.prefill.mean())
    assert ideal_hit_ratio(work, hash_block=512) == pytest.approx(ideal, abs=5e-5)


# --- prefix groups --------------------------------------------------------------------------

def test_zipf_popularity_is_the_theory_one():
    assert q.theory.zipf_popularity is zipf_popularity
    assert zipf_popularity(2, 1.0) == pytest.approx((2 / 3, 1 / 3))


def test_block_ids_by_hand():
    ids = BlockIds(groups=2, shared=3)
    assert ids.blocks(1, 3) == (3, 4, 5)          # the group's alone
    assert ids.blocks(1, 5) == (3, 4, 5, 6, 7)    # fresh ones from G * shared = 6
    assert ids.blocks(0, 4) == (0, 1, 2, 8)
    assert BlockIds(groups=5, shared=0).blocks(3, 2) == (0, 1)


def test_prefix_groups_ids_by_hand():
    # S = 40 tokens, H = 16: two shared blocks (the third straddles the suffix: fresh)
    w = PrefixGroups(groups=3, zipf=0.0, shared=40, suffix=30, decode=5, rate=2.0, count=50,
                     seed=4)
    shared = {g: (2 * g, 2 * g + 1) for g in range(3)}
    fresh = []
    for a in w:
        assert (a.prefill, a.decode, a.hash_block, a.out_blocks) == (70, 5, 16, None)
        assert len(a.blocks) == 70 // 16 == 4
        assert a.blocks[:2] in shared.values() and a.blocks[0] % 2 == 0
        fresh.extend(a.blocks[2:])
    assert fresh == list(range(6, 6 + 2 * 50))  # handed out in order, never reused
    # a shared part shorter than a block shares nothing; one exactly of blocks shares all
    assert [a.blocks for a in PrefixGroups(2, 1.0, 10, 6, 1, rate=1.0, count=2)] == [(0,), (1,)]
    whole = list(PrefixGroups(1, 1.0, 32, 0, 1, rate=1.0, count=3, hash_block=8))
    assert [a.blocks for a in whole] == [(0, 1, 2, 3)] * 3


def test_prefix_groups_are_composes_times_and_sizes_plus_the_shared_part():
    suffix, decode = Geometric(20), Geometric(8)
    w = PrefixGroups(4, 1.0, 100, suffix, decode, rate=3.0, count=200, seed=9)
    base = compose(Poisson(3.0), suffix, decode, count=200, seed=9)
    assert [(a.time, a.prefill, a.decode) for a in w] == [
        (b.time, 100 + b.prefill, b.decode) for b in base]
    assert w.rate == 3.0 and w.count == 200 and w.hash_block == 16
    assert w.mean_prefill == 120.0 and w.mean_decode == 8.0
    assert w.shared_blocks == 6 and w.popularity == zipf_popularity(4, 1.0)
    assert "G=4" in w.description and repr(w).startswith("PrefixGroups(")
    assert isinstance(w, q.Workload)


def test_prefix_groups_are_the_same_per_seed_whatever_the_count():
    def make(seed, count):
        return list(PrefixGroups(5, 1.0, 64, Geometric(30), Geometric(10), rate=1.0,
                                 count=count, seed=seed))

    first = make(1, 300)
    assert first == make(1, 300) and first[:100] == make(1, 100)
    assert first != make(2, 300)
    endless = PrefixGroups(5, 1.0, 64, Geometric(30), Geometric(10), rate=1.0, seed=1)
    assert endless.count is None and list(itertools.islice(endless, 300)) == first


def test_prefix_groups_follow_zipf():
    n, s = 20000, 1.0
    w = PrefixGroups(groups=4, zipf=s, shared=16, suffix=1, decode=1, rate=1.0, count=n, seed=3)
    seen = Counter(a.blocks[0] for a in w)  # one shared block: the group's id is g
    for g, p in enumerate(zipf_popularity(4, s)):
        assert abs(seen[g] / n - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_prefix_groups_other_arrival_laws_and_initial():
    w = PrefixGroups(2, 1.0, 32, 8, 2, rate=4.0, arrivals="renewal", count=3)
    assert [a.time for a in w] == [0.25, 0.5, 0.75]
    law = PrefixGroups(2, 1.0, 32, 8, 2, arrivals=Renewal(0.5), count=4, initial=2)
    assert [a.time for a in law] == [0.0, 0.0, 0.5, 1.0] and law.initial == 2
    with pytest.raises(ValueError, match="rate must be given"):
        PrefixGroups(2, 1.0, 32, 8, 2)
    with pytest.raises(ValueError, match="not with the law"):
        PrefixGroups(2, 1.0, 32, 8, 2, rate=1.0, arrivals=Renewal(0.5))
    with pytest.raises(ValueError, match="arrivals must be renewal, poisson or gamma"):
        PrefixGroups(2, 1.0, 32, 8, 2, rate=1.0, arrivals="weibull")


@pytest.mark.parametrize("args, options, match", [
    ((0, 1.0, 32, 8, 2), {}, "groups"),
    ((2, -1.0, 32, 8, 2), {}, "zipf must be"),
    ((2, 1.0, -1, 8, 2), {}, "shared"),
    ((2, 1.0, 32, -8, 2), {}, "suffix"),
    ((2, 1.0, 32, 8, 2), {"hash_block": 0}, "hash_block"),
    ((2, 1.0, 32, 8, 2), {"count": 0}, "count"),
    ((2, 1.0, 32, 8, 2), {"seed": -1}, "seed"),
])
def test_prefix_groups_refuse_bad_input(args, options, match):
    with pytest.raises(ValueError, match=match):
        PrefixGroups(*args, rate=1.0, **options)


def test_prefix_groups_ideal_hit_by_hand():
    # renewal: every request after its group's first hits all 4 shared blocks (64 tokens)
    w = PrefixGroups(2, 1.0, 64, 16, 1, rate=1.0, arrivals="renewal", count=40, seed=5)
    groups = {a.blocks[0] for a in w}
    assert ideal_hit_ratio(w, hash_block=16) == pytest.approx(64 * (40 - len(groups)) / (80 * 40))


# --- sessions -------------------------------------------------------------------------------

def laws(**options):
    settings = dict(rate=0.5, sessions=300, turns=Geometric(4), think=10.0,
                    message=Geometric(40), decode=Geometric(30), system=100, groups=3,
                    zipf=1.0, seed=2, hash_block=16)
    settings.update(options)
    return Sessions(**settings)


def test_session_ids_by_hand():
    # S = 20, H = 8: blocks 0 and 1 (tokens 0-15) are the group's; block 2 straddles
    s = Sessions(rate=1.0, sessions=2, turns=2, think=1.0, message=6, decode=13, system=20,
                 groups=2, zipf=0.0, hash_block=8, seed=0)
    first, second = list(s)
    g = first.group
    assert first.turns[0].blocks[:2] == (2 * g, 2 * g + 1)
    own = 4  # fresh ids start after 2 groups x 2 blocks
    # turn 1: vp 26 -> 3 full blocks; its 13 output tokens take the transcript to 39,
    # completing block 3 alone (26 < (j+1) 8 <= 39)
    t1, t2 = first.turns
    assert (t1.prefill, t1.decode, t1.think) == (26, 13, 0.0)
    assert t1.blocks == (2 * g, 2 * g + 1, own) and t1.out_blocks == (own + 1,)
    # turn 2: 26 + 13 + 6 = 45 -> 5 blocks; output to 58 completes blocks 5 and 6 (48, 56)
    assert (t2.prefill, t2.decode) == (45, 13) and t2.think > 0
    assert t2.blocks == t1.blocks + t1.out_blocks + (own + 2,)
    assert t2.out_blocks == (own + 3, own + 4)
    # the second session's own ids follow the first's: 58 // 8 = 7 blocks, 5 fresh
    assert second.turns[0].blocks[2] == own + 5 and second.sid == 1
    assert second.start > first.start > 0


def test_session_transcripts_hold_for_random_laws():
    s = laws()
    owners = {}
    n = s.system // s.hash_block
    for session in s:
        h, g = s.hash_block, session.group
        assert session.turns[0].think == 0 and len(session.turns) >= 1
        previous = None
        for turn in session.turns:
            assert len(turn.blocks) == turn.prefill // h and turn.decode >= 1
            assert len(turn.out_blocks) == (turn.prefill + turn.decode) // h - turn.prefill // h
            assert turn.blocks[:n] == tuple(range(g * n, (g + 1) * n))
            if previous is not None:
                assert turn.prefill > previous.prefill + previous.decode  # messages >= 1
                assert turn.blocks[:len(previous.blocks) + len(previous.out_blocks)] == \
                    previous.blocks + previous.out_blocks
            previous = turn
        for i in session.turns[-1].blocks[n:] + session.turns[-1].out_blocks:
            assert owners.setdefault(i, session.sid) == session.sid  # never another's
            assert i >= s.groups * n


def test_sessions_are_the_same_per_seed_whatever_the_count():
    assert list(laws()) == list(laws())
    assert list(laws())[:50] == list(laws(sessions=50))
    assert list(laws()) != list(laws(seed=3))
    endless = laws(sessions=None)
    assert endless.count is None and list(itertools.islice(endless, 300)) == list(laws())


def test_session_figures_against_their_draws():
    s = laws(sessions=6000, zipf=1.0)
    scripts = list(s)
    turns = [t for session in scripts for t in session.turns]
    assert s.count == 6000 and s.rate == 0.5 and s.hash_block == 16
    assert s.mean_turns == 4.0 and s.request_rate == 2.0 and s.mean_decode == 30.0
    # E[T^2] = 4 * 3 + 16 = 28: S + 40 * 32 / 8 + 30 * 24 / 8
    assert s.mean_prefill == pytest.approx(100 + 160 + 90)
    assert len(turns) / len(scripts) == pytest.approx(4.0, rel=0.05)
    assert np.mean([t.prefill for t in turns]) == pytest.approx(s.mean_prefill, rel=0.05)
    assert np.mean([t.decode for t in turns]) == pytest.approx(30.0, rel=0.05)
    thinks = [t.think for session in scripts for t in session.turns[1:]]
    assert np.mean(thinks) == pytest.approx(10.0, rel=0.05)
    starts = [session.start for session in scripts]
    assert np.all(np.diff(starts) > 0) and len(starts) / starts[-1] == pytest.approx(0.5, rel=0.05)
    seen = Counter(session.group for session in scripts)
    for g, p in enumerate(zipf_popularity(3, 1.0)):
        assert abs(seen[g] / 6000 - p) < 4 * math.sqrt(p * (1 - p) / 6000)


def test_sessions_draws_of_zero_and_defaults():
    s = Sessions(rate=1.0, sessions=3, turns=0, message=0, decode=0)
    for session in s:
        (turn,) = session.turns  # a draw of 0 turns gives 1
        assert (turn.prefill, turn.decode, turn.blocks, turn.out_blocks) == (0, 1, (), ())
    assert s.mean_turns == 1.0 and s.mean_prefill == 0.0 and s.mean_decode == 1.0
    assert s.hash_block == 16 and "sessions at 1/s" in repr(s)


@pytest.mark.parametrize("options, match", [
    ({"rate": 0}, "rate"), ({"sessions": 0}, "sessions"), ({"think": -1.0}, "think"),
    ({"think": math.inf}, "think"), ({"system": -1}, "system"), ({"groups": 0}, "groups"),
    ({"zipf": -0.5}, "zipf must be"), ({"hash_block": 0}, "hash_block"), ({"turns": -1}, "turns"),
    ({"message": -1}, "message"), ({"seed": -1}, "seed")])
def test_sessions_refuse_bad_input(options, match):
    with pytest.raises(ValueError, match=match):
        laws(**options)


# --- playing sessions -----------------------------------------------------------------------

class Server:
    """A fake engine: each request takes ``service`` seconds; requests whose
    prompt exceeds ``fits`` can never fit."""

    def __init__(self, env, service=1.0, fits=None):
        self.env, self.service, self.fits, self.sent = env, service, fits, []

    def send(self, r):
        self.sent.append((self.env.now, r))
        if self.fits is not None and r.vp > self.fits:
            event = self.env.event()
            event.fail(RequestIgnored("fake", r.rid))
            event.defused = True
            return event
        return self.env.timeout(to_ticks(self.service), r)


def test_feed_plays_turns_after_think_times_in_closed_loop():
    env = simpy.Environment()
    server = Server(env, service=2.0)
    s = laws(sessions=20)
    ended = []
    log = feed_sessions(env, server.send, s, on_end=lambda: ended.append(env.now))
    env.run()
    scripts = list(s)
    turns = sum(len(x.turns) for x in scripts)
    assert log.figures() == {"sessions_started": 20, "sessions_completed": 20,
                             "sessions_cut": 0, "turns_sent": turns}
    assert [r.rid for _, r in server.sent] == list(range(turns))  # in submission order
    assert ended == [max(t for t, _ in server.sent)]  # at the last submission, once
    for script in scripts:
        sent = [(t, r) for t, r in server.sent if r.session == script.sid]
        expected = to_ticks(script.start)
        for (t, r), turn in zip(sent, script.turns):
            if turn is not script.turns[0]:
                expected += to_ticks(2.0) + to_ticks(turn.think)
            assert t == expected
            assert (r.vp, r.vd, r.hash_block) == (turn.prefill, turn.decode, 16)
            assert r.ids == turn.blocks + turn.out_blocks
        assert len(sent) == len(script.turns)


def test_a_turn_that_never_fits_cuts_its_session():
    env = simpy.Environment()
    server = Server(env, service=1.0, fits=300)
    s = laws(sessions=40)
    log = feed_sessions(env, server.send, s)
    env.run()
    cut = 0
    for script in s:
        sent = [r for _, r in server.sent if r.session == script.sid]
        big = [k for k, turn in enumerate(script.turns) if turn.prefill > 300]
        if big:  # turns stop at the first that cannot fit
            cut += 1
            assert len(sent) == big[0] + 1
        else:
            assert len(sent) == len(script.turns)
    assert 0 < cut < 40 and log.sessions_cut == cut and log.sessions_completed == 40 - cut


def test_nothing_is_sent_at_or_after_the_horizon():
    env = simpy.Environment()
    server = Server(env, service=3.0)
    until = to_ticks(60.0)
    ended = []
    log = feed_sessions(env, server.send, laws(sessions=None), until=until,
                        on_end=lambda: ended.append(1))
    env.run(until=until)
    assert server.sent and all(t < until for t, _ in server.sent)
    assert log.turns_sent == len(server.sent) and not ended  # sessions never ran out
    started = {r.session for _, r in server.sent}
    assert log.sessions_started == len(started) == max(started) + 1


def test_sessions_on_an_engine_with_a_prefix_cache():
    from llmqueue.engine.kv_recorder import MemoryRecorder
    from llmqueue.engine.processes import Engine
    from llmqueue.engine.recorder import Recorder

    def run(capacity):
        env = simpy.Environment()
        kv = q.KV(capacity_tokens=capacity, block_size=16, prefix=True)
        recorder = Recorder(512)
        recorder.memory = MemoryRecorder(kv)
        engine = Engine(env, q.make_policy("sarathi"), bmax=512, kmax=None, recorder=recorder,
                        kv=kv)
        log = feed_sessions(env, engine.send, laws(sessions=60), on_end=engine.end_arrivals)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the engine warns of its first ignored request
            env.run()
        return log, engine

    log, engine = run(10**6)
    assert log.sessions_completed == 60 and log.sessions_cut == 0
    assert engine.pending == 0 and engine.arrivals_over
    small, _ = run(400)
    assert small.sessions_cut > 0
    assert small.sessions_cut + small.sessions_completed == 60
