"""``Recorder`` on its own, driven by hand with integer-ns times.

Expected values come from SPEC section 5 (pending/backlog step functions,
per-request latencies, batch mix), SPEC section 3 (a batch is work-conserving
when its size is ``min(bmax, demand)``) and the docstrings of
``llmqueue/engine/recorder.py``, worked out on paper in the comments.
"""

import itertools

import pytest

from llmqueue.common.percentiles import percentiles
from llmqueue.engine.recorder import Recorder
from llmqueue.theory.capacity import violations
from llmqueue.policies.view import Plan, Request

NS = 1e-9  # seconds per tick


def finished_request(rid, vp, vd, arrival, first_token, finished):
    r = Request(rid, vp, vd, arrival=arrival)
    r.first_token, r.finished = first_token, finished
    return r


def one_run(rec, start, t, k, decode=(), prefill=(), demand=None, commit=True):
    """Announce ``k`` iterations of a plan; ``decode`` are requests, ``prefill``
    (request, tokens) pairs.  ``demand`` defaults to the batch size."""
    p = Plan(list(decode), list(prefill))
    d, pf = len(p.decode), p.prefill_tokens
    rec.start_run(start, t, k, p, d, pf, d + len(p.prefill), d + pf if demand is None else demand)
    if commit:
        rec.commit(start + k * t)


# -- scenario S1: one request of 3 prefill + 2 decode tokens arriving at 0 --
#
#   [0, 100)   prefill 3          backlog 5, pending 1
#   [100, 150) decode 1           backlog 2
#   [150, 200) decode 1, finish   backlog 1
#   [200, 400) idle               backlog 0, pending 0      (close at 400)
#
# backlog area = 5*100 + 2*50 + 1*50 + 0*200 = 650  -> mean 650/400 = 1.625
# pending area = 1*200                        = 200  -> mean 0.5
# first token at 150 (end of its first decode iteration): TTFT 150 ns,
# TPOT (200 - 150)/(2 - 1) = 50 ns, E2E 200 ns

def s1(decode_as_one_run=False, commit_at=None, **kw):
    rec = Recorder(128, **kw)
    r = Request(0, 3, 2, arrival=0)
    rec.arrive(0, 5)
    one_run(rec, 0, 100, 1, prefill=[(r, 3)])
    if decode_as_one_run:
        one_run(rec, 100, 50, 2, decode=[r], commit=False)
        for now in commit_at or []:
            rec.commit(now)
        rec.commit(200)
    else:
        one_run(rec, 100, 50, 1, decode=[r])
        one_run(rec, 150, 50, 1, decode=[r])
    r.first_token, r.finished = 150, 200
    rec.finish(200, r)
    return rec, r


def test_s1_summary_by_hand():
    rec, _ = s1()
    rec.close(400)
    s = rec.summary(400, waiting=0, residents=0)
    assert (s["arrivals"], s["completed"], s["batches"]) == (1, 1, 3)
    assert s["backlog_mean"] == 650 / 400 and s["pending_mean"] == 200 / 400
    assert (s["backlog_max"], s["pending_max"]) == (5, 1)
    assert (s["backlog_final"], s["pending_final"]) == (0, 0)
    # batches holding a decode: 2, with 1 decode token each
    assert s["decode_batch_mean"] == 1.0
    assert s["prefill_only_fraction"] == pytest.approx(1 / 3)
    assert s["decode_only_fraction"] == pytest.approx(2 / 3)
    assert s["mixed_fraction"] == 0.0
    # busy 100 + 50 + 50 = 200 of 400
    assert s["busy_fraction"] == 0.5
    # 5 tokens in 400 ns
    assert s["throughput_tokens_per_s"] == pytest.approx(5 / (400 * NS))
    assert s["duration"] == pytest.approx(400 * NS)
    assert s["ttft_p50"] == pytest.approx(150 * NS)
    assert s["tpot_p50"] == pytest.approx(50 * NS)
    assert s["e2e_mean"] == pytest.approx(200 * NS)
    assert s["non_work_conserving_batches"] == 0
    assert (s["waiting_final"], s["residents_final"]) == (0, 0)


