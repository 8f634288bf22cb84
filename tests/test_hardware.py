"""GPU and model specs, lookups, Hugging Face configs and KV capacity (SPEC 8.1, 8.4).

Expected values are SPEC's tables and examples, not this code's output."""

import dataclasses
import json

import pytest

import llmqueue as q
from llmqueue import hardware as hw
from llmqueue.hardware import specs
from llmqueue.models.sizes import Fixed, Geometric, Mixture, UniformInt

GiB = 2 ** 30

#: SPEC 8.1's table: published parameter count, KV bytes per token in KiB (bf16).
PUBLISHED = {
    "llama-3-8b": (8.03e9, 128), "llama-3-70b": (70.55e9, 320),
    "codellama-34b": (33.74e9, 192), "llama-2-7b": (6.74e9, 512),
    "llama-2-13b": (13.02e9, 800), "llama-2-70b": (68.98e9, 320),
    "mistral-7b": (7.24e9, 128), "qwen2.5-7b": (7.62e9, 56),
    "qwen2.5-72b": (72.70e9, 320), "opt-13b": (12.84e9, 800),
    # issue #32's models: Meta's published counts (405B: 405.9e9 on its model card)
    "llama-3.1-8b": (8.03e9, 128), "llama-3.3-70b": (70.6e9, 320),
    "llama-3.1-405b": (405.9e9, 504),
}

#: SPEC 8.1's GPUs: flops, hbm, memory, link, and the datasheets' dense FP8 rate
#: (half the sparse figure; none on the A100).  Memory is the datasheet's figure in
#: GiB for every GPU: the H200's 141 GB too (nvidia-smi shows it 140.4 GiB).
GPUS = {
    "A100-40GB": (312e12, 1.555e12, 40 * GiB, 300e9, None),
    "A100-80GB": (312e12, 2.039e12, 80 * GiB, 300e9, None),
    "H100": (989.4e12, 3.35e12, 80 * GiB, 450e9, 1978.9e12),
    "H200": (989.4e12, 4.8e12, 141 * GiB, 450e9, 1978.9e12),
    "L40S": (362.05e12, 0.864e12, 48 * GiB, 32e9, 733e12),
    "MI300X": (1307.4e12, 5.3e12, 192 * GiB, 448e9, 2614.9e12),
}

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 128256,
}

OPT_13B_CONFIG = {  # OPT names its FFN and activation differently and ties by default
    "activation_function": "relu", "architectures": ["OPTForCausalLM"], "ffn_dim": 20480,
    "hidden_size": 5120, "model_type": "opt", "num_attention_heads": 40,
    "num_hidden_layers": 40, "vocab_size": 50272, "word_embed_proj_dim": 5120,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_params_and_kv_bytes_match_the_published_table(name):
    shape = hw.model(name)
    published, kib = PUBLISHED[name]
    assert shape.params() == pytest.approx(published, rel=0.005 if published < 400e9 else 0.01)
    assert shape.kv_bytes_per_token() == kib * 1024


def test_thirteen_models_and_nine_gpus_are_built_in():
    assert set(hw.model_names()) == set(PUBLISHED)
    # the six of the table above, then the MLPerf parts (tests/test_accelerators.py)
    assert hw.gpu_names() == list(GPUS) + ["H200-SXM-141GB-CTS", "H200-NVL-141GB",
                                           "GH200-144GB"]


@pytest.mark.parametrize("name", sorted(GPUS))
def test_gpu_figures(name):
    g = hw.gpu(name)
    assert (g.flops, g.hbm, g.memory, g.link, g.fp8_flops) == GPUS[name]
    assert g.name == name


def test_lookups_are_case_insensitive_and_drop_the_parenthesis():
    assert hw.gpu("h100") is hw.gpu("H100") is q.gpu("H100")
    assert hw.gpu("a100-80gb").name == "A100-80GB"
    assert hw.model("LLAMA-3-8B") is hw.model("llama-3-8b") is q.model("Llama-3-8B")
    assert hw.model("mistral-7b").name == "Mistral-7B (v0.1)"
    assert hw.model("Mistral-7B (v0.1)") is hw.model("mistral-7b")
    assert hw.model("codellama-34b").layers == 48
    shape = hw.model("opt-13b")
    assert hw.model(shape) is shape and hw.gpu(hw.gpu("L40S")).name == "L40S"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match="gpu must be one of A100-40GB, A100-80GB, H100") as e:
        hw.gpu("B200")
    assert "MI300X" in str(e.value) and "'B200'" in str(e.value)
    with pytest.raises(ValueError, match="model must be one of") as e:
        hw.model("llama-4")
    for known in ("llama-3-8b", "codellama-34b", "opt-13b", "mistral-7b"):
        assert known in str(e.value)


