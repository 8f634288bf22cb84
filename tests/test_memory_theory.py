"""KV-cache memory theory in closed form (SPEC 7.1, 7.5, 7.6) against SPEC's
independent figures (7.8.1-7.8.6, 8.1, 8.4) and hand-derived values."""

import itertools
import math

import pytest

from llmqueue import theory
from llmqueue.models.latency import Constant, Staircase, StepModel
from llmqueue.theory import memory as mem
from llmqueue.theory import wait

GIB = 2**30

# --- SPEC 7.8.1, Nie et al. Table 1 ----------------------------------------
# SPEC names only the first row's law (uniform:10:1600 for vp and vd).  The
# other two rows are derived from SPEC's whole-prompt E[g] (769,082 and
# 1,339,571): searching integer uniforms U{lo..hi} for vp and vd, the pairs
# vp ~ U{10..2133}, vd ~ U{10..1066} (2:1) and vp ~ U{10..1066}, vd ~ U{10..2133}
# (1:2) are the ones with lo = 10 (as in row 1) that reproduce both that E[g]
# and SPEC's continuous chunked mu (3.9568, 2.9020); both keep E[vp+vd] ~ 1610.
TABLE1 = [  # (vp range, vd range, b_bar, calculator mu [P], whole-prompt E[g], mu [I])
    ((10, 1600), (10, 1600), 0.0372, 3.2636, 1_078_715, 3.2645),
    ((10, 2133), (10, 1066), 0.0430, 3.9568, 769_082, 3.9612),
    ((10, 1066), (10, 2133), 0.0337, 2.9020, 1_339_571, 2.9019),
]
M_TABLE1 = 131_000


def continuous_uniform(lo, hi):
    """Mean and variance of the continuous uniform on [lo, hi]."""
    return (lo + hi) / 2, (hi - lo) ** 2 / 12


def integer_uniform(lo, hi):
    """Mean and variance of the integer uniform U{lo..hi}: ((n^2 - 1) / 12)."""
    n = hi - lo + 1
    return (lo + hi) / 2, (n * n - 1) / 12


@pytest.mark.parametrize("vp, vd, b_bar, mu_calc, _g, _mu", TABLE1)
def test_table1_calculator_chunk_512_continuous_moments(vp, vd, b_bar, mu_calc, _g, _mu):
    (mp, varp), (md, vard) = continuous_uniform(*vp), continuous_uniform(*vd)
    mean_g = mem.mean_kv_area(mp, md, varp, vard, chunk=512)
    assert mem.mu_mem(M_TABLE1, mean_g, b_bar) == pytest.approx(mu_calc, abs=0.0005)


@pytest.mark.parametrize("vp, vd, b_bar, _mu_calc, g_whole, mu_whole", TABLE1)
def test_table1_whole_prompt_integer_moments(vp, vd, b_bar, _mu_calc, g_whole, mu_whole):
    (mp, varp), (md, vard) = integer_uniform(*vp), integer_uniform(*vd)
    mean_g = mem.mean_kv_area(mp, md, varp, vard)
    assert mean_g == pytest.approx(g_whole, abs=0.5)
    assert mem.mu_mem(M_TABLE1, mean_g, b_bar) == pytest.approx(mu_whole, abs=0.00005)
    assert mem.delta(vp[1] + vd[1], M_TABLE1) == pytest.approx(0.0244, abs=0.00005)


def test_table1_integer_moments_move_the_calculator_by_under_0_0005():
    (mp, varp) = integer_uniform(10, 1600)
    mean_g = mem.mean_kv_area(mp, mp, varp, varp, chunk=512)
    assert mem.mu_mem(M_TABLE1, mean_g, 0.0372) == pytest.approx(3.2636, abs=0.0005)


def test_mean_kv_area_is_the_average_of_kv_area():
    # brute force over a small independent grid: vp in U{1..7}, vd in U{0..4}
    pairs = list(itertools.product(range(1, 8), range(5)))
    mp, varp = integer_uniform(1, 7)
    md, vard = integer_uniform(0, 4)
    for chunk in (None, 3):
        mean = sum(mem.kv_area(p, d, chunk) for p, d in pairs) / len(pairs)
        assert mem.mean_kv_area(mp, md, varp, vard, chunk) == pytest.approx(mean)


