"""Number formats (issue #32, item 1), engine-stated KV pools (item 2) and model
configs (item 6): each part of an iteration priced at its own format, FP8 refused
where a GPU has none, the KV share of total or of free memory, and
``--set model=config.json``.

Expected values are written out by hand from the roofline's formulas and the
datasheets' dense rates, not taken from this code's output."""

import json
import math

import pytest

from llmqueue import hardware as hw
from llmqueue.cli.main import main
from llmqueue.experiments import get
from llmqueue.experiments.base import ENGINE_PARAMS, engine_kwargs
from llmqueue.hardware.precision import Precision
from llmqueue.models.context import BatchContext

GiB = 2 ** 30
#: Llama-3(.1)-8B: P_L = 32*(2*4096*4096 + 2*4096*1024 + 3*4096*14336), P_head = V*h,
#: attention FLOPs per token-pair 4*n_q*d_h*L, KV bytes per token at 2 bytes.
P_L, P_HEAD, ATTN, KAPPA = 6_979_321_856, 525_336_576, 4 * 32 * 128 * 32, 131_072
#: H100-SXM: dense BF16 and FP8 FLOP/s, HBM bytes/s.
BF16, FP8, HBM = 989.4e12, 1978.9e12, 3.35e12


def ideal(precision):
    return hw.Roofline("H100", "llama-3.1-8b", efficiency="ideal", precision=precision)


def test_new_models_match_the_published_counts():
    # Meta's model cards: 8.03 B, 70.6 B, 405.9 B (within 1 %)
    for name, published in (("llama-3.1-8b", 8.03e9), ("llama-3.3-70b", 70.6e9),
                            ("llama-3.1-405b", 405.9e9)):
        assert hw.model(name).params() == pytest.approx(published, rel=0.01)
    big = hw.model("Llama-3.1-405B")
    assert (big.layers, big.hidden, big.heads, big.kv_heads, big.ffn, big.vocab) == \
        (126, 16384, 128, 8, 53248, 128256)
    assert hw.model("llama-3.1-8b").params() == P_L + 2 * P_HEAD


def test_compute_bound_prefill_is_about_twice_as_fast_with_fp8_gemms():
    b = 2048  # one chunk at context 0: ideal t = t_lin + t_ap (both compute-bound)
    ap = ATTN * (b * b + b) / 2 / BF16  # attention math stays at the BF16 rate
    t16 = (2 * b * P_L + 2 * P_HEAD) / BF16 + ap
    t8 = 2 * b * P_L / FP8 + 2 * P_HEAD / BF16 + ap  # LM head stays 16-bit
    assert ideal("bf16").batch_time(0, b, 1) == pytest.approx(t16, rel=1e-12)
    assert ideal("fp8").batch_time(0, b, 1) == pytest.approx(t8, rel=1e-12)
    parts = ideal("fp8").breakdown(0, b, 1)
    assert parts.bound == {"t_lin": "compute", "t_ap": "compute", "t_ad": None}
    assert 0.5 < t8 / t16 < 0.53  # the GEMMs halve; attention (4 %) does not


def test_memory_bound_decode_reads_the_weights_at_one_byte():
    n, ctx = 64, 1000
    batch = BatchContext.of(decode_contexts=[ctx] * n)
    kv_read = KAPPA * (n * ctx + n) / HBM  # t_ad: memory-bound at any precision here
    t16 = 2 * (P_L + P_HEAD) / HBM + kv_read
    t8 = (1 * P_L + 2 * P_HEAD) / HBM + kv_read  # the vocabulary matrix stays 2 bytes
    assert ideal("bf16").batch_time(n, 0, n, batch) == pytest.approx(t16, rel=1e-12)
    assert ideal("fp8").batch_time(n, 0, n, batch) == pytest.approx(t8, rel=1e-12)
    # an FP8 KV cache halves the KV bytes read
    fp8_kv = ideal(Precision.of("fp8", kv="fp8")).batch_time(n, 0, n, batch)
    assert fp8_kv == pytest.approx(t8 - kv_read / 2, rel=1e-12)
    assert ideal("fp8").breakdown(n, 0, n, batch).bound["t_lin"] == "memory"


