"""SPEC 8.10's E8.5 (``goodput``: one engine's goodput by scheduler) and E8.6
(``engines``: fewest engines by router) as experiments: their hard items on
short runs, the search's rule that a reported K has passed, and the full runs
(slow)."""

import math

import pytest
from scipy import stats

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments import engines, get, goodput
from llmqueue.planning import plan_engines
from llmqueue.planning.probe import BOUNDARY, FAIL, PASS, diverging

# Theorem 2 by hand: t(512) = c + a ceil(512 / 128) on the paper's staircase,
# lambda_tok = 512 / t(512) / (129 + 112)
T512 = 0.01128 + 4 * 0.03547
LAMBDA_TOK = 512 / T512 / (129 + 112)
PRICE = 2.21


def passed(checks):
    return {c.name: c.passed for c in checks}


def rows(summaries):
    return [(label, Result(dict(s))) for label, s in summaries.items()]


# -- E8.5 -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_goodput():
    params = goodput.EXPERIMENT.resolve({"requests": "300", "reps": "3"})
    return goodput.EXPERIMENT.execute(params, RunOptions(seed=0))


def test_goodput_short_hard_items(short_goodput):
    found = {label: result.summary for label, result in short_goodput}
    assert list(found) == ["sarathi", "orca", "vllm", "fastertransformer"]
    assert LAMBDA_TOK == pytest.approx(13.87, abs=0.005)
    for name, s in found.items():
        assert s["lambda_tok"] == pytest.approx(LAMBDA_TOK, rel=1e-9)
        assert 0 <= s["goodput"] <= LAMBDA_TOK, name
    values = [found[n]["goodput"] for n in goodput.SCHEDULERS]
    assert values == sorted(values, reverse=True) and len(set(values)) == 4
    assert found["sarathi"]["attainment_zero_load"] == 1.0
    assert all(passed(goodput.checks(short_goodput)).values())


def test_goodput_cost_per_million_output_tokens(short_goodput):
    # SPEC 8.8: one A100 at $2.21/h serving the goodput, 112 output tokens a request
    for _, result in short_goodput:
        s = result.summary
        if s["goodput"] > 0:
            assert s["per_hour"] == pytest.approx(PRICE)
            assert s["per_million_output"] == pytest.approx(
                PRICE / (s["goodput"] * 112 * 3600) * 1e6)
        else:
            assert s["per_million_output"] is None


def test_goodput_checks_catch_broken_results():
    good = {"sarathi": 12.1, "orca": 10.4, "vllm": 6.9, "fastertransformer": 0.02}
    base = {name: {"goodput": g, "lambda_tok": LAMBDA_TOK, "attainment_zero_load": 1.0}
            for name, g in good.items()}
    assert all(passed(goodput.checks(rows(base))).values())
    swapped = {**base, "orca": {**base["orca"], "goodput": 6.0}}
    assert not passed(goodput.checks(rows(swapped)))[
        "sarathi > orca > vllm > fastertransformer"]
    above = {**base, "sarathi": {**base["sarathi"], "goodput": 14.0}}
    assert not passed(goodput.checks(rows(above)))["every goodput <= lambda_tok"]
    unloaded = {**base, "sarathi": {**base["sarathi"], "attainment_zero_load": 0.99}}
    assert not passed(goodput.checks(rows(unloaded)))["A_0 = 1 for sarathi"]
    # one scheduler alone: no ordering to check
    alone = passed(goodput.checks(rows({"vllm": base["vllm"]})))
    assert list(alone) == ["every goodput <= lambda_tok"]


def test_goodput_refuses_what_it_cannot_honour():
    experiment = get("goodput")
    with pytest.raises(ValueError, match="goodput does not support horizon"):
        experiment.execute(experiment.resolve({}), RunOptions(horizon=10.0))
    with pytest.raises(ValueError, match="vp must be a number >= 1"):
        experiment.resolve({"vp": "0.5"})
    with pytest.raises(ValueError, match="target must be a number in"):
        goodput.plans({**experiment.resolve({"scheduler": "sarathi"}), "target": 1.5})


# -- E8.6 -------------------------------------------------------------------------

def test_engines_short_hard_items():
    params = engines.EXPERIMENT.resolve({"requests": "1200"})
    out = engines.EXPERIMENT.execute(params, RunOptions(seed=0))
    found = {label: result.summary for label, result in out}
    assert list(found) == ["jsq-tokens", "random"]
    for s in found.values():
        assert s["k_lb"] == math.floor(39 / LAMBDA_TOK) + 1 == 3
        assert s["decision"] == PASS and s["attainment"] - s["hw"] >= 0.9
        assert 2 in s["failed_k"]  # below K_lb: a FAIL without simulation
        assert s["per_hour"] == pytest.approx(s["k_min"] * PRICE)
    assert found["jsq-tokens"]["k_min"] <= found["random"]["k_min"]
    assert all(passed(engines.checks(out)).values())


