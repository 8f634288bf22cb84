"""The slot capacity (issue 30 B4): with a few kmax slots, ``llmqueue capacity``
prints the rate the slots allow, priced with the staircase's step (every
iteration lasts at least t_1 = c + a), and runs saturate there."""

import json

import pytest

import llmqueue as q
from llmqueue.cli import main
from llmqueue.theory.memory import lambda_joint, law_kv_area, slot_capacity
from llmqueue.theory.stability import predict

T1 = 0.01128 + 0.03547  # the paper's staircase, one iteration of up to 128 tokens
ITERATIONS = 3 + 990  # point C: ceil(290/128) prefill chunks, 990 decodes


def capacity(capsys, *settings):
    assert main(["capacity", "--json", *[f"--set={s}" for s in settings]]) == 0
    return json.loads(capsys.readouterr().out)


def test_few_slots_bind_at_kmax_over_t1_times_the_iterations(capsys):
    doc = capacity(capsys, "kmax=4")
    assert doc["lambda_kmax"] == pytest.approx(4 / (T1 * ITERATIONS), rel=1e-12)
    assert doc["binding"] == "slots"
    assert doc["lambda_joint"] == doc["lambda_kmax"]
    # point C's rate (lambda*, 2.139 req/s) is 25 times what 4 slots serve
    assert set(v["predicted"] for v in doc["verdicts"].values()) == {"unstable"}


def test_many_slots_leave_compute_binding(capsys):
    doc = capacity(capsys, "kmax=100")  # point C as SPEC 6.1 runs it
    assert doc["binding"] == "compute"
    assert doc["lambda_joint"] == pytest.approx(doc["lambda_star"])
    # 100 slots carry ~128.9 tokens an iteration: the envelope is above t_1
    envelope = 0.01128 + 0.03547 * (100 * 1280 / ITERATIONS) / 128
    assert doc["lambda_kmax"] == pytest.approx(100 / (envelope * ITERATIONS), rel=1e-12)
    assert doc["verdicts"]["sarathi"]["predicted"] == "boundary"  # unchanged


def test_the_joint_capacity_with_a_cache_prices_slots_with_the_step():
    # it priced them on the linear envelope at ~5 tokens: c + 5a/128 = 12.7 ms
    joint = lambda_joint(10**6, 290, 990, law_kv_area(290, 990, 128), 128, kmax=4,
                         mean_iterations=ITERATIONS)
    assert joint.slots == pytest.approx(4 / (T1 * ITERATIONS), rel=1e-12)
    assert joint.binding == "slots"
    assert slot_capacity(4, 290, 990, ITERATIONS) == joint.slots


@pytest.mark.parametrize("kmax", [4, 16])
def test_saturated_runs_serve_the_slot_capacity(kmax):
    result = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", bmax=128, kmax=kmax,
                        horizon=3000.0)
    served = result.summary["completed"] / 3000.0
    bound = slot_capacity(kmax, 290, 990, ITERATIONS)
    assert served <= bound * 1.001
    assert served >= bound * 0.98  # within 2% (a slot frees only at an iteration's end)


def test_theorem2s_boundary_outside_theorem10s_region_is_unstable():
    # point C with 4 slots sits on Theorem 2's boundary of the budget, far outside
    # what its slots serve: no policy holds it (it said "boundary")
    assert predict(1 / 0.4675, 290, 990, work_conserving=True, bmax=128, kmax=4,
                   latency=None) == "unstable"
    assert predict(1 / 0.4675, 290, 990, work_conserving=True, bmax=128, kmax=100,
                   latency=None) == "boundary"


def test_requests_without_a_prompt_hold_a_slot_for_their_decodes_only(capsys):
    # vp = 0: a request starts with its first decode, so 10 iterations a slot, not 11
    doc = capacity(capsys, "kmax=8", "vp=0", "vd=10")
    assert doc["lambda_kmax"] == pytest.approx(8 / (T1 * 10), rel=1e-12)
    served = q.simulate(q.renewal(0.01, 0, 10), "sarathi", bmax=128, kmax=8,
                        horizon=500.0).summary["completed"] / 500.0
    assert doc["lambda_kmax"] * 0.995 <= served <= doc["lambda_kmax"] * 1.001
