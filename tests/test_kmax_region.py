"""SPEC 6.5 experiments: simulated verdicts against Theorem 10's region."""

import pytest

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import kmax_region, vertex_c
from llmqueue.models.latency import Staircase
from llmqueue.theory.region import stability_region


def verdict(scheduler, bmax, lambda_p, lambda_d, horizon=1500.0):
    params = kmax_region.POINT.resolve({"scheduler": scheduler, "bmax": str(bmax),
                                        "lambda_p": str(lambda_p), "lambda_d": str(lambda_d)})
    [(_, result)] = kmax_region.run_point(params, RunOptions(horizon=horizon))
    return result.summary["verdict"]


@pytest.mark.parametrize("scheduler, bmax", [("sarathi", 128), ("sarathi", 1024),
                                             ("step-fill", 1024), ("orca", 1024)])
def test_rates_outside_the_region_are_unstable_for_any_scheduler(scheduler, bmax):
    region = stability_region(bmax, 100, Staircase())
    for lp, ld in [(1700, 1700), (3400, 500)]:
        assert not region.is_inside(lp, ld)
        assert verdict(scheduler, bmax, lp, ld) == "unstable"


def test_filling_1024_fails_inside_its_region_where_step_fill_holds():
    # decode-heavy: 94 + 982 tokens every 0.4675 s, well inside both regions
    assert stability_region(1024, 100, Staircase()).is_inside(200, 2100)
    assert verdict("sarathi", 1024, 200, 2100) == "unstable"
    assert verdict("step-fill", 1024, 200, 2100) == "stable"
    assert verdict("sarathi", 128, 200, 2100) == "stable"


def test_step_fill_keeps_the_prefill_capacity_of_a_big_budget():
    # prefill-heavy, outside the 128 region but inside the 1024 one
    lp, ld = 3000, 100
    assert not stability_region(128, 100, Staircase()).is_inside(lp, ld)
    assert stability_region(1024, 100, Staircase()).is_inside(lp, ld)
    assert verdict("sarathi", 128, lp, ld) == "unstable"
    assert verdict("step-fill", 1024, lp, ld) == "stable"


def test_vertex_c_experiment_rows():
    rows = dict(vertex_c.run({}, RunOptions(horizon=2000.0)))
    assert rows["sarathi-128 @ 0.4675 s"].summary["verdict"] == "stable"
    assert rows["sarathi-1024 @ 0.4675 s"].summary["verdict"] == "unstable"
    assert rows["step-fill-1024 @ 0.4675 s"].summary["verdict"] == "stable"
    # with free slots step-fill is Sarathi: the same batches, the same figures
    light_s, light_f = rows["sarathi-1024 @ 0.8 s"].summary, rows["step-fill-1024 @ 0.8 s"].summary
    assert {k: v for k, v in light_s.items()} == {k: v for k, v in light_f.items()}


@pytest.mark.slow
def test_the_whole_grid_agrees_with_theorem_10():
    rows = kmax_region.run_region(kmax_region.REGION.resolve({}),
                                  RunOptions(horizon=kmax_region.HORIZON))
    stable = {}
    for _, r in rows:
        s = r.summary
        region = stability_region(s["bmax"], 100, Staircase())
        if not region.is_inside(s["lambda_p"], s["lambda_d"]):
            assert s["verdict"] == "unstable", s
        if s["verdict"] == "stable":
            stable.setdefault((s["scheduler"], s["bmax"]), set()).add(
                (s["lambda_p"], s["lambda_d"]))
    assert stable[("sarathi", 1024)] < stable[("step-fill", 1024)]


def test_the_prediction_uses_the_region_when_kmax_binds():
    # outside the bmax-128 region (1700 + 1700 tokens/s): unstable for any policy;
    # point C at bmax 1024 is inside: no guarantee (Sarathi-1024 fails, step-fill holds)
    import llmqueue as q
    outside = q.simulate(q.renewal(0.4675, 795, 795), "sarathi", bmax=128, kmax=100,
                         horizon=200).summary
    inside = q.simulate(q.renewal(0.4675, 290, 990), "sarathi", bmax=1024, kmax=100,
                        horizon=200).summary
    assert outside["predicted"] == "unstable" and outside["verdict"] == "unstable"
    assert inside["predicted"] == "no guarantee"
