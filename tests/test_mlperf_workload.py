"""MLPerf Inference's Llama-2-70B workload (llmqueue.models.mlperf): the shipped
lengths against the figures of their README (an independent source), the
scaling rule of generated lengths, the benchmark's sample order, and the
offline and Poisson workloads built on them."""

import csv
import doctest
import math
import os

import numpy as np
import pytest

from llmqueue.models import mlperf
from llmqueue.models.mlperf import (OUTPUT_LIMIT, SAMPLES, SCALE, generated_lengths,
                                    mlperf_lengths, mlperf_offline, mlperf_poisson,
                                    sample_order, scale_factor)

DATA = os.path.join(os.path.dirname(mlperf.__file__), "data", mlperf.DATA_FILE)


def file_rows():
    with open(DATA, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["input_length", "output_length"]
    return [(int(p), int(d)) for p, d in rows[1:]]


def test_the_dataset_has_24576_samples_of_the_readme_figures():
    prompts, references = mlperf_lengths("raw")
    assert len(prompts) == len(references) == SAMPLES == 24576
    assert prompts.dtype.kind == references.dtype.kind == "i"
    assert round(float(prompts.mean()), 1) == 222.3 and prompts.max() == 1021
    assert np.median(prompts) == 152
    assert round(float(references.mean()), 1) == 218.9 and references.max() == 1016
    assert np.median(references) == 190


def test_raw_returns_the_file_as_it_is():
    prompts, references = mlperf_lengths("raw")
    assert list(zip(prompts.tolist(), references.tolist())) == file_rows()
    assert np.array_equal(mlperf_lengths()[0], prompts)  # prompts as they are either way


def test_scaled_outputs_average_290_and_respect_the_limit():
    outputs = mlperf_lengths()[1]
    assert abs(outputs.mean() - 290.0) <= 0.5
    assert outputs.max() <= OUTPUT_LIMIT == 1024 and outputs.min() >= 1
    assert mlperf_lengths("scaled")[1] is outputs  # cached


def test_scaled_outputs_follow_the_stated_rule_sample_by_sample():
    expected = [min(max(1, round(SCALE * d)), 1024) for _, d in file_rows()]
    assert mlperf_lengths()[1].tolist() == expected


def test_the_scale_constant_is_the_bisection_of_the_290_target():
    s = scale_factor(290.0)
    assert abs(s - SCALE) < 5e-5
    references = mlperf_lengths("raw")[1]
    assert generated_lengths(references, s).mean() >= 290.0
    assert generated_lengths(references, s - 1e-9).mean() < 290.0  # the smallest such factor
    assert abs(generated_lengths(references, SCALE).mean() - 290.0) <= 0.5
    assert scale_factor(290.0) == s  # deterministic


def test_the_arrays_cannot_be_changed_by_a_caller():
    prompts, outputs = mlperf_lengths()
    with pytest.raises(ValueError):
        prompts[0] = 0
    with pytest.raises(ValueError):
        outputs[0] = 0


def test_the_sample_order_is_a_fresh_permutation_each_pass():
    order = sample_order(2 * SAMPLES + 10, seed=4)
    assert sorted(order[:SAMPLES].tolist()) == list(range(SAMPLES))
    assert sorted(order[SAMPLES:2 * SAMPLES].tolist()) == list(range(SAMPLES))
    assert not np.array_equal(order[:SAMPLES], order[SAMPLES:2 * SAMPLES])
    assert np.array_equal(sample_order(2 * SAMPLES + 10, seed=4), order)
    assert np.array_equal(sample_order(100, seed=4), order[:100])  # prefix-stable
    assert not np.array_equal(sample_order(100, seed=5), order[:100])


def sizes(workload):
    return [(a.prefill, a.decode) for a in workload]


def test_offline_is_every_sample_at_time_0_in_the_benchmark_order():
    w = mlperf_offline(1000, seed=2)
    arrivals = list(w)
    assert w.count == len(arrivals) == 1000 and w.rate is None
    assert {a.time for a in arrivals} == {0.0}
    prompts, outputs = mlperf_lengths()
    order = sample_order(1000, seed=2)
    assert sizes(w) == list(zip(prompts[order].tolist(), outputs[order].tolist()))
    assert w.mean_decode == pytest.approx(outputs.mean())
    assert sizes(mlperf_offline(1000, seed=2)) == sizes(w)
    assert sizes(mlperf_offline(1000, seed=3)) != sizes(w)


def test_offline_cycles_through_the_dataset_and_takes_raw_outputs():
    w = mlperf_offline(2 * SAMPLES, outputs="raw", seed=0)
    assert w.count == 2 * SAMPLES
    decodes = sorted(a.decode for a in w)
    assert decodes == sorted(2 * mlperf_lengths("raw")[1].tolist())
    assert mlperf_offline().count == SAMPLES


def test_poisson_arrival_count_and_mean_gap_are_those_of_the_rate():
    rate, duration = 50.0, 400.0
    w = mlperf_poisson(rate, duration=duration, seed=11)
    times = np.array([a.time for a in w])
    expected = rate * duration  # Poisson count: standard deviation sqrt(expected)
    assert abs(len(times) - expected) < 4 * math.sqrt(expected)
    assert times.max() < duration and np.all(np.diff(times) >= 0) and times[0] > 0
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / math.sqrt(len(gaps))
    assert w.rate == rate and w.count == len(times)


def test_poisson_runs_until_both_minimums_are_met():
    assert mlperf_poisson(10.0, samples=7, seed=1).count == 7
    few = list(mlperf_poisson(10.0, samples=5000, duration=2.0, seed=1))
    assert len(few) == 5000 and few[-1].time > 2.0  # the count held it on past 2 s
    many = list(mlperf_poisson(10.0, samples=3, duration=20.0, seed=1))
    assert len(many) > 3 and many[-1].time < 20.0
    short = [a.time for a in mlperf_poisson(10.0, samples=3, seed=1)]
    assert short == [a.time for a in many[:3]]


def test_poisson_is_deterministic_and_draws_sizes_as_offline_does():
    a = list(mlperf_poisson(5.0, samples=300, seed=9))
    assert a == list(mlperf_poisson(5.0, samples=300, seed=9))
    assert a != list(mlperf_poisson(5.0, samples=300, seed=10))
    assert [(r.prefill, r.decode) for r in a] == sizes(mlperf_offline(300, seed=9))
    faster = mlperf_poisson(50.0, samples=300, seed=9)  # the rate moves times, not sizes
    assert sizes(faster) == [(r.prefill, r.decode) for r in a]


@pytest.mark.parametrize("call, words", [
    (lambda: mlperf_lengths("generated"), "outputs must be one of scaled, raw"),
    (lambda: mlperf_offline(0), "samples must be an integer >= 1"),
    (lambda: mlperf_offline(10, outputs="Raw"), "outputs must be one of scaled, raw"),
    (lambda: mlperf_offline(10, seed=-1), "seed must be an integer >= 0"),
    (lambda: mlperf_offline(2.5), "samples must be an integer >= 1"),
    (lambda: mlperf_poisson(0.0, samples=10), "rate must be a finite number > 0"),
    (lambda: mlperf_poisson(-3.0, samples=10), "rate must be a finite number > 0"),
    (lambda: mlperf_poisson(float("nan"), samples=10), "rate must be a finite number > 0"),
    (lambda: mlperf_poisson(1.0), "give samples"),
    (lambda: mlperf_poisson(1.0, samples=0), "samples must be an integer >= 1"),
    (lambda: mlperf_poisson(1.0, duration=0.0), "duration must be a finite number > 0"),
    (lambda: mlperf_poisson(1.0, samples=5, outputs="x"), "outputs must be one of scaled, raw"),
    (lambda: mlperf_poisson(1e9, duration=1e6), "LLMQUEUE_MAX_REQUESTS"),
    (lambda: mlperf_poisson(1e-3, duration=1e-3), "no request arrives within duration"),
    (lambda: scale_factor(2000.0), "target must be a number from 1 to 1024"),
    (lambda: generated_lengths(np.array([1]), 0.0), "scale must be a finite number > 0"),
])
def test_bad_input_names_the_parameter_and_what_is_allowed(call, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        call()


def test_the_docstring_examples_hold():
    result = doctest.testmod(mlperf, optionflags=doctest.ELLIPSIS, report=False)
    assert result.failed == 0 and result.attempted >= 4