def test_s1_decodes_as_one_run_give_the_same_figures():
    rec_steps, _ = s1()
    rec_run, _ = s1(decode_as_one_run=True)
    rec_pieces, _ = s1(decode_as_one_run=True, commit_at=[120, 170, 170])
    for rec in (rec_steps, rec_run, rec_pieces):
        rec.close(400)
    assert rec_run.summary(400, 0, 0) == rec_steps.summary(400, 0, 0)
    assert rec_pieces.summary(400, 0, 0) == rec_steps.summary(400, 0, 0)
    assert rec_run._backlog_area == 650 and rec_run._pending_area == 200


def test_s1_request_log_keeps_finished_requests():
    rec, r = s1(requests=True)
    assert rec.request_log == [r]
    assert Recorder(8).request_log is None


def test_commit_before_the_first_iteration_ends_does_nothing():
    rec = Recorder(128)
    rec.arrive(0, 5)
    one_run(rec, 0, 100, 3, decode=[Request(0, 0, 5)], commit=False)
    rec.commit(99)
    assert (rec.batches, rec.backlog, rec._backlog_area) == (0, 5, 0)
    rec.commit(100)
    # one iteration of 1 token: backlog 5 -> 4, area 5*100
    assert (rec.batches, rec.backlog, rec._backlog_area) == (1, 4, 500)


def test_commit_without_a_run_does_nothing():
    rec = Recorder(128)
    rec.arrive(10, 7)
    rec.commit(1000)
    assert (rec.batches, rec.backlog, rec._t) == (0, 7, 10)


# -- scenario S2: two requests of 0 + 6 tokens at 0, a run of 4 decode pairs --
#
#   4 iterations of 30 from 0, each 2 decode tokens:
#   backlog 12 [0,30), 10 [30,60), 8 [60,90), 6 [90,120), 4 [120,200)
#   area = 30*(12+10+8+6) + 4*80 = 1080 + 320 = 1400 -> mean 1400/200 = 7
#   pending 2 throughout: area 400 -> mean 2

def s2(mode, **kw):
    rec = Recorder(128, **kw)
    a, b = Request(0, 0, 6), Request(1, 0, 6)
    rec.arrive(0, 6)
    rec.arrive(0, 6)
    if mode == "at_end":
        one_run(rec, 0, 30, 4, decode=[a, b])
    elif mode == "in_pieces":
        one_run(rec, 0, 30, 4, decode=[a, b], commit=False)
        for now in (45, 45, 60, 100, 119, 120, 500):
            rec.commit(now)
    elif mode == "separate":
        for i in range(4):
            one_run(rec, 30 * i, 30, 1, decode=[a, b])
    rec.close(200)
    return rec


@pytest.mark.parametrize("mode", ["at_end", "in_pieces", "separate"])
def test_s2_backlog_integral_by_hand(mode):
    rec = s2(mode)
    assert rec._backlog_area == 1400 and rec._pending_area == 400
    s = rec.summary(200, 0, 2)
    assert s["backlog_mean"] == 7.0 and s["pending_mean"] == 2.0
    assert (s["backlog_max"], s["backlog_final"], s["batches"]) == (12, 4, 4)
    assert s["decode_batch_mean"] == 2.0 and s["decode_only_fraction"] == 1.0
    # busy 4*30 = 120 of 200
    assert s["busy_fraction"] == 0.6


def test_s2_a_run_in_pieces_equals_at_end_equals_separate_runs():
    got = [s2(mode, batches=True, timeseries=True) for mode in ("at_end", "in_pieces", "separate")]
    summaries = [rec.summary(200, 0, 2) for rec in got]
    assert summaries[0] == summaries[1] == summaries[2]
    assert got[0].series == got[1].series == got[2].series
    assert got[0].batch_log == got[1].batch_log == got[2].batch_log


def test_s2_series_has_a_row_per_iteration_end():
    rec = s2("at_end", timeseries=True)
    # the two arrivals at 0 collapse into one row; then (time, pending, backlog)
    assert rec.series == [(0, 2, 12), (30, 2, 10), (60, 2, 8), (90, 2, 6), (120, 2, 4)]