def test_model_shape_defaults():
    shape = hw.ModelShape("tiny", 2, 64, 4, ffn=128, gated=False, vocab=100, tied=True)
    assert shape.kv_heads == 4 and shape.head_dim == 16
    assert shape.weight_bytes == shape.act_bytes == shape.kv_bytes == 2
    # P_L = 2 * (64*64 + 2*64*64 + 64*64 + 2*64*128), tied: one V*h
    assert shape.params() == 2 * (4 * 64 * 64 + 2 * 64 * 128) + 100 * 64
    assert shape.kv_bytes_per_token() == 2 * 2 * 4 * 16 * 2
    with pytest.raises(ValueError, match="kv_heads must divide heads=4"):
        hw.ModelShape("bad", 2, 64, 4, 3, ffn=128, gated=False, vocab=100, tied=True)
    with pytest.raises(ValueError, match="layers"):
        hw.ModelShape("bad", 0, 64, 4, ffn=128, gated=False, vocab=100, tied=True)


def test_users_add_records_and_pass_them_anywhere():
    g = hw.GPU("Test-GPU", 100e12, 1e12, 24 * GiB, 50e9)
    m = hw.ModelShape("Test-1B", 16, 2048, 16, ffn=8192, gated=True, vocab=32000,
                      tied=False)
    try:
        assert specs.register_gpu(g) is g and hw.gpu("test-gpu") is g
        assert specs.register_model(m) is m and hw.model("TEST-1B") is m
        assert "Test-GPU" in str(pytest.raises(ValueError, hw.gpu, "nope").value)
        with pytest.raises(ValueError, match="already known"):
            specs.register_gpu(dataclasses.replace(g, flops=1e12))
        assert hw.kv_capacity("test-gpu", "test-1b") == hw.kv_capacity(g, m)
    finally:
        specs._GPUS.pop("test-gpu", None)
        specs._MODELS.pop("test-1b", None)
    # a record works without registering it
    assert hw.Roofline(g, m).batch_time(1, 0, 1) > 0


def test_from_hf_config_dict_equals_the_built_in():
    built_in = hw.model("llama-3-8b")
    shape = hw.ModelShape.from_hf_config(LLAMA3_8B_CONFIG, name="Llama-3-8B")
    assert shape == built_in
    unnamed = hw.ModelShape.from_hf_config(LLAMA3_8B_CONFIG)
    assert dataclasses.replace(unnamed, name="Llama-3-8B") == built_in
    opt = hw.ModelShape.from_hf_config(OPT_13B_CONFIG, name="OPT-13B")
    assert opt == hw.model("opt-13b")


def test_from_hf_config_file_and_folder(tmp_path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(LLAMA3_8B_CONFIG))
    built_in = hw.model("llama-3-8b")
    from_file = hw.ModelShape.from_hf_config(str(path))
    assert from_file.name == "Meta-Llama-3-8B"
    assert dataclasses.replace(from_file, name=built_in.name) == built_in
    assert hw.ModelShape.from_hf_config(folder, name="Llama-3-8B") == built_in


@pytest.mark.parametrize("change, key", [
    ({"hidden_size": None}, "hidden_size"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"intermediate_size": None}, "intermediate_size"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"hidden_act": None}, "hidden_act"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ({"num_key_value_heads": 5}, "kv_heads"),
])
def test_malformed_configs_name_the_key_and_the_file(tmp_path, change, key):
    config = {k: v for k, v in LLAMA3_8B_CONFIG.items()}
    for k, v in change.items():
        if v is None:
            del config[k]
        else:
            config[k] = v
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=key) as e:
        hw.ModelShape.from_hf_config(path)
    assert str(path) in str(e.value)
    with pytest.raises(ValueError, match=key):
        hw.ModelShape.from_hf_config(config)