def test_engines_checks_catch_broken_results():
    row = {"rate": 39.0, "lambda_tok": LAMBDA_TOK, "k_lb": 3, "k_min": 3, "decision": PASS,
           "attainment": 0.95, "hw": 0.02, "lower": 0.93, "target": 0.9, "passed_k": [3],
           "failed_k": [2], "boundary_k": []}
    random = {**row, "k_min": 4, "passed_k": [4, 6], "boundary_k": [3], "lower": 0.99}
    assert all(passed(engines.checks(rows({"jsq-tokens": row, "random": random}))).values())
    names = [c.name for c in engines.checks(rows({"jsq-tokens": row}))]
    k_lb, lower, failed = names
    worse = passed(engines.checks(rows({"jsq-tokens": {**row, "k_min": 5}, "random": random})))
    assert not worse["K_min(jsq-tokens) <= K_min(random)"]
    wide = passed(engines.checks(rows({"jsq-tokens": {**row, "lower": 0.89}})))
    assert not wide[lower]
    # a K reported although its probe failed, or although a smaller K passed
    for bad in ({"failed_k": [2, 3]}, {"boundary_k": [3]}, {"passed_k": [2, 3]}):
        assert not passed(engines.checks(rows({"jsq-tokens": {**row, **bad}})))[failed]
    assert not passed(engines.checks(rows({"jsq-tokens": {**row, "k_lb": 4}})))[k_lb]
    none = passed(engines.checks(rows({"jsq-tokens": {**row, "k_min": None,
                                                       "decision": None, "lower": None}})))
    assert not none[lower] and not none[failed]


def replay(probe, reps, max_reps, target=0.9, confidence=0.95):
    """SPEC 8.7 item 4 on a probe's own runs, round by round: the decision and
    the replications it took (Student t from scipy)."""
    n = 0
    while n < max_reps:
        n = min(n + reps, max_reps)
        runs = probe.runs[:n]
        values = [r.attainment for r in runs]
        mean = sum(values) / n
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        hw = stats.t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
        if mean + hw < target:
            return FAIL, n
        if not any(r.stopped for r in runs) and mean - hw >= target:
            return (FAIL if diverging(runs) else PASS), n
    return BOUNDARY, n


def check_search(result, reps, max_reps):
    """The search's own rules: each probe decided as SPEC 8.7 says; the K
    reported passed with its lower CI bound at the target; no smaller K
    probed passed; every boundary is noted and counted as not passing."""
    for p in result.probes:
        if p.reps:
            assert replay(p, reps, max_reps) == (p.decision, p.reps), p
    by_k = {p.engines: p for p in result.probes}
    best = by_k[result.k_min]
    assert best.decision == PASS and best.mean - best.hw >= 0.9 and best.stopped == 0
    assert all(p.decision != PASS for k, p in by_k.items() if k < result.k_min)
    for k, p in by_k.items():
        if p.decision == BOUNDARY:
            assert p.reps == max_reps and any(f"K = {k}: boundary" in n for n in result.notes)


def search(seed, max_reps, router="jsq-tokens"):
    params = engines.EXPERIMENT.resolve({})
    return plan_engines(39, goodput.traffic(params), goodput.engine(params, "sarathi"),
                        goodput.slo(params), router=router, reps=3, max_reps=max_reps,
                        n_requests=3600, seed=seed, price=PRICE)


def test_more_replications_resolve_k3_and_no_reported_k_failed():
    # E8.6 at full size, seed 11: K = 3's first 3 replications (0.949, 0.944, 0.917)
    # leave it undecided (0.937 +- 0.043); with no further rounds it is a boundary and
    # K = 3 is not reported; with rounds up to 20 it passes after 6
    capped = search(11, max_reps=3)
    check_search(capped, 3, 3)
    k3 = {p.engines: p for p in capped.probes}[3]
    assert k3.decision == BOUNDARY and k3.reps == 3 and capped.k_min > 3
    full = search(11, max_reps=20)
    check_search(full, 3, 20)
    k3 = {p.engines: p for p in full.probes}[3]
    assert k3.decision == PASS and 3 < k3.reps <= 20 and full.k_min == 3
    assert [r.attainment for r in k3.runs[:3]] == [r.attainment for r in
                                                    {p.engines: p for p in
                                                     capped.probes}[3].runs]


@pytest.mark.slow
def test_a_k_still_undecided_after_20_replications_is_not_reported():
    # seed 7: K = 3 is still undecided after 20 replications (some runs stop early,
    # so it cannot pass; their mean stays above the target, so it cannot fail)
    result = search(7, max_reps=20)
    check_search(result, 3, 20)
    k3 = {p.engines: p for p in result.probes}[3]
    assert k3.decision == BOUNDARY and k3.reps == 20 and result.k_min == 4


# -- full size (slow) ---------------------------------------------------------------

@pytest.mark.slow
def test_goodput_full():
    out = goodput.EXPERIMENT.execute(goodput.EXPERIMENT.resolve({}), RunOptions(seed=0))
    assert all(passed(goodput.checks(out)).values())
    found = {label: result.summary for label, result in out}
    assert found["fastertransformer"]["goodput"] < 0.25


@pytest.mark.slow
def test_engines_full():
    out = engines.EXPERIMENT.execute(engines.EXPERIMENT.resolve({}), RunOptions(seed=0))
    assert all(passed(engines.checks(out)).values())
    found = {label: result.summary for label, result in out}
    # SPEC E8.6: the router is worth one A100 (a drift in short runs that start
    # empty is a reason to run longer, not to fail K = 3: issue 30)
    assert (found["jsq-tokens"]["k_min"], found["random"]["k_min"]) == (3, 4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_search_rules_over_seeds(seed):
    for router in ("jsq-tokens", "random"):
        result = search(seed, max_reps=20, router=router)
        check_search(result, 3, 20)
        assert result.k_lb == 3 and not result.non_monotone
