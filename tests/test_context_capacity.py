"""Theorem 2's figures on a context model (the roofline) read the batch at the
workload's mean contexts (SPEC 8.6, E8.4: ``t_bmax`` becomes ``t_mix``), in
``capacity``, a run's prediction and the KV cache's joint capacity.

Before, they priced the full batch as one prompt at context 0 (50.7 ms where
E8.4's full batch at the mix takes 82.4 ms): lambda* 52.55 req/s where the
engine saturates at about 32.35, so a run at 38.8 req/s, growing by about
4,650 tokens/s, was predicted "stable".
"""

import json

import pytest

from llmqueue.cli.main import main
from llmqueue.hardware.roofline import Roofline
from llmqueue.models.context import BatchContext
from llmqueue.network.network import Network
from llmqueue.network.network import capacity as network_capacity
from llmqueue.models.latency import Staircase, StepModel
from llmqueue.theory import kv_area, lambda_joint, lambda_star, lambda_wait
from llmqueue.theory.bounds import token_bound
from llmqueue.theory.shapes import MeanContext, at_mean_context
from llmqueue.theory.stability import assess, predict

ROOFLINE = ["--set", "latency=roofline", "--set", "gpu=H100", "--set", "model=llama-3-8b",
            "--set", "bmax=2048", "--set", "vp=512", "--set", "vd=256"]
LAMBDA_MIX = 32.35   # SPEC E8.4: 2048 / t_mix / 768 with t_mix = 82.4 ms
FLUID_1_2 = 4970.0   # SPEC E8.4: lambda 768 - 2048 / t_mix at 1.2 lambda_mix


