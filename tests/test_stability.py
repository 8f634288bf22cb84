"""Stability verdicts: the stated rules, the theory's predictions, point C."""

import pytest

import llmqueue as q
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import point_c
from llmqueue.theory.stability import measured_verdict, predicted_verdict


@pytest.mark.parametrize("slope, se, offered, verdict", [
    (100.0, 10.0, 1000.0, "unstable"),      # 10 SE, 10% of the offered tokens
    (5.0, 10.0, 1000.0, "stable"),          # 0.5 SE, upper bound 25 < 50
    (-40.0, 10.0, 1000.0, "stable"),        # draining
    (30.0, 10.0, 1000.0, "inconclusive"),   # 3 SE: neither flat nor clearly growing
    (5.0, 1.0, 10000.0, "stable"),          # significant, but below 0.07% of the offered
    (8.0, 2.0, 1000.0, "inconclusive"),     # significant, up to 1.2%: too small to call
    (0.0, 40.0, 1000.0, "inconclusive"),    # too noisy: growth of 8% could hide here
    (None, None, 1000.0, "inconclusive"),   # no drift measured
])
def test_measured_verdict_follows_the_stated_rule(slope, se, offered, verdict):
    assert measured_verdict(slope, se, offered) == verdict


@pytest.mark.parametrize("load, peak, wc, kmax, bmax, predicted", [
    (0.9, 0.9, True, None, 512, "stable"),
    (1.1, 1.1, True, None, 512, "unstable"),
    (1.0, 1.0, True, None, 512, "boundary"),
    (0.9, 0.9, True, 600, 512, "stable"),          # kmax >= bmax: batches still fill
    (0.9, 0.9, True, 100, 512, "no guarantee"),    # kmax < bmax: SPEC 6.5 decides
    (0.9, 0.9, False, None, 512, "no guarantee"),
    (1.1, 1.1, False, None, 512, "unstable"),      # beyond what any policy serves
    (1.05, 0.95, False, None, 200, "no guarantee"),  # above bmax/t_bmax, below max b/t_b
    (1.05, 0.95, True, None, 200, "unstable"),
])
def test_prediction_table(load, peak, wc, kmax, bmax, predicted):
    assert predicted_verdict(load, peak, wc, kmax, bmax) == predicted


def test_every_summary_carries_the_verdict_keys():
    s = q.simulate(q.poisson(12.0, 100, 100, seed=1), "orca", bmax=512, kmax=None,
                   horizon=100).summary
    assert s["predicted"] == "stable"
    assert s["load"] == pytest.approx(12 * 200 * 0.15316 / 512)
    assert s["fluid_slope"] == 0.0 and s["verdict"] in ("stable", "unstable", "inconclusive")


def test_unknown_rates_give_no_prediction_and_no_horizon_no_verdict():
    s = q.simulate(q.from_list([(0.0, 10, 5), (1.0, 10, 5)]), "sarathi").summary
    assert s["verdict"] == "inconclusive" and s["backlog_slope"] is None
    # one 1 s gap between the first and last arrival: 1 req/s (as for trace times,
    # so a list whose clock starts late gets its true rate)
    assert s["load"] == pytest.approx(1 * 15 / (128 / 0.04675))
    wl = q.Workload(lambda: iter([(0.5, 10, 5)]), 1, "bare")
    s = q.simulate(wl, "sarathi", horizon=10).summary
    assert (s["predicted"], s["load"], s["fluid_slope"]) == (None, None, None)


def test_point_c_verdicts():
    # 1000 s: at the default 500 s FasterTransformer-whole's sawtooth leaves its
    # slope only 2.4 standard errors above 0 (inconclusive)
    rows = dict(point_c.run(point_c.EXPERIMENT.resolve({}), RunOptions(horizon=1000.0)))
    verdicts = {label: r.summary["verdict"] for label, r in rows.items()}
    assert verdicts == {"sarathi-128": "stable", "orca-128": "unstable",
                        "vllm-128": "unstable", "fastertransformer-128": "unstable",
                        "fastertransformer-1024": "unstable",
                        "fastertransformer-whole": "unstable"}
    predicted = {label: r.summary["predicted"] for label, r in rows.items()}
    assert predicted["sarathi-128"] == predicted["orca-128"] == "boundary"
    assert predicted["vllm-128"] == predicted["fastertransformer-1024"] == "no guarantee"
