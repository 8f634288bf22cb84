"""Operating point C (SPEC 6.1): the published outcome."""

import numpy as np
import pytest

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import point_c
from llmqueue.models.latency import Staircase


def run_rows(horizon, **logs):
    return dict(point_c.run(point_c.EXPERIMENT.resolve({}), RunOptions(horizon=horizon, **logs)))


def pending_at(result, t):
    times, pending, _ = result.timeseries()
    return pending[np.searchsorted(times, t, side="right") - 1]


def test_the_load_sits_exactly_on_the_theorem_2_boundary():
    tokens_per_s = (point_c.PREFILL + point_c.DECODE) / point_c.GAP
    assert tokens_per_s == pytest.approx(128 / Staircase().tokens_time(128), rel=1e-12)


@pytest.fixture(scope="module")
def rows():
    return run_rows(point_c.HORIZON, timeseries=True, batches=True)


def test_sarathi_128_settles_into_29_prefill_plus_99_decode(rows):
    r = rows["sarathi-128"]
    tail = r.batch_log[-2000:]
    assert {(p, d) for _, _, p, d, _, _, _ in tail} == {(29, 99)}
    assert r.summary["pending_max"] == 100 and r.summary["pending_final"] == 100
    assert r.summary["waiting_final"] == 0


def test_every_other_row_keeps_growing(rows):
    for label, r in rows.items():
        if label == "sarathi-128":
            continue
        assert r.summary["pending_final"] > 200, label
        assert pending_at(r, 480) - pending_at(r, 240) > 40, label


@pytest.mark.slow
def test_long_run_sarathi_stays_bounded_and_the_others_grow_linearly():
    long = run_rows(5000.0, timeseries=True)
    assert long["sarathi-128"].summary["pending_max"] == 100
    for label, r in long.items():
        if label != "sarathi-128":
            assert pending_at(r, 5000) - pending_at(r, 2500) > 400, label
