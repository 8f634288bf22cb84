"""Latency models (SPEC 4) and fitting them to measured samples."""

import math

import numpy as np
import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.theory.fit import fit_linear, fit_staircase, read_samples


def test_step_model_is_spec_4():
    m = q.StepModel()
    assert m.batch_time(16, 0, 16) == pytest.approx(0.005 + 16 * 0.0008)
    assert m.batch_time(3, 2000, 4) == pytest.approx(
        0.005 + 3 * 0.0008 + 2000 * 0.00002 + 0.0003 * 2000 ** 0.6)
    assert q.StepModel(base=0.001, attention=0).batch_time(0, 100, 1) == pytest.approx(0.003)


def test_linear_and_interpolated_models():
    assert q.Linear(0.01, 0.001).batch_time(5, 95, 6) == pytest.approx(0.11)
    table = q.Interpolated([128, 1, 256], [0.05, 0.01, 0.08])  # any order
    assert table.batch_time(0, 64, 1) == pytest.approx(0.01 + 63 / 127 * 0.04)
    assert table.tokens_time(192) == pytest.approx(0.065)
    assert table.tokens_time(512) == pytest.approx(0.08 + 256 * 0.03 / 128)  # last slope
    with pytest.raises(ValueError, match="must not repeat"):
        q.Interpolated([1, 1], [0.1, 0.2])


def noisy_staircase(n=600, sigma=0.002, seed=5, model=q.Staircase()):  # noqa: B008
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 1025, n)
    seconds = np.array([model.tokens_time(int(b)) for b in tokens]) + rng.normal(0, sigma, n)
    return tokens, seconds


def test_staircase_fit_recovers_known_constants_from_noisy_samples():
    sigma = 0.002
    tokens, seconds = noisy_staircase(sigma=sigma)
    fit = fit_staircase(tokens, seconds)
    assert fit.model.b0 == 128
    steps = np.ceil(tokens / 128)
    # OLS standard errors: se(a) = sigma / (sd(x) sqrt n), se(c) = sigma sqrt(1/n + m^2/Sxx)
    sxx = ((steps - steps.mean()) ** 2).sum()
    se_a = sigma / math.sqrt(sxx)
    se_c = sigma * math.sqrt(1 / steps.size + steps.mean() ** 2 / sxx)
    assert abs(fit.model.a - 0.03547) < 5 * se_a
    assert abs(fit.model.c - 0.01128) < 5 * se_c
    # R^2 = 1 - noise variance / total variance, up to sampling error
    assert fit.r2 == pytest.approx(1 - sigma ** 2 / seconds.var(), abs=2e-3)


def test_linear_fit_recovers_a_line_and_scores_a_staircase_worse():
    rng = np.random.default_rng(9)
    tokens = rng.integers(1, 2049, 500)
    seconds = 0.02 + 3e-4 * tokens + rng.normal(0, 0.001, 500)
    fit = fit_linear(tokens, seconds)
    sxx = ((tokens - tokens.mean()) ** 2).sum()
    assert abs(fit.model.per_token - 3e-4) < 5 * 0.001 / math.sqrt(sxx)
    assert fit.r2 > 0.999
    t2, s2 = noisy_staircase()
    assert fit_linear(t2, s2).r2 < fit_staircase(t2, s2).r2


def test_given_b0_is_used_and_a_useless_one_refused():
    tokens, seconds = noisy_staircase()
    assert fit_staircase(tokens, seconds, b0=256).model.b0 == 256
    with pytest.raises(ValueError, match="one step"):
        fit_staircase(tokens, seconds, b0=4096)


def test_exact_samples_give_the_exact_staircase():
    model = q.Staircase()
    tokens = list(range(1, 1025))
    fit = fit_staircase(tokens, [model.tokens_time(b) for b in tokens])
    assert fit.model.b0 == 128 and fit.r2 == pytest.approx(1.0)
    assert (fit.model.c, fit.model.a) == pytest.approx((0.01128, 0.03547), rel=1e-9)


def test_fit_cli_text_and_json(tmp_path, capsys):
    tokens, seconds = noisy_staircase()
    path = tmp_path / "samples.csv"
    path.write_text("tokens,seconds\n" + "".join(f"{t},{s}\n" for t, s in zip(tokens, seconds)))
    assert main(["fit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ceil(b / 128)" in out and "R^2" in out
    assert main(["fit", str(path), "--json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    assert doc["staircase"]["b0"] == 128 and doc["linear"]["model"] == "linear"
    assert 0 < doc["linear"]["r2"] < doc["staircase"]["r2"] <= 1


def test_fit_reader_names_a_bad_line(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("tokens,seconds\n1,0.1\n2,oops\n")
    with pytest.raises(ValueError, match=f"{path}:3:"):
        read_samples(str(path))
    assert main(["fit", str(path)]) == 2
    assert f"{path}:3:" in capsys.readouterr().err


def test_flat_samples_get_the_same_answer_from_both_fits():
    """Times that do not rise with the batch are refused by both fits alike,
    even where some step width would give a tiny positive rise."""
    import numpy as np

    from llmqueue.theory.fit import fit_linear, fit_staircase
    rng = np.random.default_rng(4)
    tokens = rng.integers(1, 1000, 500)
    flat = np.full(500, 0.05)
    falling = 0.05 - 1e-6 * tokens + rng.normal(0, 1e-4, 500)
    for seconds in (flat, falling):
        with pytest.raises(ValueError, match="do not grow with batch tokens"):
            fit_linear(tokens, seconds)
        with pytest.raises(ValueError, match="do not grow with batch tokens"):
            fit_staircase(tokens, seconds)


def test_the_step_search_matches_a_direct_search_on_every_sample():
    """The grouped search (sums per distinct size) keeps the b0 and SSE that a
    direct least-squares search over every b0 and every sample gives."""
    import numpy as np

    from llmqueue.theory.fit import fit_staircase
    rng = np.random.default_rng(9)
    x = rng.integers(1, 700, 2000).astype(float)
    y = 0.01 + 0.03 * np.ceil(x / 96) + rng.normal(0, 2e-3, x.size)
    best = None
    for b0 in range(1, 700):
        s = np.ceil(x / b0)
        if s.min() == s.max():
            continue
        a, c = np.polyfit(s, y, 1)
        sse = float(((y - c - a * s) ** 2).sum())
        if best is None or sse < best[0] - 1e-12 * float(((y - y.mean()) ** 2).sum()):
            best = (sse, b0)
    fit = fit_staircase(x, y)
    assert fit.model.b0 == best[1] == 96
    assert fit.sse == pytest.approx(best[0], rel=1e-9)
