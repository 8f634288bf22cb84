"""How a plan's requests fit the KV cache, said once before any simulation
(llmqueue.planning.fit): the memory arithmetic against a hand computation from
the model's published shape, the share that can never fit in closed forms,
one statement instead of a warning per replication, and a workload none of
whose requests fits answered at once."""

import json
import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.cli.plan import configure
from llmqueue.models.sizes import SizeLaw
from llmqueue.planning import EngineSpec, Traffic, plan
from llmqueue.planning import replicate
from llmqueue.planning.fit import (EXACT, OBSERVED, SURVIVAL, NeverFitWarning, binding,
                                   diagnose, memory_note, memory_of, never_share)
from llmqueue.planning.replicate import Task, run_replication
from llmqueue.theory.slo import SLO

GiB = 2 ** 30
#: Llama-3-70B's published shape (its config.json): layers, hidden, heads, KV
#: heads, head size, FFN, vocabulary; SwiGLU (3 FFN matrices), untied embeddings.
L, H, NQ, NKV, D, F, V = 80, 8192, 64, 8, 128, 28672, 128256
PARAMS = L * (H * NQ * D + 2 * H * NKV * D + NQ * D * H + 3 * H * F) + 2 * V * H
KAPPA = 2 * L * NKV * D * 2  # K and V, every layer, 2 bytes (bf16) per element
H100 = 80 * GiB

SMALL = ["--set", "bmax=512", "--set", "kmax=none", "--set", "vp=geometric:64",
         "--set", "vd=geometric:64", "--set", "kv=400", "--ttft", "5", "--requests", "100",
         "--reps", "2"]


def test_memory_of_llama_3_70b_on_two_h100_by_hand():
    assert PARAMS == 70_552_387_584  # the published 70.6 B
    m = memory_of("H100", "llama-3-70b", tp=2)
    assert m.weights == PARAMS * 2
    assert m.weights_per_gpu == PARAMS * 2 / 2  # bytes per weight 2, split over tp = 2
    assert m.left_per_gpu == H100 - PARAMS
    assert m.kappa == KAPPA == 327_680
    # vLLM's 0.9 of all memory, less weights, 5.5 GiB of activations per GPU, 0.6 GiB reserve
    left = 0.9 * 2 * H100 - 2 * PARAMS - 2 * 5.5 * GiB - 0.6 * GiB
    assert m.pool == pytest.approx(left)
    assert m.tokens == math.floor(left / KAPPA) == 3230
    # TensorRT-LLM's share of the memory left free
    free = memory_of("H100", "llama-3-70b", tp=2, fraction=0.5, of="free")
    assert free.tokens == math.floor(0.5 * (2 * H100 - 2 * PARAMS - 11 * GiB - 0.6 * GiB) / KAPPA)
    # fp8 weights: one byte each (the vocabulary matrices stay bf16)
    fp8 = memory_of("H100", "llama-3-70b", tp=2, precision="fp8")
    assert fp8.weights == (PARAMS - 2 * V * H) * 1 + 2 * V * H * 2


def test_the_plan_reads_the_same_pool_and_says_it():
    engine, traffic = configure(["latency=roofline", "gpu=H100", "model=llama-3-70b", "tp=2",
                                 "kv=auto", "vp=geometric:1024", "vd=geometric:512"])
    fit = diagnose(traffic, engine)  # the memory comes from the roofline
    assert fit.kv_tokens == fit.fit_tokens == fit.memory.tokens == 3230
    p, d = 1 - 1 / 1024, 1 - 1 / 512  # P(vp + vd > 3230), summed by hand
    by_hand = p ** 3229 + sum((1 / 1024) * p ** (k - 1) * d ** (3230 - k) for k in range(1, 3230))
    assert fit.never == pytest.approx(by_hand, rel=1e-9) and fit.method == SURVIVAL
    assert fit.ceiling == pytest.approx(1 - by_hand)
    text = fit.statement()
    for part in ("65.71 GiB per GPU", "3,230 tokens", "vp + vd = 3,230", "8.34%",
                 "at most 0.9166"):
        assert part in text, text


