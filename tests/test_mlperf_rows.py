"""The MLPerf results reader (llmqueue.experiments.mlperf_rows): the shared
v4.1 file, every cell form, every reason a row cannot be modelled and every
malformed cell.  Most files are written in tmp_path, so the tests run on a
fresh clone."""

import os

import pytest

from llmqueue.experiments.mlperf_rows import OPTIONAL, REQUIRED, MlperfRow, read_mlperf

SHARED = "/work/shared/validation/mlperf_llama2_70b_v4.1_nvidia.csv"
HEADER = ("version,organization,system,accelerator,accelerators,scenario,tokens_per_s,"
          "samples_per_s,target_qps,ttft_p99_s,tpot_p99_s,precision,tp,pp,max_batch_size,"
          "max_num_tokens,kv_fraction,chunked_context,engine")
#: A row llmqueue can model (H100 is in the GPU table), as a dict of cells.
BASE = {"version": "v4.1", "organization": "Org", "system": "sys", "accelerator": "H100",
        "accelerators": "8", "scenario": "Offline", "tokens_per_s": "24524.9",
        "samples_per_s": "84.4792", "target_qps": "76", "ttft_p99_s": "", "tpot_p99_s": "",
        "precision": "fp8", "tp": "2", "pp": "1", "max_batch_size": "896",
        "max_num_tokens": "4096", "kv_fraction": "0.90", "chunked_context": "",
        "engine": "TensorRT-LLM (custom harness)"}


def write(tmp_path, *rows, header=HEADER, name="results.csv"):
    """A results file of ``rows`` (dicts of cells over BASE, or raw lines)."""
    columns = header.split(",")
    lines = [header]
    for row in rows:
        if isinstance(row, str):
            lines.append(row)
        else:
            cells = {**BASE, **row}
            lines.append(",".join(f'"{cells.get(c, "")}"' for c in columns))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def one(tmp_path, **cells):
    rows = read_mlperf(write(tmp_path, cells))
    assert len(rows) == 1
    return rows[0]


def test_a_plain_row_reads_every_field(tmp_path):
    r = one(tmp_path)
    assert isinstance(r, MlperfRow)
    assert (r.version, r.organization, r.system, r.accelerator, r.accelerators) == \
        ("v4.1", "Org", "sys", "H100", 8)
    assert (r.scenario, r.tokens_per_s, r.samples_per_s, r.target_qps) == \
        ("Offline", 24524.9, 84.4792, 76.0)
    assert r.ttft_p99_s is None and r.tpot_p99_s is None
    assert (r.precision, r.kv_dtype, r.tp, r.pp, r.copies) == ("fp8", None, 2, 1, 4)
    assert (r.max_batch_size, r.max_num_tokens, r.kv_fraction) == (896, 4096, 0.90)
    assert r.gpu_memory_utilization is None and r.chunked_context is None
    assert (r.engine, r.engine_text) == ("trtllm", "TensorRT-LLM (custom harness)")
    assert (r.line, r.unsupported, r.gpu) == (2, None, "H100")


def test_the_shared_v41_file():
    if not os.path.exists(SHARED):
        pytest.skip(f"{SHARED} is not on this machine")
    rows = read_mlperf(SHARED)
    assert len(rows) == 8 and [r.line for r in rows] == list(range(2, 10))
    assert [r.scenario for r in rows] == ["Offline", "Server"] * 4
    h100 = rows[0]
    assert (h100.accelerator, h100.accelerators, h100.tp, h100.copies) == \
        ("H100-SXM-80GB", 8, 2, 4)
    assert (h100.max_batch_size, h100.max_num_tokens, h100.kv_fraction) == (896, 4096, 0.90)
    assert (h100.engine, h100.precision, h100.kv_dtype, h100.tokens_per_s) == \
        ("trtllm", "fp8", None, 24524.9)
    server = rows[1]
    assert (server.target_qps, server.ttft_p99_s, server.tpot_p99_s) == (75.0, 0.4613, 0.1754)
    assert [r.copies for r in rows] == [4, 4, 8, 8, 8, 8, 1, 1]
    assert rows[2].accelerator == "H200-SXM-141GB (700W)"
    for r in rows:  # the MLPerf GPU names may not be in the GPU table yet
        assert r.unsupported is None if r.gpu else r.unsupported.startswith(
            "unknown accelerator")


