"""Accelerators by MLPerf Inference's names and the sustained-clock factor (issue #35, item 5).

Expected figures are the vendors' datasheets, written here as constants (dense =
the datasheet's sparse figure / 2 where the datasheet prints only sparse ones);
expected clock factors are the derivations of ``hardware/data/README.md``.
"""

import dataclasses
import math

import pytest

from llmqueue.hardware import specs
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.roofline import Roofline

GiB = 2 ** 30
TB = 1e12

#: MLPerf names, with and without their suffixes, and the record each is.
NAMES = {
    "H100-SXM-80GB": "H100",
    "H100-SXM-80GB (700W)": "H100",
    "H200-SXM-141GB": "H200",
    "H200-SXM-141GB (700W)": "H200",
    "H200-SXM-141GB (700W, preview)": "H200",
    "h200-sxm-141gb (700w, PREVIEW)": "H200",
    "H200-SXM-141GB-CTS": "H200-SXM-141GB-CTS",
    "H200-SXM-141GB-CTS (1000W)": "H200-SXM-141GB-CTS",
    "  h200-sxm-141gb-cts (1000W) ": "H200-SXM-141GB-CTS",
    "H200-NVL-141GB": "H200-NVL-141GB",
    "H200-NVL-141GB (600W)": "H200-NVL-141GB",
    "GH200-144GB": "GH200-144GB",
    "GH200-144GB (1000W)": "GH200-144GB",
    "MI300X-192GB": "MI300X",
    "MI300X-192GB (750W)": "MI300X",
}

#: (BF16 dense, FP8 dense, HBM bytes/s, memory bytes, link bytes/s per direction, clock)
DATASHEETS = {
    # NVIDIA H200 Tensor Core GPU datasheet, SXM column: BF16 1,979*, FP8 3,958* TFLOPS
    # (sparse), 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s, max TDP up to 700 W.  Dense
    # 989.4 / 1,978.9: the Hopper whitepaper's exact figures (3,957.8 / 2 = 1,978.9).
    # MLPerf's -CTS part is the same H200 at 1,000 W: clock 34,864.2 / 31,302.7 = 1.114
    # (NVIDIA's MLPerf Inference v4.1 Llama 2 70B Offline, 8 x H200, 1,000 W over 700 W).
    "H200-SXM-141GB-CTS": (989.4e12, 3957.8e12 / 2, 4.8 * TB, 141 * GiB, 900e9 / 2, 1.114),
    # NVIDIA H200 NVL datasheet: BF16 1,671*, FP8 3,341* TFLOPS (sparse), 141 GB HBM3e,
    # 4.8 TB/s, 2- or 4-way NVLink bridge 900 GB/s per GPU, max TDP up to 600 W.
    "H200-NVL-141GB": (1671e12 / 2, 3341e12 / 2, 4.8 * TB, 141 * GiB, 900e9 / 2, 1.0),
    # NVIDIA GH200 Grace Hopper Superchip datasheet, HBM3e version: the H100's BF16
    # 1,979* and FP8 3,958* TFLOPS (sparse), 144 GB HBM3e at 4.9 TB/s, NVLink 900 GB/s,
    # module power 450 W to 1,000 W shared with the CPU: clock 4,067.52 / (31,302.7 / 8)
    # = 1.04 (v4.1 Llama 2 70B Offline, one GH200 over one 700 W H200).
    "GH200-144GB": (989.4e12, 3957.8e12 / 2, 4.9 * TB, 144 * GiB, 900e9 / 2, 1.04),
    # NVIDIA H100 datasheet, SXM column (the Hopper whitepaper's dense figures), 80 GB
    # HBM3 at 3.35 TB/s, NVLink 900 GB/s: unchanged, the reference (clock 1.0)
    "H100": (989.4e12, 1978.9e12, 3.35 * TB, 80 * GiB, 900e9 / 2, 1.0),
    # the H200 SXM at the datasheet's 700 W: unchanged, the reference (clock 1.0)
    "H200": (989.4e12, 1978.9e12, 4.8 * TB, 141 * GiB, 900e9 / 2, 1.0),
    # AMD Instinct MI300X datasheet: peak BF16 1,307.4 and FP8 2,614.9 TFLOPS dense
    # (5,229.8 with sparsity), 192 GB HBM3 at 5.3 TB/s, 896 GB/s Infinity Fabric, 750 W
    "MI300X": (1307.4e12, 5229.8e12 / 2, 5.3 * TB, 192 * GiB, 896e9 / 2, 1.0),
}

