"""``llmqueue latency --precision/--attention-precision/--kv-cache-dtype``:
the run keys' meanings and values, priced as the roofline's docstring states."""

import json

import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.hardware.efficiency import Efficiency
from llmqueue.hardware.latency import precision_of
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.roofline import Roofline
from llmqueue.hardware.specs import gpu, model
from llmqueue.models.context import BatchContext

BASE = ["latency", "--gpu", "H100", "--model", "llama-3.1-8b"]


def latency_json(capsys, *argv):
    assert main([*BASE, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_fp8_weights_halve_a_compute_bound_prefill_s_gemms(capsys):
    bf16 = latency_json(capsys, "--prefill", "8192")
    fp8 = latency_json(capsys, "--prefill", "8192", "--precision", "fp8")
    assert bf16["bound"]["t_lin"] == fp8["bound"]["t_lin"] == "compute"
    # t_lin's compute side: 2*T^*P_L at the weights' rate plus 2*S*P_head at the
    # head's (bf16 in an FP8 checkpoint), both at mfu; T = 8192 is whole tiles, S = 1
    h100, shape, mfu = gpu("H100"), model("llama-3.1-8b"), Efficiency().mfu
    gemm, head = 2 * 8192 * shape.layer_params(), 2 * shape.head_params()
    assert bf16["t_lin"] == pytest.approx((gemm + head) / (h100.flops * mfu), rel=1e-12)
    assert fp8["t_lin"] == pytest.approx(gemm / (h100.fp8_flops * mfu)
                                         + head / (h100.flops * mfu), rel=1e-12)
    assert fp8["t_lin"] / bf16["t_lin"] == pytest.approx(0.5, abs=0.01)
    # nothing else of a prefill changes with the weights' format
    assert fp8["t_ap"] == bf16["t_ap"] and fp8["t_el"] == bf16["t_el"]
    assert (bf16["precision"], fp8["precision"]) == ("bf16", "fp8")
    assert fp8["formats"] == {"weights": "fp8", "attention": "bf16", "kv": "bf16",
                              "head": "bf16", "activations": "bf16"}


def test_the_flags_price_as_a_roofline_built_with_their_precision(capsys):
    doc = latency_json(capsys, "--decode", "64", "--context", "3000", "--prefill", "512",
                       "--precision", "fp8", "--attention-precision", "fp8",
                       "--kv-cache-dtype", "fp8_e4m3")
    precision = Precision.of("fp8", attention="fp8", kv="fp8")
    assert precision_of("fp8", "fp8", "fp8_e4m3") == precision
    direct = Roofline("H100", "llama-3.1-8b", precision=precision)
    ctx = BatchContext(64 * 3000, 1, 0, 512 * 512, 0)
    assert doc["seconds"] == direct.breakdown(64, 512, 65, ctx).seconds
    assert doc["kv_capacity"] == direct.kv_capacity
    assert (doc["attention_precision"], doc["kv_cache_dtype"]) == ("fp8", "fp8_e4m3")
    # beside the same FP8 weights, an FP8 KV cache holds twice the tokens of a bf16 one
    plain = latency_json(capsys, "--decode", "1", "--precision", "fp8")
    assert doc["kv_capacity"] / plain["kv_capacity"] == pytest.approx(2, rel=1e-5)


def test_the_printed_line_states_the_precision(capsys):
    assert main([*BASE, "--prefill", "128", "--precision", "fp8"]) == 0
    assert ", precision fp8:" in capsys.readouterr().out.splitlines()[0]
    assert main([*BASE, "--prefill", "128", "--kv-cache-dtype", "fp8"]) == 0
    assert "precision weights bf16, attention bf16, KV cache fp8:" in capsys.readouterr().out
    assert main([*BASE, "--prefill", "128"]) == 0
    assert ", precision bf16:" in capsys.readouterr().out


@pytest.mark.parametrize("flag, value, allowed", [
    ("--precision", "fp4", "bf16, fp16, fp8"),
    ("--precision", "auto", "bf16, fp16, fp8"),
    ("--attention-precision", "int8", "bf16, fp16, fp8"),
    ("--kv-cache-dtype", "fp4", "auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2"),
])
def test_a_bad_precision_is_one_line_naming_the_flag_and_exit_2(flag, value, allowed):
    line = cli_error([*BASE, "--prefill", "128", flag, value])
    assert f"{flag} must be one of {allowed}; got '{value}'" in line


def test_fp8_math_on_a_gpu_without_fp8_is_refused():
    line = cli_error(["latency", "--gpu", "A100-80GB", "--model", "llama-3.1-8b",
                      "--prefill", "128", "--precision", "fp8"])
    assert "no FP8 tensor cores" in line


def test_an_efficiency_profile_prices_at_its_fields(tmp_path, capsys):
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"efficiency": {"mfu": Efficiency().mfu / 2}}))
    preset = latency_json(capsys, "--prefill", "8192")
    doc = latency_json(capsys, "--prefill", "8192", "--efficiency", str(profile))
    assert doc["t_lin"] == pytest.approx(2 * preset["t_lin"], rel=1e-12)
    assert doc["efficiency"] == str(profile) and doc["efficiency_fields"]["mfu"] == 0.36
    assert "efficiency_fields" not in preset
    assert main([*BASE, "--prefill", "128", "--efficiency", str(profile)]) == 0
    assert f"efficiency profile {profile}, precision bf16" in capsys.readouterr().out


@pytest.mark.parametrize("value, fragment", [
    ("fast", "--efficiency must be one of ideal, default, trtllm or the path of an efficiency "
             "profile"),
    ("missing.json", "--efficiency: efficiency profile missing.json: cannot read it"),
])
def test_a_bad_efficiency_is_one_line_and_exit_2(value, fragment):
    assert fragment in cli_error([*BASE, "--prefill", "128", "--efficiency", value])
