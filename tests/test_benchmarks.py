"""The benchmark's outside references model the same thing as llmqueue: an
independent plain stepper and the design card in bare SimPy give the same
iterations, completions and end time as the engine on varied workloads."""

import random

import pytest

import llmqueue as q
from benchmarks import plain, skeleton
from benchmarks.varied import lognormal_rows


def engine(rows, bmax, kmax):
    s = q.simulate(q.from_list(rows), "sarathi", bmax=bmax, kmax=kmax).summary
    return s["batches"], s["completed"], round(s["duration"] * 1e9)


@pytest.mark.parametrize("seed", range(6))
def test_plain_and_skeleton_agree_with_the_engine(seed):
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(300):
        t += rng.expovariate(rng.choice([1.0, 3.0, 10.0]))
        rows.append((round(t, 4), rng.choice([0, rng.randint(1, 40), rng.randint(40, 2000)]),
                     rng.randint(1, 300)))
    bmax, kmax = rng.choice([64, 128, 512]), rng.choice([1, 8, 100])
    want = engine(rows, bmax, kmax)
    assert want[1] == len(rows)
    assert plain.run(rows, bmax, kmax) == want
    assert skeleton.run(rows, bmax, kmax) == want


def test_the_issue_workload_agrees():
    rows = lognormal_rows(1500)
    assert plain.run(rows) == skeleton.run(rows) == engine(rows, 512, 256)


def test_the_design_card_floor_ends_every_request():
    rows = lognormal_rows(400)
    assert skeleton.events_only(rows, kmax=1) == len(rows)
    assert skeleton.events_only(rows[:0]) == 0
