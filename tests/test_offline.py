"""Offline batches (``offline``, ``run offline``) worked by hand, and the engine
presets (``engine=trtllm|vllm|sglang``)."""

import itertools
import json

import pytest

import llmqueue as q
from llmqueue import experiments, sweeps
from llmqueue.cli.main import main
from llmqueue.experiments.presets import preset
from llmqueue.models.workload import offline

T = 0.04675  # the paper's staircase for a batch of at most 128 tokens


def test_an_offline_batch_is_all_there_at_time_zero():
    batch = offline(3, 128, 16, seed=4)
    assert [(a.time, a.prefill, a.decode) for a in batch] == [(0.0, 128, 16)] * 3
    assert (batch.count, batch.rate, batch.initial) == (3, None, 3)
    # the same requests as initial=N of a stream with that seed
    stream = q.compose(q.Renewal(1.0), q.UniformInt(1, 50), q.UniformInt(1, 9), seed=7,
                       initial=5)
    drawn = offline(5, q.UniformInt(1, 50), q.UniformInt(1, 9), seed=7)
    assert [a[1:3] for a in drawn] == [a[1:3] for a in itertools.islice(stream, 5)]


@pytest.mark.parametrize("first, iterations", [("decode", 6), ("prefill", 5)])
def test_an_offline_batch_by_hand(first, iterations):
    # 4 x (10 + 5) tokens, no budget: one prefill iteration of 40 tokens, then decodes
    # (5 of them, or 4 when the prefill emits the first token), all at T
    s = q.simulate(offline(4, 10, 5), bmax=None, kmax=None, first_token=first).summary
    end = iterations * T
    assert (s.completed, s.batches) == (4, iterations)
    assert s.duration == pytest.approx(end)
    assert s["output_tokens_per_s"] == pytest.approx(20 / end)
    assert s["prefill_tokens_per_s"] == pytest.approx(40 / end)
    assert s.throughput_tokens_per_s == pytest.approx((40 + 4 * (iterations - 1)) / end)


def test_an_offline_batch_on_the_staircase_steps():
    # 4 x (100 + 2): a prefill of 400 tokens is 4 steps of 128: c + 4a; then decodes at T
    first = 0.01128 + 4 * 0.03547
    for mode, end in (("decode", first + 2 * T), ("prefill", first + T)):
        s = q.simulate(offline(4, 100, 2), bmax=None, kmax=None, first_token=mode).summary
        assert s.duration == pytest.approx(end)
        assert s["output_tokens_per_s"] == pytest.approx(8 / end)


def run_json(capsys, *args):
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_offline_runs_every_request_to_its_end(capsys):
    doc = run_json(capsys, "offline", "--set", "requests=4", "--set", "vp=10", "--set", "vd=5",
                   "--set", "bmax=none", "--set", "kmax=none")
    row = doc["rows"][0]
    assert doc["params"]["horizon"] is None
    assert (row["completed"], row["duration"]) == (4, pytest.approx(6 * T))
    assert row["throughput_requests_per_s"] == pytest.approx(4 / (6 * T))
    assert main(["run", "offline", "--horizon", "5"]) == 2
    assert "does not support horizon" in capsys.readouterr().err


def test_presets_resolve_to_the_documented_settings():
    single = experiments.get("single")
    p = single.resolve({"engine": "trtllm"})
    assert {k: p[k] for k in ("scheduler", "bmax", "kmax", "chunked", "first_token")} == \
        {"scheduler": "sarathi", "bmax": 8192, "kmax": 2048, "chunked": False,
         "first_token": "prefill"}
    assert (p["kv"], p["kv_admission"], p["kv_block"]) == (None, "lazy", 1)  # no cache: quiet
    p = single.resolve({"engine": "trtllm", "kv": "1000"})
    assert (p["kv_admission"], p["kv_block"], p["kv_watermark"]) == ("peak", 32, 0.0)
    p = single.resolve({"engine": "vllm", "kv": "1000"})
    assert (p["scheduler"], p["bmax"], p["kmax"], p["chunked"]) == ("sarathi", 8192, 1024, True)
    assert (p["kv_admission"], p["kv_block"]) == ("lazy", 16)
    p = single.resolve({"engine": "sglang", "kv": "1000"})
    assert (p["scheduler"], p["bmax"], p["kmax"], p["kv_admission"], p["kv_block"]) == \
        ("vllm", 8192, None, "prompt", 1)
    assert single.resolve({}) == single.resolve({"engine": "none"}) | {"engine": "none"}


def test_presets_follow_the_gpu_where_the_engine_does():
    assert (preset("vllm", "A100-80GB")["bmax"], preset("vllm", "A100-80GB")["kmax"]) == \
        (2048, 256)
    assert (preset("vllm", "H100")["bmax"], preset("vllm", "H100")["kmax"]) == (8192, 1024)
    assert preset("sglang", "H100")["bmax"] == 8192
    assert preset("sglang", "MI300X")["bmax"] == 16384
    assert preset("trtllm", "A100-40GB")["bmax"] == 8192


def test_explicit_keys_override_a_preset():
    single = experiments.get("single")
    p = single.resolve({"engine": "trtllm", "kv": "1000", "kmax": "64",
                        "kv_admission": "lazy", "scheduler": "orca", "first_token": "decode"})
    assert (p["kmax"], p["kv_admission"], p["scheduler"], p["first_token"]) == \
        (64, "lazy", "orca", "decode")
    assert (p["bmax"], p["kv_block"]) == (8192, 32)  # the others from the preset
    tasks = sweeps.runner.plan(single, {"engine": ["trtllm", "none"]}, fixed={"bmax": 256})
    assert [(t.params["bmax"], t.params["kmax"]) for t in tasks] == [(256, 2048), (256, 100)]


def test_an_offline_batch_under_the_trtllm_preset_recomputes_nothing():
    # lazy admission with no slot limit overfills the cache and recomputes; TensorRT-LLM's
    # guaranteed-no-evict (peak) reserves each request's whole KV at its start
    offline_run = experiments.get("offline")
    common = {"kv": "20000", "requests": "120", "vp": "128", "vd": "512"}
    lazy = offline_run.execute(offline_run.resolve({**common, "kmax": "none"}))[0][1].summary
    assert lazy["recompute_fraction"] > 0.05
    trt = offline_run.execute(offline_run.resolve({**common, "engine": "trtllm"}))[0][1].summary
    assert (trt["completed"], trt["preemptions"], trt["recompute_fraction"]) == (120, 0, 0.0)