@pytest.mark.parametrize("text, scenario", [("offline", "Offline"), ("SERVER", "Server"),
                                            ("Interactive", "Interactive")])
def test_the_scenario_is_read_in_any_case(tmp_path, text, scenario):
    assert one(tmp_path, scenario=text).scenario == scenario


@pytest.mark.parametrize("text, weights, kv", [
    ("fp8", "fp8", None), ("fp8;kv=fp8", "fp8", "fp8"), ("BF16", "bf16", None),
    ("fp16; kv = fp8", "fp16", "fp8"), ("kv=fp8", None, "fp8"), ("", None, None),
    ("bfloat16;kv=bfloat16", "bf16", "bf16"),
])
def test_precision_forms(tmp_path, text, weights, kv):
    r = one(tmp_path, precision=text)
    assert (r.precision, r.kv_dtype, r.unsupported) == (weights, kv, None)


@pytest.mark.parametrize("text, fraction, utilization", [
    ("0.9", 0.9, None), ("1", 1.0, None), ("gmu:0.85", None, 0.85), ("GMU: 0.9", None, 0.9),
    ("", None, None),
])
def test_kv_fraction_forms(tmp_path, text, fraction, utilization):
    r = one(tmp_path, kv_fraction=text)
    assert (r.kv_fraction, r.gpu_memory_utilization) == (fraction, utilization)


@pytest.mark.parametrize("text, engine", [
    ("TensorRT-LLM", "trtllm"), ("TRT-LLM 0.12", "trtllm"), ("trtllm; 8 copies", "trtllm"),
    ("vLLM 0.6.3 (V1)", "vllm"), ("SGLang", "sglang"), ("  vllm", "vllm"),
])
def test_the_engine_is_the_first_word(tmp_path, text, engine):
    r = one(tmp_path, engine=text)
    assert (r.engine, r.engine_text, r.unsupported) == (engine, text.strip(), None)


@pytest.mark.parametrize("text, value", [("true", True), ("FALSE", False), ("", None)])
def test_chunked_context_forms(tmp_path, text, value):
    assert one(tmp_path, chunked_context=text).chunked_context is value


def test_empty_cells_are_the_engines_defaults(tmp_path):
    r = one(tmp_path, tp="", pp="", max_batch_size="", max_num_tokens="", precision="",
            kv_fraction="", samples_per_s="", target_qps="", version="", organization="")
    assert (r.tp, r.pp, r.copies) == (1, 1, 8)
    assert r.max_batch_size is r.max_num_tokens is r.precision is r.kv_fraction is None
    assert r.samples_per_s is r.target_qps is r.version is r.organization is None


def test_optional_columns_may_be_absent(tmp_path):
    header = ",".join(REQUIRED)
    r = read_mlperf(write(tmp_path, "s,H100,4,Server,1000.5", header=header))[0]
    assert (r.system, r.accelerators, r.scenario, r.tokens_per_s, r.tp, r.copies) == \
        ("s", 4, "Server", 1000.5, 1, 4)
    assert r.engine is None and r.unsupported == "no engine named"
    assert all(getattr(r, c, None) is None for c in OPTIONAL
               if c not in ("tp", "pp", "engine"))


def test_columns_in_any_order_with_others_ignored(tmp_path):
    header = "Tokens_Per_S,scenario,notes,accelerators,accelerator,system,engine"
    r = read_mlperf(write(tmp_path, "500,Offline,anything,1,H200,s,vLLM", header=header))[0]
    assert (r.tokens_per_s, r.accelerator, r.gpu, r.engine) == (500.0, "H200", "H200", "vllm")


@pytest.mark.parametrize("cells, reason", [
    ({"accelerator": "TPU-v9"}, "unknown accelerator 'TPU-v9'"),
    ({"pp": "2"}, "pipeline parallelism is not modelled"),
    ({"engine": "MyEngine 2.0"}, "engine 'MyEngine' is not modelled"),
    ({"engine": ""}, "no engine named"),
    ({"accelerators": "6", "tp": "4"}, "6 accelerators do not split into copies of tp x pp = 4"),
    ({"accelerators": "2", "tp": "4"}, "2 accelerators do not split into copies"),
    ({"precision": "int4"}, "unknown precision 'int4'"),
    ({"precision": "fp8;kv=int8"}, "unknown precision 'int8'"),
])
def test_a_row_it_cannot_model_says_why_and_the_read_goes_on(tmp_path, cells, reason):
    rows = read_mlperf(write(tmp_path, cells, {}))
    assert rows[0].unsupported.startswith(reason)
    assert rows[1].unsupported is None  # the next row is read as usual


