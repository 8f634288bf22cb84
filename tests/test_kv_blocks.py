"""The blocks a run of identical iterations takes (engine/kv_blocks.py): the
closed form against the list of running totals and against a count made one
iteration and one request at a time, and the floor sum against its definition."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from llmqueue.engine.kv_blocks import block_growth, block_steps, floor_sum
from llmqueue.policies.view import Plan


@pytest.mark.parametrize("seed", range(200))
def test_floor_sum_is_its_definition(seed):
    rng = random.Random(seed)
    n, m = rng.randint(0, 60), rng.randint(1, 40)
    a, b = rng.randint(0, 10**rng.randint(0, 7)), rng.randint(0, 10**rng.randint(0, 7))
    assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def _state(rng: random.Random):
    """Residents with blocks of ``B`` tokens: decoders of random KV on a shared
    clock, and lazy prefill chunks of random KV and size."""
    b = rng.choice([2, 3, 16, 32])
    clock = [rng.randint(0, 500)]
    kvs = [rng.randint(1, 3000) for _ in range(rng.randint(0, 40))]  # decoders' KV now
    due = [0] * b
    for x in kvs:  # a new block at a clock c where its KV, x + c - clock0, is a multiple of B
        due[(clock[0] - x) % b] += 1
    chunks = []
    for _ in range(rng.randint(0, 3)):
        held, n = rng.randint(0, 2000), rng.randint(1, 300)
        r = SimpleNamespace(vp=held + 10_000, vd=50, prefill_left=10_000, end_mark=50, clock=[0])
        chunks.append((r, n))
    admission = "lazy" if chunks or rng.random() < 0.7 else "prompt"
    residents = SimpleNamespace(block_size=b, kv=SimpleNamespace(admission=admission), due=due,
                                clock=clock, free=rng.choice([10**9, rng.randint(0, 400)]))
    plan = Plan(decode=[object()] * len(kvs) if kvs and rng.random() < 0.85 else [],
                prefill=chunks if admission == "lazy" else [])
    return residents, plan, kvs


def _counted(residents, plan, kvs, k):
    """P_1 .. P_(k-1), one iteration and one request at a time: the blocks held
    after iteration i (i = 0 the first) less those after the first."""
    b = residents.block_size

    def held(i):
        total = sum(-((x + 1 + i) // -b) for x in kvs) if plan.decode else 0
        for r, n in plan.prefill:
            x = r.vp + r.vd - r.prefill_left - r.end_mark + r.clock[0]  # KV before the run
            total += -((x + (i + 1) * n) // -b)
        return total

    return [held(i) - held(0) for i in range(1, k)]


@pytest.mark.parametrize("seed", range(300))
def test_growth_and_steps_are_the_counted_blocks(seed):
    rng = random.Random(seed)
    residents, plan, kvs = _state(rng)
    if not plan.decode and not plan.prefill:
        return
    k = rng.choice([2, 3, rng.randint(2, 40), rng.randint(2, 200)])
    counted = _counted(residents, plan, kvs, k)
    fit = [p for p in counted if p <= residents.free]  # levels never fall: a prefix
    assert block_steps(residents, plan, k) == fit
    growth = block_growth(residents, plan, k)
    if len(fit) < k - 1:
        assert growth is None
    else:
        assert growth == (sum(counted[:-1]), counted[-1])