def test_fixed_sizes_fit_or_not_exactly():
    assert never_share(100, 50, 150) == (0.0, EXACT)
    assert never_share(100, 50, 149) == (1.0, EXACT)
    assert never_share(100, 0, 100)[0] == 1.0  # an output of 0 tokens is 1
    assert never_share(q.UniformInt(0, 2), 5, 6) == (0.0, SURVIVAL)  # decode 0 counts as 1


@pytest.mark.parametrize("fit", [1, 7, 400, 3000])
def test_geometric_laws_in_closed_form(fit):
    m = 64.0
    p, r = 1 / m, 1 - 1 / m
    # the sum of two geometrics on 1, 2, ...: fewer than two successes in `fit` trials
    both = r ** fit + fit * p * r ** (fit - 1)
    assert never_share(q.Geometric(m), q.Geometric(m), fit)[0] == pytest.approx(both, rel=1e-9)
    # a fixed prompt of 10 tokens and a geometric output: P(vd > fit - 10)
    fixed = 1.0 if fit <= 10 else r ** (fit - 10)
    assert never_share(10, q.Geometric(m), fit)[0] == pytest.approx(fixed, rel=1e-9)
    # two different means: sum over the prompt, with a geometric series
    a, b = 1 - 1 / 30, 1 - 1 / 90
    two = a ** (fit - 1) + (1 / 30) * b ** (fit - 1) * sum((a / b) ** j for j in range(fit - 1))
    assert never_share(q.Geometric(30), q.Geometric(90), fit)[0] == pytest.approx(two, rel=1e-9)


def test_other_laws_agree_with_a_large_sample():
    rng = np.random.default_rng(3)
    for prompt, decode in [(q.LogNormal(300, 1.5), q.LogNormal(200, 1.0)),
                           (q.UniformInt(100, 900), q.Geometric(300)),
                           (q.Mixture([(0.8, q.Geometric(100)), (0.2, q.Fixed(1500))]),
                            q.Geometric(80))]:
        share, method = never_share(prompt, decode, 1700)
        sample = prompt.sample(rng, 400_000) + np.maximum(decode.sample(rng, 400_000), 1)
        assert method == SURVIVAL and share == pytest.approx(np.mean(sample > 1700), abs=3e-3)


def test_observed_sizes_are_counted_and_other_laws_sampled():
    pairs = Traffic.samples([100, 300, 500, 50], [100, 150, 1, 40])
    fit = diagnose(pairs, EngineSpec(kv=q.KV(capacity_tokens=450)))
    assert (fit.never, fit.method) == (0.25, OBSERVED)  # 500 + 1 only: one of four
    empirical = never_share(q.Empirical(np.array([10, 20, 30, 40])), 5, 30)
    assert empirical == (0.5, OBSERVED)  # 30 + 5 and 40 + 5

    class Odd(SizeLaw):  # no survival function
        mean = 50.0

        def sample(self, rng, n):
            return rng.integers(0, 101, n)
    share, method = never_share(Odd(), 10, 100)
    assert share == pytest.approx(10 / 101, abs=0.005) and "sample of 100,000" in method


def test_a_replication_scores_requests_that_never_fit_as_before_without_simulating_them(
        monkeypatch):
    engine = EngineSpec("sarathi", bmax=512, kmax=None, kv=q.KV(capacity_tokens=400))
    traffic = Traffic(q.Geometric(64), q.Geometric(64))
    task = Task(traffic, engine, SLO(ttft=5.0), 0.4, 0, 0, 10, 150, 0.9, "joint", False)
    new = run_replication(task)
    monkeypatch.setattr(replicate, "never_fits",
                        lambda engine, vp, vd: np.zeros(len(vp), dtype=bool))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = run_replication(task)  # every request submitted: the engine ignores some
    assert new.attainment == old.attainment < 1 and new.ttft == old.ttft
    assert new.simulated_time <= old.simulated_time  # no wait for requests never served