def test_an_arrival_mid_run_first_commits_the_iterations_ended_by_then():
    rec = Recorder(128, timeseries=True)
    a, b = Request(0, 0, 6), Request(1, 0, 6)
    rec.arrive(0, 6)
    rec.arrive(0, 6)
    one_run(rec, 0, 30, 4, decode=[a, b], commit=False)
    rec.arrive(75, 3)
    # iterations ending 30 and 60 are in; backlog 12 - 4 + 3 = 11
    assert (rec.batches, rec.backlog, rec.pending) == (2, 11, 3)
    rec.commit(120)
    rec.close(200)
    # backlog 12 [0,30) 10 [30,60) 8 [60,75) 11 [75,90) 9 [90,120) 7 [120,200)
    #   = 360 + 300 + 120 + 165 + 270 + 560 = 1775
    # pending 2 [0,75) 3 [75,200) = 150 + 375 = 525
    assert rec._backlog_area == 1775 and rec._pending_area == 525
    assert (rec.backlog_max, rec.pending_max) == (12, 3)
    assert rec.series == [(0, 2, 12), (30, 2, 10), (60, 2, 8), (75, 3, 11),
                          (90, 3, 9), (120, 3, 7)]


def test_snapshots_and_backlog_slope():
    rec = Recorder(128)
    a, b = Request(0, 0, 6), Request(1, 0, 6)
    rec.arrive(0, 6)
    rec.arrive(0, 6)
    one_run(rec, 0, 30, 4, decode=[a, b], commit=False)
    for edge in (0, 50, 100, 150):
        rec.snapshot(edge)
    rec.close(200)
    # by 50 one iteration ended (12-2), by 100 three (12-6), by 150 all four (12-8)
    assert rec.windows == [(0, 12), (50, 10), (100, 6), (150, 4), (200, 4)]
    s = rec.summary(200, 0, 2)
    # increments -2, -4, -2, 0 per 50 ns = -4e7, -8e7, -4e7, 0 per s: mean -4e7
    # (= (4 - 12) / 200 ns); std (ddof 1) = sqrt((0 + 16 + 0 + 16) / 3) e7, se = std / 2
    assert s["backlog_slope"] == pytest.approx(-4e7)
    assert s["backlog_slope_se"] == pytest.approx((32 / 3) ** 0.5 / 2 * 1e7)


def test_backlog_slope_needs_four_edges():
    rec = Recorder(128)
    rec.arrive(0, 5)
    rec.snapshot(0)
    rec.snapshot(10)
    rec.close(20)
    assert len(rec.windows) == 3
    s = rec.summary(20, 0, 1)
    assert s["backlog_slope"] is None and s["backlog_slope_se"] is None


def test_close_without_snapshots_adds_no_window():
    rec = Recorder(128)
    rec.arrive(0, 5)
    rec.close(20)
    assert rec.windows == []


# -- maxima ---------------------------------------------------------------

def test_arrival_and_finish_at_one_instant_show_no_spike():
    rec = Recorder(128, timeseries=True)
    a = Request(0, 1, 1, arrival=0)
    rec.arrive(0, 2)
    one_run(rec, 0, 50, 1, prefill=[(a, 1)])
    one_run(rec, 50, 50, 1, decode=[a])
    # at 100: a new request (2 tokens) arrives, then a finishes
    rec.arrive(100, 2)
    a.first_token = a.finished = 100
    rec.finish(100, a)
    rec.close(200)
    # pending 1 on [0, 100) and 1 on [100, 200): the 2 lasted no time
    assert rec.pending_max == 1
    # backlog 2 [0,50), 1 [50,100), 2 [100,200): max 2; area 100 + 50 + 200 = 350
    assert rec.backlog_max == 2 and rec._backlog_area == 350
    assert rec._pending_area == 200
    # rows at 100 collapse to the last one
    assert rec.series == [(0, 1, 2), (50, 1, 1), (100, 1, 2)]


def test_maxima_count_levels_held_for_a_positive_time():
    rec = Recorder(128)
    rec.arrive(0, 4)
    rec.arrive(10, 4)   # backlog 8, pending 2 from 10
    r = Request(1, 0, 1)
    one_run(rec, 10, 20, 1, decode=[r])  # ends 30: backlog 7
    rec.arrive(30, 100)                  # 107 at 30 ...
    one_run(rec, 30, 10, 1, decode=[r], commit=False)  # ... held until 40: 106
    assert (rec.pending_max, rec.backlog_max) == (2, 8)  # 107 / 3 not yet held
    rec.commit(40)
    assert (rec.pending_max, rec.backlog_max) == (3, 107)


# -- batch mix ------------------------------------------------------------