# --- SPEC 7.8.2 ---------------------------------------------------------------
def test_7_8_2_memory_binds_far_below_bmax():
    # SPEC 9 allows a = 0 with c > 0: 7.8's constant iteration time is
    # Staircase(c=0.0372, a=0, b0=1), the same as Constant(0.0372); c = a = 0 is refused.
    assert Staircase(c=0.0372, a=0, b0=1).batch_time(7, 300, 2) == 0.0372
    with pytest.raises(ValueError, match="a must be"):
        Staircase(c=0, a=0, b0=1)
    joint = mem.lambda_joint(M_TABLE1, 805, 805, 1_078_715, 10**6, Constant(0.0372))
    assert joint.b_star == pytest.approx(196, abs=0.5)  # 131,000 * 1610 / 1,078,715
    assert joint.binding == "memory"
    assert joint.rate == joint.memory == pytest.approx(3.2645, abs=0.00005)
    assert joint.b_bar == 0.0372
    mu_stable = joint.memory * (1 - mem.delta(3200, M_TABLE1))
    assert mu_stable == pytest.approx(3.185, abs=0.0005)


# --- SPEC 7.8.3 and 7.5 ------------------------------------------------------
LINEAR = Staircase(c=0.02, a=2e-5, b0=1)


def test_7_8_3_formulas():
    g = mem.kv_area(20, 200)
    assert g == 24_120
    assert 100_000 / g == pytest.approx(4.146, abs=0.0005)
    assert mem.b_star(100_000, 220, g) == pytest.approx(912.1, abs=0.05)
    joint = mem.lambda_joint(100_000, 20, 200, g, 10**6, LINEAR)
    assert joint.binding == "memory"
    assert joint.rate == joint.memory == pytest.approx(108.41, abs=0.005)
    assert joint.slots is None


def test_7_8_3_wait_quota_and_capacity():
    assert wait.wait_thresholds([(20, 200, 1)], 100_000) == [4]
    assert wait.wait_thresholds([(20, 200, 1)], 100_000, block_size=16) == [3]
    assert LINEAR.tokens_time(4 * 220) == pytest.approx(0.0376)
    assert wait.lambda_wait([(20, 200, 1)], [4], LINEAR) == pytest.approx(106.38, abs=0.005)
    assert 4 * mem.kv_area(20, 200) == 96_480  # WAIT(4)'s steady KV


def test_wait_thresholds_mix_headroom_and_floor_of_one():
    # hand: g(10, 10) = 11*10 + 55 = 165, g(0, 1) = 0 + 1 = 1;
    # sum p g = 0.5*165 + 0.5*1 = 83; (1000 - 4) * 0.5 / 83 = 6.0 -> 6 each
    assert wait.wait_thresholds([(10, 10, 1), (0, 1, 1)], 1000, headroom=4) == [6, 6]
    # weights are relative: p = (3, 1): 996 * 3 / (3*165 + 1) = 6.02 -> 6; 996 / 496 -> 2
    assert wait.wait_thresholds([(10, 10, 3), (0, 1, 1)], 1000, headroom=4) == [6, 2]
    # a tiny cache still gives a quota of 1
    assert wait.wait_thresholds([(10, 10, 1)], 10) == [1]


def test_lambda_wait_prices_the_steady_batch():
    # StepModel: 2 quotas of (100, 3) -> decode 6, prefill 200 tokens:
    # 0.005 + 0.0008*6 + 0.00002*200 + 0.0003*200**0.6
    t = 0.005 + 0.0048 + 0.004 + 0.0003 * 200 ** 0.6
    assert wait.lambda_wait([(100, 3, 1)], [2], StepModel()) == pytest.approx(2 / t)