def test_unreadable_configs(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON") as e:
        hw.ModelShape.from_hf_config(bad)
    assert str(bad) in str(e.value)
    with pytest.raises(ValueError, match="cannot read"):
        hw.ModelShape.from_hf_config(tmp_path / "missing.json")
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        hw.ModelShape.from_hf_config(bad)


def test_kv_capacity_examples_of_spec_8_4():
    assert hw.kv_capacity("A100-80GB", "codellama-34b") == 19106
    assert hw.kv_capacity("H100", "llama-3-8b") == 421011
    assert q.kv_capacity("h100", "Llama-3-8B", tp=1) == 421011


def test_kv_capacity_reserve_and_parameters():
    m, g = hw.model("llama-3-70b"), hw.gpu("H100")
    # tp > 1 reserves 0.6 GiB (8.4): the formula written out
    expected = (0.9 * 4 * 80 * GiB - m.params() * 2 - 4 * 5.5 * GiB - 0.6 * GiB) \
        // (320 * 1024)
    assert hw.kv_capacity(g, m, tp=4) == int(expected)
    assert hw.kv_capacity(g, m, tp=4, reserve_gib=0.6) == int(expected)
    assert hw.kv_capacity(g, m, tp=4, utilization=0.95) > int(expected)
    assert hw.kv_capacity("H100", "llama-3-8b", reserve_gib=0.15, activation_gib=5.5) == 421011
    with pytest.raises(ValueError, match="utilization"):
        hw.kv_capacity(g, m, tp=4, utilization=1.5)
    with pytest.raises(ValueError, match="tp"):
        hw.kv_capacity(g, m, tp=0)


def test_a_model_that_does_not_fit_raises_with_the_numbers():
    with pytest.raises(ValueError, match="model does not fit") as e:
        hw.kv_capacity("H100", "llama-3-70b")
    assert "Llama-3-70B" in str(e.value) and "H100" in str(e.value)
    assert "72.00 GiB" in str(e.value)  # 0.9 x 80 GiB usable
    with pytest.raises(ValueError, match="model does not fit"):
        hw.Roofline("A100-40GB", "codellama-34b")


def test_tp_must_divide_the_heads():
    with pytest.raises(ValueError, match=r"heads=32; got tp=3"):
        hw.Roofline("H100", "llama-3-8b", tp=3)
    with pytest.raises(ValueError, match=r"kv_heads=8; got tp=16"):
        hw.Roofline("H100", "llama-3-8b", tp=16)
    with pytest.raises(ValueError, match=r"kv_heads=4; got tp=7"):
        hw.Roofline("H100", "qwen2.5-7b", tp=7)


def test_kmax_from_memory():
    assert hw.kmax_from_memory(19106, 512, 256) == 24  # floor(19106 / 768)
    assert hw.kmax_from_memory(19106, Fixed(512), Fixed(256), mode="mean") == 24
    # UniformInt(100, 1001) draws 100..1000: max 1000, mean 550
    assert hw.kmax_from_memory(10000, UniformInt(100, 1001), Fixed(0)) == 10
    assert hw.kmax_from_memory(10000, UniformInt(100, 1001), Fixed(0), mode="mean") == 18
    mix = Mixture([(1, Fixed(100)), (1, Fixed(300))])
    assert hw.kmax_from_memory(1000, mix, 0) == 3
    assert hw.kmax_from_memory(1000, Geometric(50), Geometric(50), mode="mean") == 10
    with pytest.raises(ValueError, match="no maximum"):
        hw.kmax_from_memory(1000, Geometric(50), 10)
    with pytest.raises(ValueError, match="mode must be one of max, mean"):
        hw.kmax_from_memory(1000, 10, 10, mode="median")
    with pytest.raises(ValueError, match="does not fit"):
        hw.kmax_from_memory(100, 80, 40)
