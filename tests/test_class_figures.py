"""Figures broken down by class, against hand-computed schedules."""

import pytest

import llmqueue as q
from llmqueue.network.classes import by_class


def test_pending_and_throughput_by_class_have_their_closed_forms():
    # one-second iterations serve every decoder: request 0 (a) leaves at 2 s and
    # request 1 (b) at 4 s; request 2 (a) arrives at 1 s, waits for a slot (kmax 2),
    # is admitted at 2 s, decodes at 2-3 and 3-4 s and leaves at 4 s
    rows = [(0.0, 0, 2, "a"), (0.0, 0, 4, "b"), (1.0, 0, 2, "a")]
    r = q.simulate(q.from_list(rows), "sarathi", kmax=2, latency=q.Constant(1.0),
                   requests=True)
    figures = by_class(r.request_log)  # ends at the last finish, 4 s
    a, b = figures["a"], figures["b"]
    assert (a["arrivals"], a["completed"], b["completed"]) == (2, 2, 1)
    # class a: request 0 in the system 0-2 s, request 2 from 1 to 4 s: (2 + 3) / 4
    assert a["pending_mean"] == pytest.approx(5 / 4)
    assert b["pending_mean"] == pytest.approx(4 / 4)
    assert a["tokens_per_s"] == pytest.approx(4 / 4) and b["tokens_per_s"] == pytest.approx(1.0)
    assert a["e2e_p50"] == pytest.approx(2.5)  # e2e 2 s and 3 s
    # the classes add up to the whole run's time-average pending
    assert a["pending_mean"] + b["pending_mean"] == pytest.approx(r.summary["pending_mean"])


def test_figures_cut_at_an_earlier_end():
    rows = [(0.0, 0, 2, "a"), (0.0, 0, 4, "b")]
    r = q.simulate(q.from_list(rows), "sarathi", latency=q.Constant(1.0), requests=True)
    cut = by_class(r.request_log, end=3 * 10**9)
    assert cut["b"]["completed"] == 0 and cut["b"]["pending_final"] == 1
    assert cut["b"]["pending_mean"] == pytest.approx(1.0)
    assert cut["a"]["pending_mean"] == pytest.approx(2 / 3)