# --- SPEC 7.6 areas ----------------------------------------------------------
def test_point_c_area_7_8_6():
    # 290 = 10 chunks of 29: Nie's form and the remainder-first minimum agree
    assert mem.kv_area(290, 990, chunk=29) == pytest.approx(779_240)
    assert mem.kv_area_min(290, 990, 29) == 779_240
    # mu_mem at t_128 = 0.04675 s for 29-40 k tokens: 0.80-1.10 req/s; 77,900
    # tokens in use carry point C's 2.14 req/s
    assert mem.mu_mem(29_000, 779_240, 0.04675) == pytest.approx(0.80, abs=0.005)
    assert mem.mu_mem(40_000, 779_240, 0.04675) == pytest.approx(1.10, abs=0.005)
    assert mem.mu_mem(77_900, 779_240, 0.04675) == pytest.approx(2.14, abs=0.005)


def test_kv_area_min_by_hand():
    # vp = 10, chunk 4: remainder first gives chunks 2, 4, 4 -> KV 2, 6, 10 = 18
    # (q = 3, r = 2: 3*2 + 4*3 = 18); decodes vd = 2: 11 + 12 = 23
    assert mem.kv_area_min(10, 2, 4) == 18 + 23
    # Nie's form: [(1 + 10/4)*10 + 2*2*10 + 3*2] / 2 = (35 + 40 + 6) / 2
    assert mem.kv_area(10, 2, chunk=4) == pytest.approx(40.5)
    # (Nie's form is a fluid average, so it may fall below the integer minimum;
    # the remainder taken last would give KV 4, 8, 10 = 22 > 18)
    assert mem.kv_area(10, 2) == 3 * 10 + 3  # KV 10, 11, 12
    assert mem.kv_area_min(0, 0, 4) == 0


def test_kv_area_blocks_is_the_sum_over_iterations():
    for vp, vd, block in itertools.product((0, 1, 5, 16, 17, 33), (0, 1, 2, 15, 40),
                                           (1, 2, 16)):
        expected = sum(math.ceil((vp + k) / block) * block for k in range(vd + 1))
        assert mem.kv_area_blocks(vp, vd, block) == expected
    assert mem.kv_area_blocks(20, 200, 1) == mem.kv_area(20, 200)


# --- lambda_joint's three resources -------------------------------------------
@pytest.mark.parametrize("bmax", [100, 500, 912, 913, 1000, 10**6])
def test_memory_binds_iff_b_star_below_bmax(bmax):
    joint = mem.lambda_joint(100_000, 20, 200, 24_120, bmax, LINEAR)
    assert (joint.binding == "memory") == (joint.b_star < bmax)
    assert joint.rate == min(joint.compute, joint.memory)


def test_compute_binds_with_a_small_budget():
    # bmax = 500: 500 / (0.02 + 0.01) / 220 = 75.758 req/s < 108.41
    joint = mem.lambda_joint(100_000, 20, 200, 24_120, 500, LINEAR)
    assert joint.binding == "compute"
    assert joint.rate == pytest.approx(500 / 0.03 / 220)


def test_slots_bind_with_a_small_kmax():
    # kmax = 3, whole prompts: 201 iterations per request, slot-limited batch
    # 3 * 220 / 201 tokens: lambda = 1 / (0.02 * 201 / 3 + 2e-5 * 220) = 1 / 1.3444
    joint = mem.lambda_joint(100_000, 20, 200, 24_120, 10**6, LINEAR, kmax=3)
    assert joint.binding == "slots"
    assert joint.rate == joint.slots == pytest.approx(1 / 1.3444)
    assert mem.lambda_joint(100_000, 20, 200, 24_120, 10**6, LINEAR,
                            kmax=1000).binding == "memory"


def test_lambda_kmax_at_point_c():
    # kmax 100, t_128 = 0.04675 s, 10 chunks of 29 + 990 decodes: 100 / 46.75
    assert mem.lambda_kmax(100, 0.04675, 10 + 990) == pytest.approx(1 / 0.4675)


def test_mu_mix():
    # half at 2 req/s and half at 4: 1 / (0.25 + 0.125)
    assert mem.mu_mix([2, 4], [1, 1]) == pytest.approx(8 / 3)
    assert mem.mu_mix([2, 4], [0.5, 0.5]) == pytest.approx(8 / 3)
    assert mem.mu_mix([3.0], [1]) == 3.0