def test_attention_is_priced_at_its_own_format():
    b = 4096
    fp8 = ideal("fp8").breakdown(0, b, 1)
    assert fp8.compute["t_ap"] == pytest.approx(ATTN * (b * b + b) / 2 / BF16, rel=1e-12)
    fast = ideal(Precision.of("fp8", attention="fp8")).breakdown(0, b, 1)
    assert fast.compute["t_ap"] == pytest.approx(ATTN * (b * b + b) / 2 / FP8, rel=1e-12)
    assert fast.compute["t_lin"] == fp8.compute["t_lin"]
    # decode attention math too (t_ad's compute side)
    ctx = BatchContext.of(decode_contexts=[5000])
    assert ideal(Precision.of(attention="fp8")).breakdown(1, 0, 1, ctx).compute["t_ad"] == \
        pytest.approx(ATTN * 5000 / FP8, rel=1e-12)


def test_default_precision_is_every_figure_as_before():
    for p in ("bf16", None, Precision(), Precision.of("bf16")):
        model = hw.Roofline("A100-80GB", "codellama-34b", precision=p)
        assert model.batch_time(0, 512, 1) * 1e3 == pytest.approx(161.95, rel=0.005)
        assert repr(model) == "Roofline(gpu='A100-80GB', model='CodeLlama-34B', tp=1, " \
            "efficiency='default')"
        assert model.kv_capacity == 19106


def test_fp8_is_refused_where_a_gpu_has_none():
    for gpu in ("A100-40GB", "A100-80GB"):
        with pytest.raises(ValueError, match=f"{gpu} has no FP8 tensor cores"):
            hw.Roofline(gpu, "llama-3-8b", precision="fp8")
        with pytest.raises(ValueError, match="attention's math"):
            hw.Roofline(gpu, "llama-3-8b", precision=Precision.of(attention="fp8"))
    # an FP8 KV cache needs no FP8 math: allowed, and it holds twice the tokens
    a100 = hw.Roofline("A100-80GB", "llama-3-8b", precision=Precision.of(kv="fp8"))
    free = 0.9 * 80 * GiB - 2 * 8_029_995_008 - 5.5 * GiB - 0.15 * GiB
    assert a100.kv_capacity == math.floor(free / (KAPPA / 2))
    with pytest.raises(ValueError, match="precision weights must be one of bf16, fp16, fp8"):
        Precision.of("int4")
    assert Precision.of("FP8_E4M3") == Precision.of("fp8") and Precision.of("fp8").name == "fp8"


def test_kv_capacity_as_each_engine_states_it():
    weights = 2 * 8_029_995_008  # Llama-3.1-8B at 2 bytes
    rest = 80 * GiB - weights - 5.5 * GiB - 0.15 * GiB  # one H100 after weights, activations
    # vLLM: gpu_memory_utilization is a share of all memory (0.9: the default formula)
    assert hw.kv_capacity("H100", "llama-3.1-8b", fraction=0.9, of="total") == 421011
    assert hw.kv_capacity("H100", "llama-3.1-8b", fraction=0.8) == \
        math.floor((0.8 * 80 * GiB - weights - 5.5 * GiB - 0.15 * GiB) / KAPPA)
    # TensorRT-LLM: kv_cache_free_gpu_mem_fraction is a share of what is left free
    assert hw.kv_capacity("H100", "llama-3.1-8b", fraction=0.95, of="free") == \
        math.floor(0.95 * rest / KAPPA)
    # FP8 weights (vocabulary matrices 16-bit) and an FP8 KV cache
    fp8_weights = P_L + 2 * 2 * P_HEAD
    assert hw.kv_capacity("H100", "llama-3.1-8b", fraction=0.95, of="free",
                          precision=Precision.of("fp8", kv="fp8")) == \
        math.floor(0.95 * (80 * GiB - fp8_weights - 5.5 * GiB - 0.15 * GiB) / (KAPPA / 2))
    # 405B in FP8 on 8 GPUs: 0.6 GiB reserve, 504 KiB of KV per token
    big = hw.model("llama-3.1-405b")
    w405 = big.layer_params() + 2 * 2 * big.head_params()
    assert hw.kv_capacity("H100", big, tp=8, fraction=0.95, of="free", precision="fp8") == \
        math.floor(0.95 * (8 * 80 * GiB - w405 - 8 * 5.5 * GiB - 0.6 * GiB) / (504 * 1024))
    with pytest.raises(ValueError, match="of must be one of total, free"):
        hw.kv_capacity("H100", "llama-3.1-8b", of="left")
    with pytest.raises(ValueError, match="not both"):
        hw.kv_capacity("H100", "llama-3.1-8b", utilization=0.8, fraction=0.9)
    with pytest.raises(ValueError, match=r"model does not fit.*0.5 of them for KV"):
        hw.kv_capacity("H100", "llama-3-70b", fraction=0.5, of="free")
    assert hw.kv_share(0.95, None) == (0.95, "free") and hw.kv_share() == (None, "total")
    with pytest.raises(ValueError, match="give one"):
        hw.kv_share(0.9, 0.9)


LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
               "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
               "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
               "vocab_size": 128256, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}


def run(capsys, *sets, json_out=True):
    argv = ["run", "single", "--horizon", "5"] + [x for s in sets for x in ("--set", s)]
    code = main(argv + (["--json"] if json_out else []))
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 and json_out else out.err)


def test_a_config_json_is_a_model(tmp_path, capsys):
    path = tmp_path / "llama31.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    shape = hw.model(str(path))
    assert shape.name == "llama31" and shape.params() == hw.model("llama-3.1-8b").params()
    code, doc = run(capsys, "kv=auto", "gpu=H100", f"model={path}")
    assert code == 0 and doc["rows"][0]["kv_capacity"] == 421011
    del LLAMA_31_8B["hidden_size"]
    path.write_text(json.dumps(LLAMA_31_8B))
    code, err = run(capsys, "kv=auto", "gpu=H100", f"model={path}")
    assert code == 2 and "missing key 'hidden_size'" in err and str(path) in err
    assert err.count("\n") == 1
    code, err = run(capsys, "kv=auto", "gpu=H100", f"model={tmp_path / 'none.json'}")
    assert code == 2 and "none.json" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="or the path of a Hugging Face config.json"):
        hw.model("llama-9")


def test_precision_keys_on_the_command_line(capsys):
    single = get("single")
    p = single.resolve({"latency": "roofline", "gpu": "H100", "model": "llama-3.1-8b",
                        "precision": "fp8", "kv_cache_dtype": "fp8"})
    model = engine_kwargs(p)["latency"]
    assert model.precision == Precision.of("fp8", kv="fp8")
    code, doc = run(capsys, "kv=auto", "gpu=H100", "model=llama-3.1-8b", "precision=fp8",
                    "kv_cache_dtype=fp8_e4m3", "kv_cache_free_gpu_mem_fraction=0.95")
    assert code == 0 and doc["rows"][0]["kv_capacity"] == hw.kv_capacity(
        "H100", "llama-3.1-8b", fraction=0.95, of="free", precision=Precision.of("fp8", kv="fp8"))
    code, doc = run(capsys, "kv=auto", "gpu=H100", "model=llama-3.1-8b",
                    "gpu_memory_utilization=0.8")
    assert code == 0 and doc["rows"][0]["kv_capacity"] == hw.kv_capacity(
        "H100", "llama-3.1-8b", fraction=0.8)
    for name in ("precision", "attention_precision", "kv_cache_dtype",
                 "kv_cache_free_gpu_mem_fraction", "gpu_memory_utilization"):
        assert ENGINE_PARAMS[name].quiet_default  # runs that do not set them keep their seeds


@pytest.mark.parametrize("sets, message", [
    (["latency=roofline", "gpu=A100-80GB", "model=llama-3-8b", "precision=fp8"],
     "A100-80GB has no FP8 tensor cores"),
    (["attention_precision=fp8"], "attention_precision is not read with latency=staircase"),
    (["kv=auto", "gpu=H100", "model=llama-3-8b", "attention_precision=fp8"],
     "attention_precision is not read"),
    (["precision=fp8"], "precision is not read with latency=staircase"),
    (["kv_cache_free_gpu_mem_fraction=0.9"], "needs kv=auto"),
    (["kv=1000", "gpu_memory_utilization=0.9"], "needs kv=auto"),
    (["kv=auto", "gpu=H100", "model=llama-3-8b", "gpu_memory_utilization=0.9",
      "kv_cache_free_gpu_mem_fraction=0.9"], "give one"),
    (["gpu_memory_utilization=1.5"], "gpu_memory_utilization must be"),
    (["precision=int8"], "precision must be one of bf16, fp16, fp8"),
])
def test_bad_precision_settings_are_one_line(capsys, sets, message):
    code, err = run(capsys, *sets, json_out=False)
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_fit_keeps_the_precision_it_was_given():
    fp8 = hw.Roofline("H100", "llama-3.1-8b", precision="fp8")
    batches = [(0, 1024, 1), (0, 4096, 1), (64, 0, 64)]
    samples = [(b, fp8.batch_time(*b) * 1.1) for b in batches]
    for fit in (hw.fit_roofline(samples, fp8),
                hw.fit_roofline(samples, gpu="H100", model="llama-3.1-8b", precision="fp8")):
        assert fit.roofline.precision == Precision.of("fp8")
        assert fit.mape < 0.05
    with pytest.raises(ValueError, match="come from base"):
        hw.fit_roofline(samples, fp8, precision="bf16")
