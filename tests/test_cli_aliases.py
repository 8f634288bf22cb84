"""vLLM's names of the engine keys on the command line, and a Hugging Face
config.json as ``model`` wherever a command takes a model (issue #33)."""

import json

import pytest

from conftest import cli_error
from llmqueue.cli import settings
from llmqueue.cli.main import main

VLLM = ["--set", "max_num_batched_tokens=256", "--set", "max_num_seqs=32",
        "--set", "enable_chunked_prefill=false", "--set", "block_size=16", "--set", "kv=20000"]
OURS = ["--set", "bmax=256", "--set", "kmax=32", "--set", "chunked=false",
        "--set", "kv_block=16", "--set", "kv=20000"]
#: A Llama-3-8B config.json as Hugging Face ships it (the fields a shape reads).
LLAMA_3_8B = {"_name_or_path": "my-llama", "architectures": ["LlamaForCausalLM"],
              "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
ROOFLINE = ["--set", "latency=roofline", "--set", "gpu=H100"]


def run_json(argv, capsys):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "my-llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA_3_8B))
    return str(path)


def test_vllm_names_are_read_as_llmqueues_and_shown_so(capsys):
    base = ["run", "single", "--set", "vp=200", "--set", "vd=50", "--horizon", "60", "--json"]
    aliased = run_json(base + VLLM, capsys)
    canonical = run_json(base + OURS, capsys)
    assert aliased == canonical  # same run, same params, same figures
    p = aliased["params"]
    assert (p["bmax"], p["kmax"], p["chunked"], p["kv_block"]) == (256, 32, False, 16)
    assert not set(settings.ALIASES) & set(p)


def test_a_key_under_both_names_must_agree():
    line = cli_error(["run", "single", "--set", "kmax=64", "--set", "max_num_seqs=32"])
    assert "kmax given twice" in line and "max_num_seqs=32" in line and "kmax=64" in line
    line = cli_error(["capacity", "--set", "max_num_batched_tokens=512", "--set", "bmax=256"])
    assert "bmax given twice" in line and "vLLM's name of bmax" in line
    # the same value spelled either way is no conflict
    assert settings.pairs(["chunked=true", "enable_chunked_prefill=True",
                           "bmax=8192", "max_num_batched_tokens=8_192"]) == \
        {"chunked": "True", "bmax": "8_192"}


def test_aliases_are_for_set_only():
    assert settings.pairs(["max_num_seqs=4"]) == {"kmax": "4"}
    assert settings.pairs(["max_num_seqs=4"], "--where") == {"max_num_seqs": "4"}


def test_an_engine_preset_keeps_a_value_given_by_vllms_name(capsys):
    doc = run_json(["run", "single", "--set", "engine=vllm", "--set", "kv=50000",
                    "--set", "max_num_seqs=8", "--set", "block_size=32", "--horizon", "20",
                    "--json"], capsys)
    assert doc["params"]["kmax"] == 8 and doc["params"]["kv_block"] == 32
    assert doc["params"]["bmax"] == 8192  # the preset's, not given


def test_capacity_plan_sweep_and_mlperf_take_the_aliases(capsys):
    doc = run_json(["capacity", "--set", "max_num_batched_tokens=256", "--set",
                    "max_num_seqs=16", "--json"], capsys)
    assert doc["params"]["bmax"] == 256 and doc["params"]["kmax"] == 16
    from llmqueue.cli.plan import configure
    engine, _ = configure(["max_num_batched_tokens=256", "max_num_seqs=16"])
    assert (engine.bmax, engine.kmax) == (256, 16)
    from llmqueue.experiments import mlperf
    s = mlperf.system(settings.pairs(["max_num_seqs=512", "max_num_batched_tokens=4096"]))
    assert (s.params["kmax"], s.params["bmax"]) == (512, 4096)
    doc = run_json(["sweep", "single", "--grid", "max_num_seqs=16,32", "--set",
                    "max_num_batched_tokens=256", "--horizon", "20", "--workers", "1",
                    "--json"], capsys)
    assert doc["grid"] == {"kmax": [16, 32]}
    assert {(r["kmax"], r["bmax"]) for r in doc["rows"]} == {(16, 256), (32, 256)}


def test_a_config_json_is_a_model_for_run_and_capacity(config, capsys):
    base = ["run", "single", *ROOFLINE, "--set", "kv=auto", "--horizon", "30", "--json"]
    mine = run_json(base + ["--set", f"model={config}"], capsys)
    known = run_json(base + ["--set", "model=llama-3-8b"], capsys)
    assert mine["params"]["model"] == config
    assert mine["rows"] == known["rows"]  # the same shape: the same run
    cap = run_json(["capacity", *ROOFLINE, "--set", f"model={config}", "--json"], capsys)
    ref = run_json(["capacity", *ROOFLINE, "--set", "model=llama-3-8b", "--json"], capsys)
    assert cap["token_capacity"] == ref["token_capacity"] and cap["lambda_star"] > 0
    folder = run_json(["capacity", *ROOFLINE, "--set", f"model={config[:-len('/config.json')]}",
                       "--json"], capsys)  # the folder holding it works too
    assert folder["token_capacity"] == ref["token_capacity"]


def test_a_config_json_is_a_model_for_latency_plan_and_mlperf(config, capsys):
    lat = run_json(["latency", "--gpu", "H100", "--model", config, "--decode", "8",
                    "--context", "500", "--json"], capsys)
    ref = run_json(["latency", "--gpu", "H100", "--model", "llama-3-8b", "--decode", "8",
                    "--context", "500", "--json"], capsys)
    assert lat["seconds"] == ref["seconds"] > 0
    from llmqueue.cli.plan import configure
    engine, _ = configure(["latency=roofline", "gpu=H100", f"model={config}"])
    other, _ = configure(["latency=roofline", "gpu=H100", "model=llama-3-8b"])
    assert engine.latency.tokens_time(512) == other.latency.tokens_time(512)
    from llmqueue.experiments import mlperf
    mine = mlperf.system({"model": config})
    assert mine.roofline.model.layers == 32 and mine.copies == 4
    assert main(["mlperf", "offline", "--set", f"model={config}", "--set", "samples=50"]) == 0
    assert f"workload on {config}" in capsys.readouterr().out


def test_a_bad_config_json_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 4096}')
    line = cli_error(["run", "single", *ROOFLINE, "--set", f"model={bad}"])
    assert "num_hidden_layers" in line
    line = cli_error(["latency", "--gpu", "H100", "--model", str(tmp_path / "absent.json"),
                      "--decode", "1"])
    assert "absent.json" in line