def test_batch_mix_fractions_and_decode_batch_mean():
    rec = Recorder(128)
    rec.arrive(0, 1000)
    r = [Request(i, 10, 10) for i in range(6)]
    one_run(rec, 0, 10, 1, prefill=[(r[0], 5)])                          # prefill-only
    one_run(rec, 10, 10, 1, decode=r[:2], prefill=[(r[2], 4)])          # mixed, 2 decodes
    one_run(rec, 20, 10, 2, decode=r[:3], prefill=[(r[3], 1)])          # 2 mixed, 3 decodes
    one_run(rec, 40, 10, 4, decode=r[:5])                                # 4 decode-only, 5 each
    s = rec.summary(80, 0, 6)
    # 8 batches: 1 prefill-only, 3 mixed, 4 decode-only
    assert s["batches"] == 8
    assert s["prefill_only_fraction"] == 1 / 8
    assert s["mixed_fraction"] == 3 / 8
    assert s["decode_only_fraction"] == 4 / 8
    # decode tokens 2 + 2*3 + 4*5 = 28 over 7 batches with a decode = 4
    assert s["decode_batch_mean"] == 4.0
    # tokens: prefill 5 + 4 + 2*1 = 11, decode 28 -> 39 in 80 ns; backlog 1000 - 39
    assert rec.prefill_tokens == 11 and rec.decode_tokens == 28
    assert s["backlog_final"] == 961
    assert s["throughput_tokens_per_s"] == pytest.approx(39 / (80 * NS))
    assert s["busy_fraction"] == 1.0


def test_empty_recorder_summary():
    rec = Recorder(128)
    rec.close(100)
    s = rec.summary(100, 0, 0)
    assert s["batches"] == 0 and s["mixed_fraction"] is None
    assert s["decode_batch_mean"] is None and s["ttft_p50"] is None
    assert s["e2e_mean"] is None and s["tpot_p99"] is None
    assert s["backlog_mean"] == 0.0 and s["busy_fraction"] == 0.0
    assert rec.summary(0, 0, 0)["pending_mean"] is None  # empty span


# -- work conservation (SPEC 3: a batch is work-conserving iff b = min(bmax, demand)) --

@pytest.mark.parametrize("bmax, b, demand, prefill, k, expected", [
    (4, 4, 10, 0, 3, 0),   # full budget: b = bmax = min(4, 10)
    (128, 5, 5, 5, 1, 0),  # serves all demand
    (8, 3, 5, 0, 3, 3),    # 3 decodes, a prompt of 2 left waiting: 3 < min(8, 5) each time
    (4, 3, 10, 0, 2, 2),   # 3 < min(4, 10)
    # chunks of 4 of a 12-token prompt, bmax 128: demand 12, 8, 4 -> only the last is WC
    (128, 4, 12, 4, 3, 2),
    # 2 decodes + chunk 3 of a 9-token prompt + another prompt of 4 not served:
    # demand 2+9+4 = 15, 12, 9 -> b = 5 < each
    (128, 5, 15, 3, 3, 3),
    # 1 decode + chunk 2 of 6, bmax 128: demand 7, 5, 3 -> b = 3: 2 non-WC
    (128, 3, 7, 2, 3, 2),
])
def test_non_work_conserving_batches_by_hand(bmax, b, demand, prefill, k, expected):
    decode = b - prefill
    rec = Recorder(bmax)
    rec.arrive(0, 1000)
    rs = [Request(i, 0, 100) for i in range(decode)]
    pr = [(Request(99, 100, 1), prefill)] if prefill else []
    one_run(rec, 0, 10, k, decode=rs, prefill=pr, demand=demand)
    assert rec.wc_violations == expected
    assert rec.summary(10 * k, 0, 0)["non_work_conserving_batches"] == expected


def test_non_work_conserving_count_in_pieces_and_as_separate_runs():
    # chunks of 4 of a 12-token prompt at bmax 128 (2 of 3 are non-WC, see above)
    p = [(Request(0, 12, 1), 4)]
    pieces = Recorder(128)
    pieces.arrive(0, 13)
    one_run(pieces, 0, 10, 3, prefill=p, demand=12, commit=False)
    pieces.commit(10)
    assert pieces.wc_violations == 1
    pieces.commit(25)
    assert pieces.wc_violations == 2
    pieces.commit(30)
    separate = Recorder(128)
    separate.arrive(0, 13)
    for i, demand in enumerate((12, 8, 4)):
        one_run(separate, 10 * i, 10, 1, prefill=p, demand=demand)
    assert pieces.wc_violations == separate.wc_violations == 2