def capacity_json(capsys, *argv):
    assert main(["capacity", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_mean_context_prices_e84s_full_batch():
    roofline = Roofline("H100", "llama-3-8b")
    seen = at_mean_context(roofline, 512, 256)
    assert isinstance(seen, MeanContext)
    assert seen.tokens_time(2048) == pytest.approx(0.0824, rel=0.005)  # SPEC E8.4's t_mix
    assert lambda_star(2048, 512, 256, seen) == pytest.approx(LAMBDA_MIX, rel=0.005)
    # the same shape and floats as the token bound's mix shape (one way to price it)
    assert seen.tokens_time(2048) == token_bound(roofline, 2048, 512, 256).t_mix
    # the context-free price is far faster: the reason for all this
    assert roofline.tokens_time(2048) < 0.7 * seen.tokens_time(2048)


def test_models_of_the_batch_size_alone_are_read_as_they_are():
    staircase = Staircase()
    assert at_mean_context(staircase, 290, 990) is staircase
    assert at_mean_context(None, 290, 990) is None


@pytest.mark.parametrize("load, expected", [(0.9, "stable"), (1.2, "unstable")])
def test_prediction_on_the_roofline_is_relative_to_lambda_mix(load, expected):
    # SPEC E8.4 measures stable at <= 0.9 lambda_mix and unstable at >= 1.1
    verdict = predict(load * LAMBDA_MIX, 512, 256, work_conserving=True, bmax=2048, kmax=None,
                      latency=Roofline("H100", "llama-3-8b"))
    assert verdict == expected


def test_a_runs_load_and_fluid_slope_on_the_roofline():
    figures = assess({}, rate=1.2 * LAMBDA_MIX, mean_prefill=512, mean_decode=256,
                     work_conserving=True, bmax=2048, kmax=None,
                     latency=Roofline("H100", "llama-3-8b"))
    assert figures["load"] == pytest.approx(1.2, rel=0.005)
    assert figures["fluid_slope"] == pytest.approx(FLUID_1_2, rel=0.01)
    assert figures["predicted"] == "unstable"


def test_capacity_on_the_roofline_says_how_it_prices_the_batch(capsys):
    doc = capacity_json(capsys, *ROOFLINE, "--set", "rate=38.8", "--set", "kmax=none")
    assert doc["approximate"] is True
    assert doc["lambda_star"] == pytest.approx(LAMBDA_MIX, rel=0.005)
    assert doc["batch_time"] == pytest.approx(0.0824, rel=0.005)
    assert doc["verdicts"]["sarathi"]["predicted"] == "unstable"
    assert main(["capacity", *ROOFLINE, "--set", "rate=38.8", "--set", "kmax=none"]) == 0
    out = capsys.readouterr().out
    assert "1365 prefill tokens (one chunk at context 256) + 683 decodes" in out
    assert "approximate" in out
    plain = capacity_json(capsys)  # the staircase: Theorem 2 exactly, as before
    assert plain["approximate"] is False
    assert plain["lambda_star"] == pytest.approx(128 / 0.04675 / 1280)


def test_roofline_joint_capacity_is_below_a_rate_the_engine_cannot_serve(capsys):
    # kmax 100 on the H100 (Llama-3-8B's own KV cache): slots bind.  The context-free
    # figures put the joint capacity at 38.9 req/s; the engine grows at 28 req/s.
    doc = capacity_json(capsys, *ROOFLINE, "--set", "rate=28", "--set", "kv=auto")
    assert doc["binding"] == "slots"
    assert doc["lambda_joint"] < 28
    assert main(["run", "single", *ROOFLINE, "--set", "rate=28", "--set", "kv=auto",
                 "--horizon", "120", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["rows"][0]["verdict"] == "unstable"


def test_token_bound_with_a_slot_limit_is_above_a_rate_the_engine_serves(capsys):
    # kmax 100 caps the decodes of a full batch of 2,048 tokens: full shapes alone give
    # lambda_tok = 7.0 req/s (all 100 decodes beside 1,948 prefill tokens, 56 ms), yet
    # the engine serves 20 req/s of (512, 256) requests with a flat backlog.  Time
    # shared with batches of decodes alone (100 in about 15 ms) the bound is above it.
    roofline = Roofline("H100", "llama-3-8b")
    bound = token_bound(roofline, 2048, 512, 256, kmax=100)
    assert bound.lambda_mix == pytest.approx(7.0, rel=0.01)  # SPEC's mix shape, unchanged
    assert bound.lambda_tok > 20
    assert bound.lambda_tok < token_bound(roofline, 2048, 512, 256).lambda_tok  # slots cost
    assert main(["run", "single", *ROOFLINE, "--set", "rate=20", "--set", "arrival=poisson",
                 "--horizon", "150", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["rows"][0]["verdict"] == "stable"
    assert run["rows"][0]["throughput_tokens_per_s"] > 0.95 * 20 * 768


# --- every figure that knows the workload reads the same capacity ----------------------

def test_theorem2_on_the_roofline_sets_loads_against_lambda_mix(capsys):
    # SPEC E8.4 through the plain theorem2 experiment: load 1.2 is 1.2 lambda_mix, whose
    # fluid slope is 4,970 tokens/s; the runs grow at about that (before: 1.2 x 52.55
    # req/s, with a fluid slope priced context-free)
    assert main(["run", "theorem2", *ROOFLINE, "--set", "kmax=none", "--set", "loads=1.2",
                 "--set", "seeds=2", "--horizon", "60", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["rate"] == pytest.approx(1.2 * LAMBDA_MIX, rel=0.005)
    assert row["fluid_slope"] == pytest.approx(FLUID_1_2, rel=0.01)
    assert row["slope"] == pytest.approx(row["fluid_slope"], rel=0.2)
    assert row["unstable_runs"] == 2


def test_blowup_on_the_roofline_quotes_the_capacity_of_capacity(capsys):
    sets = ["--set", "latency=roofline", "--set", "gpu=H100", "--set", "model=llama-3-8b",
            "--set", "bmax=2048"]
    doc = capacity_json(capsys, *sets, "--set", "vp=geometric:129", "--set", "vd=geometric:112",
                        "--set", "rate=1")
    assert main(["run", "blowup", *sets, "--horizon", "20", "--set", "scheduler=sarathi"]) == 0
    out = capsys.readouterr().out
    assert f"95% of the token capacity {doc['token_capacity']:.0f} tokens/s" in out


def test_prediction_near_lambda_mix_is_a_boundary(capsys):
    # the mean contexts price a full batch a little slow: a run at 1.02 lambda_mix holds
    # (E8.4's pilot: inconclusive at 1.0); within 10% of 1 the prediction says boundary
    roofline = Roofline("H100", "llama-3-8b")
    star = lambda_star(2048, 512, 256, roofline)  # lambda_mix, at the mean contexts
    assert star == pytest.approx(LAMBDA_MIX, rel=0.005)
    for load, expected in [(0.9, "stable"), (0.95, "boundary"), (1.02, "boundary"),
                           (1.1, "unstable")]:
        assert predict(load * star, 512, 256, work_conserving=True, bmax=2048,
                       kmax=None, latency=roofline) == expected
    assert main(["run", "single", *ROOFLINE, "--set", "kmax=none",
                 "--set", f"rate={1.02 * LAMBDA_MIX}", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["predicted"] == "boundary" and row["verdict"] == "stable"


# --- memory and WAIT on the roofline -----------------------------------------------------

WAIT_SETS = ["--scheduler", "wait", "--set", "latency=roofline", "--set", "gpu=H100",
             "--set", "model=llama-3-8b", "--set", "bmax=2048", "--set", "vp=64",
             "--set", "vd=16", "--set", "wait_n=200", "--set", "kv=auto", "--set", "kmax=none"]


def test_lambda_wait_tells_a_context_model_wait_s_own_batch():
    # WAIT(200) on (64, 16): each iteration 200 whole prompts from context 0 and 200
    # decoders at each of 16 stages, holding 64 .. 79 tokens
    roofline = Roofline("H100", "llama-3-8b")
    context = BatchContext.of(decode_contexts=[64 + s for s in range(16) for _ in range(200)],
                              chunks=[(64, 0)] * 200)
    expected = 200 / roofline.batch_time(200 * 16, 200 * 64, 200 * 17, context)
    assert lambda_wait([(64, 16, 1)], [200], roofline) == pytest.approx(expected, rel=1e-12)


def test_wait_on_the_roofline_is_stable_below_lambda_wait(capsys):
    doc = capacity_json(capsys, *WAIT_SETS, "--set", "rate=480")
    assert doc["lambda_wait"] > 480  # priced at context 0 and one chunk of prompts: 408
    assert main(["run", "single", *WAIT_SETS, "--set", "rate=480", "--horizon", "60",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["verdict"] == "stable"


@pytest.mark.slow
def test_wait_on_the_roofline_grows_above_lambda_wait(capsys):
    doc = capacity_json(capsys, *WAIT_SETS, "--set", "rate=505")
    assert doc["lambda_wait"] < 505  # priced context-free: 512.6
    assert main(["run", "single", *WAIT_SETS, "--set", "rate=505", "--horizon", "200",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["verdict"] == "unstable"


def test_memory_never_binds_where_the_cache_outholds_the_budget(capsys):
    # (64, 16) on the H100's 421,011-token cache: b* = 28,232 tokens > bmax = 2048, so the
    # budget's iterations already give the KV its room.  Pricing b* tokens in one batch
    # on the roofline put mu_mem (359 req/s) below the compute capacity (471) and called
    # memory binding; a run at 400 req/s holds.
    sets = [*ROOFLINE[:-4], "--set", "vp=64", "--set", "vd=16", "--set", "kv=auto",
            "--set", "kmax=none"]
    doc = capacity_json(capsys, *sets, "--set", "rate=400")
    assert doc["b_star"] > 2048 and doc["binding"] == "compute"
    assert doc["lambda_joint"] == pytest.approx(doc["lambda_star"])
    assert main(["run", "single", *sets, "--set", "rate=400", "--horizon", "60",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["verdict"] == "stable" and row["predicted"] == "stable"


# --- models of the split, the region inside the band, the API's joint capacity ----------

def test_the_step_model_is_read_at_the_workload_s_mix(capsys):
    # SPEC 4's step model charges 0.8 ms a decode and 0.02 ms a prefill token: its full
    # batch of 512 tokens at 129 + 112 (238 decodes, 274 prefill tokens) takes
    # 5 + 190.4 + 5.48 + 0.3 * 274**0.6 ms, where priced as one prompt it took 20 ms
    t_mix = 0.005 + 0.0008 * 238 + 0.00002 * 274 + 0.0003 * 274 ** 0.6
    star = 512 / t_mix / 241
    assert lambda_star(512, 129, 112, StepModel()) == pytest.approx(star, rel=1e-12)
    sets = ["--set", "latency=step", "--set", "bmax=512", "--set", "kmax=none",
            "--set", "vp=129", "--set", "vd=112"]
    assert main(["run", "single", *sets, "--set", "rate=11.2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["verdict"] == "unstable" and row["predicted"] == "unstable"  # load 1.105
    assert row["backlog_slope"] == pytest.approx(11.2 * 241 - 512 / t_mix, rel=0.05)


def test_outside_theorem_10_s_region_the_band_is_unstable_too():
    # 8 slots on the roofline serve a few decodes per batch: every load of (512, 256)
    # requests around lambda_mix lies outside the region, and the prediction says so
    roofline = Roofline("H100", "llama-3-8b")
    star = lambda_star(2048, 512, 256, roofline)
    assert [predict(x * star, 512, 256, work_conserving=True, bmax=2048, kmax=8,
                    latency=roofline) for x in (0.5, 0.95, 1.05, 1.2)] == ["unstable"] * 4


def test_joint_capacity_reads_a_raw_context_model_as_capacity_does():
    roofline = Roofline("H100", "llama-3-8b")
    g = kv_area(512, 256)
    raw = lambda_joint(60_000, 512, 256, g, 2048, roofline, kmax=100)
    seen = lambda_joint(60_000, 512, 256, g, 2048, at_mean_context(roofline, 512, 256),
                        kmax=100)
    assert raw == seen
    assert raw.compute == pytest.approx(LAMBDA_MIX, rel=0.005)


# --- a network's engines read the mix of the requests they got -------------------------

def test_parallel_engines_on_the_roofline_report_the_load_they_were_given(capsys):
    # two engines, each offered 0.9 of lambda_mix: each row's load is 0.9 against the
    # capacity `capacity` gives (before: 0.57 against 40,362 tokens/s, context-free)
    doc = capacity_json(capsys, *ROOFLINE, "--set", "rate=1", "--set", "kmax=none")
    assert main(["run", "parallel", *ROOFLINE, "--set", "load=0.9", "--set", "sizes=fixed",
                 "--set", "engines=2", "--horizon", "30", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for row in rows[:2]:
        assert row["capacity_tokens_per_s"] == pytest.approx(doc["token_capacity"], rel=1e-12)
        assert row["load"] == pytest.approx(0.9, rel=0.02)


def test_an_engine_of_prefilled_calls_prices_decodes_at_their_prompts():
    # a decode engine of disaggregation: its calls bring 1000-token prompts as context
    # and 5 decode tokens of work, so its full batch is 64 decodes at context
    # 1000 + (5 - 1)/2 = 1002, not a prompt of 64 tokens at context 0
    roofline = Roofline("H100", "llama-3-8b")
    net = Network()
    engine = net.add_engine("d", "sarathi", bmax=64, kmax=None, latency=roofline)
    for _ in range(3):
        engine.call(1000, 5, prefilled=True)
    net.run()
    expected = 64 / roofline.batch_time(64, 0, 64, BatchContext(decode_ctx=64 * 1002))
    assert network_capacity(engine) == pytest.approx(expected, rel=1e-12)
    assert network_capacity(engine) < 0.7 * 64 / roofline.tokens_time(64)  # context-free