# --- SPEC 7.1 helpers -------------------------------------------------------
@pytest.mark.parametrize("shape, kib", [
    ((48, 8, 128), 192),   # CodeLlama-34B (7.8.6: 196,608 B)
    ((32, 8, 128), 128),   # Llama-3-8B
    ((40, 40, 128), 800),  # Llama-2-13B
    ((28, 4, 128), 56),    # Qwen2.5-7B
])
def test_kv_bytes_per_token_matches_8_1_table(shape, kib):
    assert mem.kv_bytes_per_token(*shape) == kib * 1024
    assert mem.kv_bytes_per_token(48, 8, 128) == 196_608


def test_kv_capacity_tokens_7_8_6_and_8_4():
    # 7.8.6: 71.2 GiB usable - 62.8 GiB weights - 1 or 3 GiB activations at
    # 192 KiB a token: 7.4 GiB -> 40,413.9 and 5.4 GiB -> 29,491.2 tokens
    def free(activation_gib, block):
        return mem.kv_capacity_tokens(71.2 * GIB, 62.8 * GIB, activation_gib * GIB,
                                      196_608, utilization=1.0, block_size=block)
    assert free(1, 1) == 40_413
    assert free(3, 1) == 29_491
    assert free(1, 16) == 16 * 2525
    # 8.4: CodeLlama-34B on one A100-80GB keeps 19,106 tokens.  Params by 8.3's
    # formula: 48 * (2*8192*8192 + 2*8192*1024 + 3*8192*22016) + 2*32000*8192
    params = 48 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 22016) + 2 * 32000 * 8192
    assert params == 33_743_175_680
    tokens = mem.kv_capacity_tokens(80 * GIB, 2 * params, 5.65 * GIB, 196_608, block_size=1)
    assert tokens == 19_106