def test_violations_match_the_definition_exhaustively():
    # iteration i of a run serves b tokens from demand - i * prefill
    for bmax, b, demand, prefill in itertools.product(range(1, 7), range(1, 7), range(1, 13),
                                                      range(0, 4)):
        if b > bmax or b > demand or prefill > b:
            continue
        for i0, n in itertools.product(range(4), range(1, 4)):
            if demand - (i0 + n - 1) * prefill < b:
                continue  # the run could not have served b tokens that late
            want = sum(b < min(bmax, demand - i * prefill) for i in range(i0, i0 + n))
            assert violations(i0, n, b, bmax, demand, prefill) == want, \
                (i0, n, b, bmax, demand, prefill)


# -- latencies --------------------------------------------------------------

def four_finishes():
    # (rid, vp, vd, arrival, first token, finish), ns:
    #   r0: TTFT 1000, TPOT (5000-1000)/4 = 1000, E2E 5000
    #   r1: TTFT 2000, vd 1 -> no TPOT, E2E 2000
    #   r2: TTFT 3000, TPOT (9000-5000)/2 = 2000, E2E 7000
    #   r3: TTFT 4000, TPOT (13000-4000)/3 = 3000, E2E 13000
    reqs = [finished_request(0, 2, 5, 0, 1000, 5000),
            finished_request(1, 2, 1, 1000, 3000, 3000),
            finished_request(2, 2, 3, 2000, 5000, 9000),
            finished_request(3, 2, 4, 0, 4000, 13000)]
    rec = Recorder(128)
    for r in sorted(reqs, key=lambda r: r.arrival):
        rec.arrive(r.arrival, r.vp + r.vd)
    for r in sorted(reqs, key=lambda r: r.finished):
        rec.finish(r.finished, r)
    return rec


def test_latency_percentiles_by_hand():
    s = four_finishes().summary(13000, 0, 0)
    us = 1e-6
    # TTFT 1, 2, 3, 4 us; linear interpolation at rank (n-1)p: 1.5, 2.7, 2.97
    assert s["ttft_p50"] == pytest.approx(2.5 * us)
    assert s["ttft_p90"] == pytest.approx(3.7 * us)
    assert s["ttft_p99"] == pytest.approx(3.97 * us)
    # TPOT 1, 2, 3 us (r1 has none): rank 1, 1.8, 1.98
    assert s["tpot_p50"] == pytest.approx(2.0 * us)
    assert s["tpot_p90"] == pytest.approx(2.8 * us)
    assert s["tpot_p99"] == pytest.approx(2.98 * us)
    # E2E mean (5 + 2 + 7 + 13) / 4 = 6.75 us
    assert s["e2e_mean"] == pytest.approx(6.75 * us)
    assert s["completed"] == 4 and s["pending_final"] == 0


def test_tpot_is_none_when_every_request_has_one_decode_token():
    rec = Recorder(128)
    rec.arrive(0, 2)
    rec.finish(700, finished_request(0, 1, 1, 0, 700, 700))
    s = rec.summary(700, 0, 0)
    assert len(rec.tpot) == 0 and s["tpot_p50"] is None
    assert s["ttft_p50"] == pytest.approx(700 * NS) and s["e2e_mean"] == pytest.approx(700 * NS)


def test_percentiles_helper():
    assert percentiles([]) == (None, None, None)
    assert percentiles([7.0]) == (7.0, 7.0, 7.0)
    # 0..10: rank 10p -> 5, 9, 9.9
    assert percentiles([float(x) for x in range(11)]) == pytest.approx((5.0, 9.0, 9.9))


# -- restart --------------------------------------------------------------