#: The records that existed before issue #35: (flops, fp8_flops) as they were.
UNCHANGED = {"A100-40GB": (312e12, None), "A100-80GB": (312e12, None),
             "H100": (989.4e12, 1978.9e12), "H200": (989.4e12, 1978.9e12),
             "L40S": (362.05e12, 733e12), "MI300X": (1307.4e12, 2614.9e12)}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_mlperf_names_resolve_to_their_record(name):
    found = specs.gpu(name)
    assert found is specs.gpu(NAMES[name])
    assert found.name == NAMES[name]


@pytest.mark.parametrize("name", sorted(DATASHEETS))
def test_figures_are_the_datasheets(name):
    g = specs.gpu(name)
    assert (g.flops, g.fp8_flops, g.hbm, g.memory, g.link, g.clock) == DATASHEETS[name]


def test_the_cts_part_is_not_the_700w_part():
    cts, sxm = specs.gpu("H200-SXM-141GB-CTS"), specs.gpu("H200-SXM-141GB (700W)")
    assert cts is not sxm and cts.name == "H200-SXM-141GB-CTS" and sxm.name == "H200"
    assert dataclasses.replace(cts, name="H200", clock=1.0) == sxm  # only the clock differs
    for near in ("H200-SXM-141GB-CT", "H200-SXM-141GB-CTS-X", "H200-SXM", "H200-SXM-141",
                 "GH200", "H200-NVL"):
        with pytest.raises(ValueError, match="gpu must be one of"):
            specs.gpu(near)


def test_existing_records_are_unchanged():
    for name, (flops, fp8) in UNCHANGED.items():
        g = specs.gpu(name)
        assert (g.flops, g.fp8_flops, g.clock) == (flops, fp8, 1.0)
        assert g.sustained_flops == flops and g.sustained_fp8_flops == fp8
    h100 = specs.gpu("H100")
    assert Precision.of("fp8").flops(h100, "weights") == 1978.9e12
    assert Precision.of("bf16").flops(h100, "weights") == 989.4e12
    assert specs.gpu("H200").memory == 141 * GiB


def test_names_list_records_once_and_aliases_apart():
    names = specs.gpu_names()
    assert names[:6] == list(UNCHANGED)
    for new in ("H200-SXM-141GB-CTS", "H200-NVL-141GB", "GH200-144GB"):
        assert names.count(new) == 1
    assert specs.gpu_aliases() == {"H100-SXM-80GB": "H100", "H200-SXM-141GB": "H200",
                                   "MI300X-192GB": "MI300X"}
    assert not set(specs.gpu_aliases()) & set(names)


def test_unknown_names_list_records_and_aliases():
    with pytest.raises(ValueError, match="gpu must be one of A100-40GB") as e:
        specs.gpu("B200 (1000W)")
    for known in ("GH200-144GB", "H200-NVL-141GB", "H200-SXM-141GB-CTS",
                  "H100-SXM-80GB = H100", "MI300X-192GB = MI300X", "'B200 (1000W)'"):
        assert known in str(e.value)


def test_a_record_registered_under_an_alias_wins():
    mine = specs.GPU("H100-SXM-80GB", 900e12, 3e12, 80 * GiB, 450e9, 1800e12, clock=0.95)
    try:
        assert specs.register_gpu(mine) is mine
        assert specs.gpu("h100-sxm-80gb (700W)") is mine
        assert "H100-SXM-80GB" not in specs.gpu_aliases()
    finally:
        specs._GPUS.pop("h100-sxm-80gb", None)
    assert specs.gpu("H100-SXM-80GB") is specs.gpu("H100")


def test_clock_scales_compute_rates_not_bandwidth():
    cts = specs.gpu("H200-SXM-141GB-CTS")
    assert cts.sustained_flops == 989.4e12 * 1.114
    assert cts.sustained_fp8_flops == 1978.9e12 * 1.114
    assert Precision.of("fp8").flops(cts, "weights") == 1978.9e12 * 1.114
    assert Precision.of("fp8").flops(cts, "attention") == 989.4e12 * 1.114  # BF16 attention
    assert cts.hbm == specs.gpu("H200").hbm  # the bandwidth is the datasheet's


