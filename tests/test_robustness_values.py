"""Issue 30, part C: hostile values.  Integers beyond any setting, values of
the wrong type, errors that named an internal quantity instead of the user's
setting, and figures that were silent nonsense.  From the command line each
bad input is exit code 2 with one line on stderr naming the setting and what
is allowed; from the API a ``ValueError``."""

import time

import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.common.validation import MAX_INT
from llmqueue.hardware.efficiency import Efficiency
from llmqueue.hardware.memory import kv_capacity
from llmqueue.hardware.roofline import Roofline
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.models.latency import Interpolated, Staircase
from llmqueue.models.sizes import Empirical, Fixed, Mixture
from llmqueue.theory import capacity
from llmqueue.theory.bounds import token_bound
from llmqueue.theory.shapes import MIX_TOKENS, at_mean_context

HUGE = "9" * 400
#: A config.json of Llama-3-8B's shape.
CONFIG = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
          "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
          "hidden_act": "silu"}


def one_line_error(argv, capsys, *fragments):
    """``main(argv)`` fails at once with exit code 2 and one stderr line
    holding every fragment, no traceback."""
    start = time.perf_counter()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmqueue: error: ") and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and all(f in err for f in fragments), err
    assert len(err) < 400, err  # a 400-digit value is not echoed in full
    assert time.perf_counter() - start < 10


LIMIT = "2**62"


@pytest.mark.parametrize("argv, fragments", [
    (["run", "single", "--set", f"bmax={HUGE}"], ("bmax must be an integer from 1 to", LIMIT)),
    (["run", "single", "--set", f"kv={HUGE}"], ("kv must be an integer from 1 to", LIMIT)),
    (["run", "single", "--set", f"initial={HUGE}"], ("initial must be", LIMIT)),
    (["run", "single", "--set", f"bmax={2**62 + 1}"], ("bmax must be", LIMIT)),
    (["capacity", "--set", f"bmax={HUGE}"], ("bmax must be", LIMIT)),
    (["capacity", "--set", f"kv={HUGE}"], ("kv must be", LIMIT)),
    (["plan", "--ttft", "1", "--set", f"bmax={HUGE}"], ("bmax must be", LIMIT)),
    (["plan", "--ttft", "1", "--set", f"kv={HUGE}"], ("kv must be", LIMIT)),
    (["sweep", "single", "--grid", f"bmax=128,{HUGE}", "--out", "{out}"],
     ("grid bmax must be", LIMIT)),
    (["sweep", "single", "--grid", f"initial={HUGE}", "--out", "{out}"],
     ("grid initial must be", LIMIT)),
    # a block of 2**40 tokens was a MemoryError
    (["run", "single", "--set", "kv=1099511627776", "--set", "kv_block=1099511627776"],
     ("kv_block must be an integer from 1 to 1,048,576",)),
])
def test_integers_beyond_any_setting_are_one_line_errors(argv, fragments, capsys, tmp_path):
    argv = [a.format(out=tmp_path / "out.csv") for a in argv]
    one_line_error(argv, capsys, *fragments)