def test_restart_forgets_counts_and_integrals_but_keeps_levels():
    rec = Recorder(128, batches=True, timeseries=True)
    r = Request(0, 3, 2, arrival=0)
    rec.arrive(0, 5)
    one_run(rec, 0, 100, 1, prefill=[(r, 3)])  # backlog 5 [0,100)
    rec.restart(100)
    assert (rec.pending, rec.backlog) == (1, 2)
    assert (rec.arrivals, rec.batches, rec.prefill_tokens, rec.busy) == (0, 0, 0, 0)
    assert (rec._pending_area, rec._backlog_area) == (0, 0)
    assert (rec.pending_max, rec.backlog_max) == (0, 0)
    one_run(rec, 100, 50, 1, decode=[r])
    one_run(rec, 150, 50, 1, decode=[r])
    r.first_token, r.finished = 150, 200
    rec.finish(200, r)
    rec.close(400)
    s = rec.summary(400, 0, 0)
    # over [100, 400]: backlog 2 [100,150) 1 [150,200) 0 after = 150 -> 150/300
    #                  pending 1 [100,200) = 100 -> 100/300
    assert s["backlog_mean"] == 150 / 300 and s["pending_mean"] == 100 / 300
    # maxima: only levels held after 100 (the 5 before is forgotten)
    assert (s["backlog_max"], s["pending_max"]) == (2, 1)
    assert (s["arrivals"], s["completed"], s["batches"]) == (0, 1, 2)
    assert s["decode_only_fraction"] == 1.0 and s["prefill_only_fraction"] == 0.0
    assert s["busy_fraction"] == 100 / 300
    assert s["duration"] == pytest.approx(300 * NS)
    assert s["throughput_tokens_per_s"] == pytest.approx(2 / (300 * NS))
    assert s["ttft_p50"] == pytest.approx(150 * NS)  # latencies after 100 only
    # the logs are kept whole
    assert [row[0] for row in rec.batch_log] == [0, 100, 150]
    assert rec.series[0] == (0, 1, 5)


def test_restart_mid_run_counts_only_the_iterations_ended_after_it():
    rec = Recorder(128)
    a, b = Request(0, 0, 6), Request(1, 0, 6)
    rec.arrive(0, 6)
    rec.arrive(0, 6)
    one_run(rec, 0, 30, 4, decode=[a, b], commit=False)
    rec.restart(75)  # iterations ending 30 and 60 are before it
    rec.commit(120)
    rec.close(200)
    # over [75, 200]: backlog 8 [75,90) 6 [90,120) 4 [120,200) = 120 + 180 + 320 = 620
    assert rec._backlog_area == 620 and rec._pending_area == 2 * 125
    assert (rec.batches, rec.decode_tokens) == (2, 4)
    assert rec.backlog_max == 8
    assert rec.summary(200, 0, 2)["backlog_mean"] == 620 / 125


def test_busy_fraction_after_a_mid_iteration_restart_is_at_most_one():
    rec = Recorder(128)
    a, b = Request(0, 0, 6), Request(1, 0, 6)
    rec.arrive(0, 6)
    rec.arrive(0, 6)
    one_run(rec, 0, 30, 4, decode=[a, b], commit=False)  # busy [0, 120)
    rec.restart(75)
    rec.commit(120)
    rec.close(120)
    # the GPU is busy all of [75, 120]: busy fraction 45 / 45 = 1
    assert rec.summary(120, 0, 2)["busy_fraction"] == 1.0


# -- logs -------------------------------------------------------------------

def test_batch_log_rows():
    rec = Recorder(128, batches=True)
    a, b, c = Request(10, 0, 5), Request(11, 0, 5), Request(12, 9, 2)
    rec.arrive(0, 100)
    one_run(rec, 0, 40, 1, prefill=[(c, 3)])
    one_run(rec, 40, 25, 3, decode=[a, b], prefill=[(c, 2)], commit=False)
    rec.commit(70)   # one of three in
    assert len(rec.batch_log) == 2
    rec.commit(115)
    # (start, duration, prefill, decode, requests, decode ids, (id, chunk) pairs)
    assert rec.batch_log == [
        (0, 40, 3, 0, 1, (), ((12, 3),)),
        (40, 25, 2, 2, 3, (10, 11), ((12, 2),)),
        (65, 25, 2, 2, 3, (10, 11), ((12, 2),)),
        (90, 25, 2, 2, 3, (10, 11), ((12, 2),)),
    ]


def test_logs_are_off_unless_asked():
    rec = Recorder(128)
    rec.arrive(0, 3)
    one_run(rec, 0, 10, 1, decode=[Request(0, 0, 3)])
    assert rec.batch_log is None and rec.series is None and rec.request_log is None


def test_series_rows_collapse_at_one_instant():
    rec = Recorder(128, timeseries=True)
    rec.arrive(5, 3)
    rec.arrive(5, 4)
    rec.arrive(5, 1)
    rec.arrive(9, 2)
    assert rec.series == [(5, 3, 8), (9, 4, 10)]