# --- bad inputs ---------------------------------------------------------------
@pytest.mark.parametrize("call, fragment", [
    (lambda: mem.mu_mem(0, 1000, 0.1), "M must be"),
    (lambda: mem.mu_mem(-5, 1000, 0.1), "M must be"),
    (lambda: mem.mu_mem(100, 0, 0.1), "mean_g must be"),
    (lambda: mem.mu_mem(100, 10, 0), "b_bar must be"),
    (lambda: mem.delta(10, 0), "M must be"),
    (lambda: mem.b_star(0, 10, 10), "M must be"),
    (lambda: mem.kv_area(-1, 10), "vp must be a whole number of tokens"),
    (lambda: mem.kv_area(10, -1), "vd must be a whole number of tokens"),
    (lambda: mem.kv_area(10, 1, chunk=0), "chunk must be an integer >= 1"),
    (lambda: mem.kv_area_min(10, 1, 0), "chunk must be an integer >= 1"),
    (lambda: mem.kv_area_blocks(10, 1, 0), "block_size must be an integer >= 1"),
    (lambda: mem.mean_kv_area(-1, 10), "mean_vp must be"),
    (lambda: mem.mean_kv_area(1, 10, var_vd=-1), "var_vd must be"),
    (lambda: wait.wait_thresholds([(20, 200, 0)], 1000), "p must be a finite number > 0"),
    (lambda: wait.wait_thresholds([(20, 200, -1)], 1000), "p must be a finite number > 0"),
    (lambda: wait.wait_thresholds([(20, -2, 1)], 1000), "vd must be"),
    (lambda: wait.wait_thresholds([(20, 200)], 1000), "types must hold"),
    (lambda: wait.wait_thresholds([], 1000), "types must hold"),
    (lambda: wait.wait_thresholds([(20, 200, 1)], 0), "M must be an integer >= 1"),
    (lambda: wait.wait_thresholds([(20, 200, 1)], 1000, block_size=0),
     "block_size must be an integer >= 1"),
    (lambda: wait.wait_thresholds([(20, 200, 1)], 1000, headroom=1000), "headroom must be"),
    (lambda: wait.lambda_wait([(20, 200, 1)], [4, 1]), "n must give one quota per type"),
    (lambda: wait.lambda_wait([(20, 200, 1)], [0]), "n must be an integer >= 1"),
    (lambda: mem.lambda_joint(0, 20, 200, 24_120, 512), "M must be"),
    (lambda: mem.lambda_joint(1000, 20, 200, 24_120, 0), "bmax must be an integer >= 1"),
    (lambda: mem.lambda_joint(1000, 20, 200, 24_120, 512, kmax=0), "kmax must be"),
    (lambda: mem.lambda_joint(1000, 20, 200, 24_120, 512, kmax=4, mean_iterations=0),
     "mean_iterations must be"),
    (lambda: mem.lambda_kmax(4, 0, 10), "t_bar must be"),
    (lambda: mem.mu_mix([], []), "rates and weights"),
    (lambda: mem.mu_mix([1, 0], [1, 1]), "rates must be"),
    (lambda: mem.mu_mix([1, 2], [0, 0]), "weights must not all be 0"),
    (lambda: mem.kv_bytes_per_token(0, 8, 128), "layers must be an integer >= 1"),
    (lambda: mem.kv_bytes_per_token(48, 8, 128, dtype_bytes=0), "dtype_bytes must be"),
    (lambda: mem.kv_capacity_tokens(80 * GIB, 0, 0, 1, utilization=0), "utilization must be"),
    (lambda: mem.kv_capacity_tokens(80 * GIB, 0, 0, 1, utilization=1.5),
     "utilization must be"),
    (lambda: mem.kv_capacity_tokens(80 * GIB, 0, 0, 1, block_size=0), "block_size must be"),
    (lambda: mem.kv_capacity_tokens(10 * GIB, 20 * GIB, 0, 1), "model does not fit"),
])
def test_bad_inputs_name_the_parameter(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_public_names_are_exported():
    for name in ("kv_area", "mu_mem", "lambda_joint", "kv_bytes_per_token",
                 "kv_capacity_tokens", "mu_mix", "lambda_kmax", "kv_area_min", "kv_area_blocks",
                 "JointCapacity"):
        assert getattr(theory, name) is getattr(mem, name)
        assert name in theory.__all__
    for name in ("wait_thresholds", "lambda_wait", "nested_wait_quotas"):
        assert getattr(theory, name) is getattr(wait, name)
        assert name in theory.__all__


@pytest.mark.parametrize("predicted, rate, binding, expected", [
    ("stable", 13.0, "memory", "unstable"),       # above mu_mem: a necessary condition fails
    ("no guarantee", 13.0, "memory", "unstable"),
    ("stable", 12.5, "memory", "boundary"),        # at it
    # below it nothing is promised: lambda_joint is an upper bound, and greedy
    # admission's preemptions waste some of it (issue 30: runs at 0.95 grow)
    ("stable", 10.0, "memory", "no guarantee (memory)"),
    ("no guarantee", 10.0, "memory", "no guarantee"),
    ("stable", 13.0, "compute", "stable"),         # memory does not bind
    ("unstable", 1.0, "memory", "unstable"),
    ("no guarantee", 13.0, "slots", "unstable"),   # above the slot capacity
    ("boundary", 12.5, "slots", "boundary"),
    ("no guarantee", 10.0, "slots", "no guarantee"),  # below it Theorem 2's verdict stands
])
def test_a_prediction_with_memory_or_slots(predicted, rate, binding, expected):
    from llmqueue.theory.stability import PREDICTIONS, with_limits
    figures = {"lambda_joint": 12.5, "mu_mem": 12.5, "binding": binding}
    assert with_limits(predicted, rate, figures) == expected
    assert expected in PREDICTIONS
    if binding == "memory":
        assert with_limits(predicted, rate, {"mu_mem": 12.5, "binding": binding}) == expected
    assert with_limits(predicted, rate, {}) == predicted  # no cache
    # no request fits: none is served, nothing to predict from memory
    assert with_limits(predicted, rate, {**figures, "fits": False}) == predicted