@pytest.mark.parametrize("build, fragment", [
    (lambda: q.simulate(q.renewal(1.0, 10, 2), bmax=10**400, horizon=5), "bmax must be"),
    (lambda: q.simulate(q.renewal(1.0, 10, 2), kmax=2**62 + 1, horizon=5), "kmax must be"),
    (lambda: q.simulate(q.renewal(1.0, 10, 2, count=3), horizon=10**400), "horizon must be"),
    (lambda: q.simulate(q.renewal(1.0, 10, 2, count=3), horizon=1e300),
     r"horizon must be a finite number > 0 and at most 1e\+12 s"),
    (lambda: Staircase(b0=10**400), "b0 must be"),
    (lambda: Staircase(c=10**400), "c must be a finite number"),
    (lambda: q.KV(capacity_tokens=10**400), "capacity_tokens must be"),
    (lambda: q.KV(num_blocks=2**61, block_size=16), "num_blocks x block_size"),
    (lambda: q.KV(capacity_tokens=2**40, block_size=2**40), "block_size must be"),
    (lambda: q.KV(100, preemption="swap", swap_tokens=10**400), "swap_tokens must be"),
    (lambda: GPU("g", 10**400, 1e12, 8e10, 1e11), "GPU g flops must be a number from 1 to"),
    (lambda: GPU("g", 1e15, 1e12, 1e308, 1e11), "GPU g memory must be"),
    (lambda: kv_capacity("H100", "llama-3-8b", 10**400), "tp must be"),
    (lambda: kv_capacity("H100", "llama-3-8b", utilization=10**400), "utilization must be"),
    (lambda: ModelShape.from_hf_config({**CONFIG, "hidden_size": 10**400}),
     "config: hidden_size must be an integer from 1 to"),
    (lambda: Roofline("H100", "llama-3-8b").to_staircase(10**12),
     "bmax must be an integer from 2 to 65,536"),
])
def test_the_api_refuses_integers_beyond_any_setting(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build()


def test_the_largest_settings_allowed_still_run():
    s = q.simulate(q.renewal(1.0, 10, 2), bmax=MAX_INT, kmax=MAX_INT, horizon=5,
                   kv=q.KV(MAX_INT)).summary
    assert s["completed"] > 0


def test_a_model_config_of_another_type_or_too_deep_is_a_value_error(tmp_path):
    for config in ([1, 2], b"{}", None, 5):
        with pytest.raises(ValueError, match="config must be a mapping"):
            ModelShape.from_hf_config(config)
    deep = tmp_path / "config.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        ModelShape.from_hf_config(str(deep))


@pytest.mark.parametrize("build, fragment", [
    (lambda: q.read_csv(5), "path must be a file name"),
    (lambda: q.read_csv(None), "path must be a file name"),
    (lambda: Mixture([Fixed(1)]), r"parts\[0\] must be a \(weight, law\) pair"),
    (lambda: Mixture(Fixed(1)), "parts must list"),
    (lambda: Empirical(["1", "2"]), "values must be whole token counts"),
    (lambda: Empirical([2**41]), "values must be whole token counts"),
    (lambda: Interpolated(["1", "2"], [0.1, 0.2]), "tokens must be a list of numbers"),
    (lambda: Interpolated([1, 2], ["0.1", "0.2"]), "seconds must be a list of numbers"),
    (lambda: Interpolated([1, 2], [True, 0.2]), "seconds must be a list of numbers"),
])
def test_values_of_the_wrong_type_are_value_errors(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build()


@pytest.mark.parametrize("flag", ["no", "yes", 1, 0])
def test_check_invariants_takes_a_bool_or_none_only(flag):
    with pytest.raises(ValueError, match="check_invariants must be True, False or None"):
        q.simulate(q.renewal(1.0, 10, 2, count=2), check_invariants=flag)
    q.simulate(q.renewal(1.0, 10, 2, count=2), check_invariants=False)


@pytest.mark.parametrize("argv, fragments", [
    (["run", "single", "--set", "vp=²"], ("vp must be a whole number of tokens", "uniform:LO:HI")),
    (["run", "single", "--set", "kv=10000", "--set", "kv_preemption=swap", "--set",
      "kv_swap=10000", "--set", "kv_swap_cost=1e300"],
     ("kv_swap_cost", "at most 5e+07 s per token")),
    (["run", "disaggregated", "--set", "transfer=1e13"],
     ("transfer must be a number from 0 to 1e+12",)),
    (["run", "kmax-region", "--chrome-trace", "{out}.json"],
     ("kmax-region does not support --chrome-trace",)),
    (["run", "kmax-region", "--plot", "{out}.png"], ("kmax-region does not support --plot",)),
    (["run", "parallel", "--set", "vp=0"], ("vp must be a whole number of tokens from 1",)),
    (["run", "kmax-region", "--set", "gap=-1"], ("gap must be a finite number > 0 and at most",)),
    (["run", "kmax-point", "--set", "gap=1e13"], ("gap must be",)),
])
def test_errors_name_the_users_setting(argv, fragments, capsys, tmp_path):
    argv = [a.format(out=tmp_path / "out") for a in argv]
    one_line_error(argv, capsys, *fragments)


def test_a_job_delay_or_a_network_horizon_beyond_the_clock_names_itself():
    net = q.Network()
    net.add_engine("e")
    with pytest.raises(ValueError, match="horizon must be a finite number > 0 and at most"):
        net.run(1e300)

    def job(ctx):
        yield ctx.delay(1e13)
    q.start_jobs(net, job, times=[0.0])
    with pytest.raises(ValueError, match="delay must be a finite number >= 0 and at most"):
        net.run(1.0)


def test_a_roofline_budget_beyond_any_batch_prices_as_the_largest_one():
    roofline = Roofline("H100", "llama-3-8b")
    seen = at_mean_context(roofline, 290, 990)
    base = capacity.load(2.139, MIX_TOKENS, 290, 990, roofline)
    assert base < 0.25  # point C's rate: far below the capacity
    for bmax in (10**5, 10**8, MAX_INT):  # a larger budget is never slower per token
        assert capacity.load(2.139, bmax, 290, 990, roofline) == pytest.approx(base, rel=1e-9)
        assert capacity.token_capacity(bmax, seen) == pytest.approx(
            capacity.token_capacity(MIX_TOKENS, seen), rel=1e-9)
        for kmax in (None, 100):
            assert token_bound(roofline, bmax, 290, 990, kmax) == \
                token_bound(roofline, MIX_TOKENS, 290, 990, kmax)
    # budgets a server uses are priced as before (SPEC E8.4's t_mix at 2048)
    assert capacity.token_capacity(2048, seen) == pytest.approx(14718, abs=1)


@pytest.mark.parametrize("latency", [Staircase(), Roofline("H100", "llama-3-8b")])
def test_the_mix_shape_holds_a_decode_when_requests_decode_one_token(latency):
    bound = token_bound(latency, 128, 290, 1)
    p, d = bound.mix_shape
    assert d >= 1 and p >= 1 and bound.lambda_mix > 0
    assert bound.lambda_mix == pytest.approx(bound.lambda_tok, rel=0.02)


def test_a_roofline_too_slow_for_a_run_names_the_gpu_field():
    with pytest.raises(ValueError, match="GPU slow flops must be a number from 1 to"):
        GPU("slow", 1e-300, 3.35e12, 8e10, 4.5e11)
    with pytest.raises(ValueError, match="GPU slow hbm must be"):
        GPU("slow", 9.9e14, 1e-300, 8e10, 4.5e11)
    with pytest.raises(ValueError, match="GPU slow flops=1 is too slow"):
        Roofline(GPU("slow", 1.0, 3.35e12, 8e10, 4.5e11), "llama-3-8b")
    with pytest.raises(ValueError, match="GPU H100 flops=.* is too slow"):
        Roofline("H100", "llama-3-8b", efficiency=Efficiency(mfu=1e-300))
    with pytest.raises(ValueError, match="GPU H100 link=.* is too slow"):
        Roofline("H100", "llama-3-8b", tp=2, efficiency=Efficiency(eta_link=1e-300))