def test_a_replication_with_too_many_that_never_fit_stops_before_it_simulates():
    engine = EngineSpec("sarathi", bmax=512, kmax=None, kv=q.KV(capacity_tokens=130))
    traffic = Traffic(q.Geometric(64), q.Geometric(64))  # 39% never fit
    run = run_replication(Task(traffic, engine, SLO(ttft=5.0), 0.4, 0, 0, 10, 100, 0.9,
                               "joint", True))
    assert run.stopped and run.simulated_time == 0 and run.attainment < 0.9


def test_the_python_plan_warns_once_and_carries_the_fit():
    engine = EngineSpec("sarathi", bmax=512, kmax=None, kv=q.KV(capacity_tokens=400))
    traffic = Traffic(q.Geometric(64), q.Geometric(64))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = plan(traffic, engine, SLO(ttft=5.0), n_requests=100, reps=2, max_probes=3)
    never = [w for w in seen if "can never fit" in str(w.message)]
    assert len(never) == 1 and never[0].category is NeverFitWarning
    assert r.fit.never == pytest.approx(math.exp(0) * (1 - 1 / 64) ** 400
                                        + 400 / 64 * (1 - 1 / 64) ** 399)
    assert r.as_dict()["fit"]["never_share"] == r.fit.never
    assert binding(r.bounds) == "lambda_kv" and "memory binds" in memory_note(r.bounds, r.fit)


def test_the_command_says_it_once():
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "plan", *SMALL], text=True,
                          capture_output=True, cwd=os.path.dirname(__file__))
    assert proc.returncode == 0, proc.stderr
    both = proc.stdout + proc.stderr
    assert both.count("can never fit") == 1, both
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fit: the KV cache holds 400 tokens;") and "1.35%" in lines[0]
    assert "joint mode, target 0.9" in lines[1] and "latencies at p90" in lines[1]
    assert any(line.startswith("note: memory binds: lambda_kv") for line in lines)


def test_json_has_the_fit_and_how_attainment_is_judged(capsys):
    assert main(["plan", *SMALL, "--mode", "quantile", "--target", "0.95", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fit"]["kv_tokens"] == 400 and doc["fit"]["method"] == SURVIVAL
    assert doc["binding"] == "lambda_kv"
    assert "0.95-quantile (p95)" in doc["judged"]


def test_a_workload_that_never_fits_is_infeasible_at_once(capsys):
    engine = EngineSpec("sarathi", bmax=512, kmax=None, kv=q.KV(capacity_tokens=100))
    with pytest.warns(NeverFitWarning):
        r = plan(Traffic(290, 990), engine, SLO(ttft=1.0), n_requests=100, reps=2)
    assert r.infeasible and r.probes == () and r.fit.none_fit and "count as misses" in r.reason
    # a share that never fits above 1 - target: infeasible too, without a probe
    with pytest.warns(NeverFitWarning):
        r = plan(Traffic(q.Geometric(64), q.Geometric(64)),
                 EngineSpec("sarathi", bmax=512, kmax=None, kv=q.KV(capacity_tokens=200)),
                 SLO(ttft=5.0), 0.95, n_requests=100, reps=2)
    assert r.infeasible and r.probes == () and "at most 0.8" in r.reason
    assert main(["plan", "--ttft", "1", "--set", "kv=100", "--set", "latency=roofline",
                 "--set", "gpu=H100", "--set", "model=llama-3-8b"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no request of this workload can ever fit" in out[0]


def test_help_documents_the_mode_and_its_quantile(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for part in ("joint (default)", "quantile", "0.99 reads p99", "--grid", "H100=2.21"):
        assert part in text, part
