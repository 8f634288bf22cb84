"""A probe's drift check and the quantile a plan shows (issue 30 B6, B7).

A drift (the window's second half worse than its first, and the backlog
growing) means the runs are too short to decide: the probe is run again with
twice the measured requests, up to 8 times, and fails only if the drift
persists (SPEC 8.7 item 4).  A pass above a context model's approximate
capacity counts only on runs of 8 times the requests."""

import math

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.planning import EngineSpec, Traffic, plan
from llmqueue.planning import probe as probe_module
from llmqueue.planning.plan import at_rate, shown_quantile
from llmqueue.planning.probe import FAIL, LONGEST, PASS, Rules, probe
from llmqueue.planning.replicate import Run, Task
from llmqueue.theory.slo import SLO

TRAFFIC = Traffic(q.Geometric(129), q.Geometric(112))
RULES = Rules(target=0.9, confidence=0.95, reps=3, max_reps=6)
BASE = Task(TRAFFIC, EngineSpec("sarathi", bmax=512, kmax=None), SLO(ttft=1.0), 1.0, 0, 0,
            10, 100, 0.9, "joint", True)


def scripted(monkeypatch, drifts_below=0, attainment=lambda n: 0.97):
    """Replications whose halves differ, and whose backlog grows, while the
    measured requests are fewer than ``drifts_below``; the requests each
    replication was asked for are recorded."""
    asked = []

    def run(task):
        asked.append(task.n_meas)
        drift = task.n_meas < drifts_below
        a = attainment(task.n_meas)
        second = a - 0.05 if drift else a
        return Run(task.replication, a, False, a + 0.05 if drift else a, second,
                   40.0 + task.replication if drift else 0.1 * (task.replication - 1),
                   task.n_meas, 1.0, (0.1, 0.2, 0.3), (0.01, 0.02, 0.03), 0.9, 100.0, 0.0)
    monkeypatch.setattr(probe_module, "run_replication", run)
    return asked


def test_a_drift_that_vanishes_on_longer_runs_passes(monkeypatch):
    asked = scripted(monkeypatch, drifts_below=400)  # gone at 4x the requests
    p = probe(BASE, 5.0, 1, RULES)
    assert p.decision == PASS
    assert asked == [100] * 3 + [200] * 3 + [400] * 3
    assert "4x" in p.note
    assert p.simulated_requests == 3 * (100 + 200 + 400)  # every try's cost counted


def test_a_drift_that_persists_at_8x_fails(monkeypatch):
    asked = scripted(monkeypatch, drifts_below=10**9)
    p = probe(BASE, 5.0, 1, RULES)
    assert p.decision == FAIL and "diverging" in p.note
    assert sorted(set(asked)) == [100, 200, 400, 800] and LONGEST == 8


def test_no_drift_is_decided_at_once(monkeypatch):
    asked = scripted(monkeypatch)
    assert probe(BASE, 5.0, 1, RULES).decision == PASS and asked == [100] * 3


def test_a_pass_above_an_approximate_capacity_needs_long_runs(monkeypatch):
    # short runs pass in their transient; runs of 8x the requests do not
    asked = scripted(monkeypatch, attainment=lambda n: 0.97 if n < 800 else 0.5)
    p = probe(BASE, 5.0, 1, RULES, above_bound=True)
    assert p.decision == FAIL and asked == [100] * 3 + [800] * 3


def roofline_plan(**options):
    """The outside check's case: Llama-3-8B on an H100, lognormal prompts, p99 in
    quantile mode: plan passed 24.23 req/s (1.1 lambda_tok = 22.03) on 500-request
    runs; runs of 3,000 s grow at 23 req/s and hold at 22 (the SLO held in the
    short runs' transient)."""
    from llmqueue.hardware import Roofline
    engine = EngineSpec("sarathi", bmax=2048, kmax=None,
                        latency=Roofline("H100", "llama-3-8b"))
    traffic = Traffic(q.LogNormal(1000, 1.0), q.Geometric(200))
    return plan(traffic, engine, SLO(ttft=1.0, tpot=0.1), 0.99, mode="quantile", reps=3,
                n_requests=500, seed=3, **options)


def test_the_first_probe_above_the_rooflines_bound_fails_on_long_runs():
    r = roofline_plan(max_probes=1)
    assert r.bounds.lambda_tok == pytest.approx(22.03, abs=0.01)
    first = r.probes[0]
    assert first.rate == pytest.approx(1.1 * r.bounds.lambda_tok) and first.decision == FAIL
    assert first.simulated_requests > 3 * 550  # its short runs (50 warm-up + 500) passed


@pytest.mark.slow
def test_goodput_on_the_roofline_stays_under_its_capacity():
    r = roofline_plan()
    assert r.goodput < 22.5 and r.probes[0].decision == FAIL


def test_quantile_mode_shows_the_targets_quantile(capsys):
    assert shown_quantile("quantile", 0.99) == ("target", "p99")
    assert shown_quantile("quantile", 0.95) == ("target", "p95")
    assert shown_quantile("joint", 0.99) == ("p90", "p90")
    args = ["plan", "--set", "bmax=512", "--set", "kmax=none", "--set", "vp=geometric:129",
            "--set", "vd=geometric:112", "--ttft", "1", "--tpot", "0.15", "--requests", "150",
            "--reps", "2", "--target", "0.99", "--mode", "quantile"]
    assert main(args) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "TTFT p99 s" in header and "TPOT p99 s" in header and "p90" not in header


def test_the_target_quantile_is_that_of_the_runs():
    r = plan(TRAFFIC, EngineSpec("sarathi", bmax=512, kmax=None), SLO(ttft=1.0), 0.95,
             mode="quantile", reps=2, n_requests=150, max_probes=3)
    best = max((p for p in r.probes if p.decision == PASS), key=lambda p: p.rate)
    at = at_rate(best)
    p90, p99 = at["ttft_p90"][0], at["ttft_p99"][0]
    assert p90 <= at["ttft_target"][0] <= p99  # the 0.95 quantile lies between
    assert not math.isnan(at["tpot_target"][0])