def test_blank_lines_are_skipped_and_lines_counted(tmp_path):
    path = write(tmp_path, {}, "", {"scenario": "Server"})
    assert [(r.line, r.scenario) for r in read_mlperf(path)] == [(2, "Offline"), (4, "Server")]


@pytest.mark.parametrize("cells, words", [
    ({"accelerators": "-8"}, "accelerators must be an integer >= 1, got -8"),
    ({"accelerators": "eight"}, "accelerators must be an integer >= 1, got 'eight'"),
    ({"accelerators": ""}, "accelerators must be an integer >= 1"),
    ({"tp": "2.5"}, "tp must be an integer >= 1, got '2.5'"),
    ({"pp": "0"}, "pp must be an integer >= 1, got 0"),
    ({"max_batch_size": "-1"}, "max_batch_size must be an integer >= 1"),
    ({"max_num_tokens": "4k"}, "max_num_tokens must be an integer >= 1"),
    ({"tokens_per_s": "fast"}, "tokens_per_s must be a finite number > 0, got 'fast'"),
    ({"tokens_per_s": ""}, "tokens_per_s must be a finite number > 0"),
    ({"tokens_per_s": "nan"}, "tokens_per_s must be a finite number > 0"),
    ({"samples_per_s": "-1"}, "samples_per_s must be a finite number > 0"),
    ({"target_qps": "x"}, "target_qps must be a finite number > 0"),
    ({"ttft_p99_s": "0"}, "ttft_p99_s must be a finite number > 0"),
    ({"tpot_p99_s": "inf"}, "tpot_p99_s must be a finite number > 0"),
    ({"scenario": "SingleStream"}, "scenario must be one of Offline, Server, Interactive"),
    ({"system": ""}, "system must be given"),
    ({"accelerator": ""}, "accelerator must be given"),
    ({"kv_fraction": "1.5"}, "kv_fraction must be a number in (0, 1]"),
    ({"kv_fraction": "0"}, "kv_fraction must be a number in (0, 1]"),
    ({"kv_fraction": "gmu:"}, "or gmu:X"),
    ({"kv_fraction": "gmu:2"}, "kv_fraction must be"),
    ({"kv_fraction": "half"}, "kv_fraction must be"),
    ({"chunked_context": "yes"}, "chunked_context must be true, false or empty"),
    ({"precision": "fp8;kv"}, "precision must be a format such as fp8, or"),
    ({"precision": "fp8;fp16"}, "fp8;kv=fp8"),
    ({"precision": "fp8;mode=fast"}, "precision must be"),
    ({"precision": "fp8;kv="}, "precision must be"),
    ({"precision": "fp8;"}, "precision must be"),
    ({"precision": "fp8;kv=fp8;kv=bf16"}, "precision must be"),
])
def test_a_malformed_cell_names_the_file_line_and_column(tmp_path, cells, words):
    path = write(tmp_path, {}, cells)
    with pytest.raises(ValueError) as error:
        read_mlperf(path)
    message = str(error.value)
    assert message.startswith(f"{path}:3: ") and words in message and "\n" not in message


def test_a_missing_required_column_is_named(tmp_path):
    header = HEADER.replace("tokens_per_s,", "").replace("scenario,", "")
    with pytest.raises(ValueError, match=r":1: the header lacks scenario, tokens_per_s"):
        read_mlperf(write(tmp_path, header=header))


def test_a_row_of_the_wrong_width_and_an_empty_file_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r":2: expected 19 cells as in the header, got 3"):
        read_mlperf(write(tmp_path, "a,b,c"))
    with pytest.raises(ValueError, match="no result rows"):
        read_mlperf(write(tmp_path))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="the header lacks system"):
        read_mlperf(str(empty))


def test_a_file_that_cannot_be_read_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        read_mlperf(str(tmp_path / "missing.csv"))
    with pytest.raises(ValueError, match="it is a directory"):
        read_mlperf(str(tmp_path))