def _roofline(gpu, tp=2):
    return Roofline(gpu, "llama-2-70b", tp, "default", "fp8")


@pytest.mark.parametrize("clock", [0.5, 2.0])
def test_a_compute_bound_iteration_scales_by_exactly_the_factor(clock):
    base = specs.gpu("H200")
    slow_or_fast = dataclasses.replace(base, name=f"H200 at {clock}", clock=clock)
    a, b = _roofline(base).breakdown(0, 8192, 1), _roofline(slow_or_fast).breakdown(0, 8192, 1)
    assert a.bound["t_lin"] == b.bound["t_lin"] == "compute"
    assert a.bound["t_ap"] == b.bound["t_ap"] == "compute"
    for term in ("t_lin", "t_ap"):  # a power of two: the floats scale exactly
        assert b.terms[term] == a.terms[term] / clock
        assert b.memory[term] == a.memory[term]
    for term in ("t_step", "t_req", "t_layer", "t_el", "t_tp"):
        assert b.terms[term] == a.terms[term]


def test_the_cts_factor_on_a_compute_bound_iteration():
    a = _roofline("H200-SXM-141GB (700W)").breakdown(0, 8192, 1)
    b = _roofline("H200-SXM-141GB-CTS (1000W)").breakdown(0, 8192, 1)
    for term in ("t_lin", "t_ap"):
        assert a.bound[term] == b.bound[term] == "compute"
        assert a.terms[term] / b.terms[term] == pytest.approx(1.114, rel=1e-12)


@pytest.mark.parametrize("clock", [0.9, 1.114, 2.0])
def test_a_memory_bound_iteration_is_unchanged(clock):
    base = specs.gpu("H200")
    other = dataclasses.replace(base, name="other", clock=clock)
    for decode, requests in ((1, 1), (16, 16)):
        a = _roofline(base).breakdown(decode, 0, requests)
        b = _roofline(other).breakdown(decode, 0, requests)
        assert a.bound == b.bound == {"t_lin": "memory", "t_ap": None, "t_ad": "memory"}
        assert b.seconds == a.seconds
        assert _roofline(other).batch_time(decode, 0, requests) == \
            _roofline(base).batch_time(decode, 0, requests)
    assert _roofline(other).kv_capacity == _roofline(base).kv_capacity


def test_users_set_the_clock_on_a_record():
    mine = specs.GPU("H200-measured", 989.4e12, 4.8e12, 141 * GiB, 450e9, 1978.9e12,
                     clock=0.9)
    assert mine.sustained_fp8_flops == 1978.9e12 * 0.9
    assert _roofline(mine).batch_time(0, 8192, 1) > _roofline("H200").batch_time(0, 8192, 1)
    a100 = dataclasses.replace(specs.gpu("A100-80GB"), clock=0.5)
    assert a100.sustained_fp8_flops is None and a100.sustained_flops == 156e12
    for bad in (0, -1, 2.5, math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError, match="clock must be a number > 0 and at most 2"):
            specs.GPU("bad", 1e12, 1e12, GiB, 1e9, clock=bad)


def test_the_factors_are_their_derivations():
    # NVIDIA's MLPerf Inference v4.1 Llama 2 70B Offline tokens/s (mlcommons/
    # inference_results_v4.1): 8 x H200 at 700 W, 8 x H200-CTS at 1,000 W, 1 x GH200
    h200_700w, h200_cts, gh200 = 31302.7 / 8, 34864.2 / 8, 4067.52
    assert specs.gpu("H200-SXM-141GB-CTS").clock == round(h200_cts / h200_700w, 3)
    assert specs.gpu("GH200-144GB").clock == round(gh200 / h200_700w, 2)
    # the H200 NVL: 600 W at the 700 W part's FLOP/s per watt, within 2% of its datasheet
    assert 600 / 700 * 989.4 / 835.5 == pytest.approx(specs.gpu("H200-NVL-141GB").clock,
                                                      abs=0.02)
