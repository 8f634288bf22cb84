"""The analytic bounds of SPEC 8.6 and the cost of SPEC 8.8, against SPEC's
figures (E8.4, E8.5, E8.6, 8.8) and values worked out by hand."""

import math

import pytest

from llmqueue.hardware.roofline import Roofline
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import Constant, Staircase
from llmqueue.models.sizes import Fixed, Geometric
from llmqueue.theory import (SLO, Bounds, Cost, RequestLatency, attainment, lambda_star,
                             memory_bound, shape_time, slot_bound, smallest_iteration, token_bound,
                             unloaded_latency, zero_load)

PAPER = Staircase(c=0.01128, a=0.03547, b0=128)
T1 = 0.01128 + 0.03547            # t(1..128)   = 0.04675 s
T2 = 0.01128 + 2 * 0.03547        # t(129..256) = 0.08222 s
T512 = 0.01128 + 4 * 0.03547      # t(512)      = 0.15316 s
E85_SLO = SLO(ttft=1, tpot=0.15)


# --- E8.5: the paper's staircase, bmax 512, geometric sizes 129 / 112 -------------

def test_e85_token_bound_is_theorem_2():
    tb = token_bound(PAPER, 512, 129, 112)
    # 512 / 0.15316 / (129 + 112) = 13.871 req/s
    assert tb.lambda_tok == pytest.approx(512 / T512 / 241, rel=1e-12)
    assert round(tb.lambda_tok, 2) == 13.87
    assert tb.exact and tb.lambda_tok == lambda_star(512, 129, 112, PAPER)
    # the mix shape d = round(512 * 112/241) = 238, p = 274, still one full batch:
    # min(274/129, 238/112) / 0.15316 = 2.1240 / 0.15316 = 13.868
    assert tb.mix_shape == (274, 238) and tb.t_mix == pytest.approx(T512)
    assert tb.lambda_mix == pytest.approx(274 / 129 / T512)
    # Theorem 2 does not depend on kmax (slots are the slot bound's part)
    assert token_bound(PAPER, 512, 129, 112, kmax=16).lambda_tok == tb.lambda_tok


def test_e85_unloaded_latency_of_the_mean_prompt():
    # 8.6: TTFT = prefill chunks at bmax alone + one decode iteration at context vp.
    # vp = 129 is one chunk of 129 tokens: t(129) + t(1) = 0.08222 + 0.04675 = 0.12897 s.
    # (SPEC E8.5 says "about 0.14 s"; 8.6's definition gives 0.129 s for the mean prompt,
    # and 0.114 s averaged over the geometric prompts, below.)  TPOT = t(1) = 0.04675 s.
    u = unloaded_latency(PAPER, 512, 129, 112)
    assert u.ttft == pytest.approx(T2 + T1) and u.ttft == pytest.approx(0.12897)
    assert u.tpot == pytest.approx(T1) and u.tbt_max == pytest.approx(T1)
    assert u.e2e == pytest.approx(u.ttft + 111 * T1)
    # 1100 tokens: chunks 512, 512, 76: 2 t(512) + t(76) + t(1) = 0.39982 s
    assert unloaded_latency(PAPER, 512, 1100, 5).ttft == pytest.approx(2 * T512 + 2 * T1)
    # no prompt: just the decode iteration; one decode token: TPOT and TBT undefined
    one = unloaded_latency(PAPER, 512, 0, 1)
    assert one.ttft == pytest.approx(T1) and one.tpot is None and one.tbt_max is None


def test_e85_zero_load_attainment_is_one():
    z = zero_load(PAPER, 512, Geometric(129), Geometric(112), E85_SLO)
    # TTFT <= 1 s needs t(vp) <= 0.95325 s: vp <= 26 * 128 = 3328 tokens, missed with
    # probability (128/129)**3328 = 6e-12; TPOT is always t(1) = 0.04675 <= 0.15 s.
    assert z.attainment == 1.0 and len(z.unloaded) == len(z.sizes) == 10**4
    # Mean unloaded TTFT: t(1) + c + a E[ceil(vp/128)], E[ceil(vp/128)] = 1/(1 - r),
    # r = P(vp > 128) = (128/129)**128 = 0.3693: 0.04675 + 0.01128 + 0.03547 * 1.5856
    # = 0.1143 s (standard error over 10^4 draws about 0.0003 s).
    r = (128 / 129) ** 128
    mean = sum(u.ttft for u in z.unloaded) / len(z.unloaded)
    assert mean == pytest.approx(T1 + 0.01128 + 0.03547 / (1 - r), abs=0.0015)


def test_zero_load_below_target_marks_the_slo_infeasible():
    # TTFT <= 0.1 s holds exactly when the prompt fits one 128-token step:
    # t(vp <= 128) + t(1) = 0.0935 s, the next step gives 0.12897 s.
    # P(vp <= 128) = 1 - (128/129)**128 = 0.6307 (standard error 0.0048).
    slo = SLO(ttft=0.1)
    z = zero_load(PAPER, 512, Geometric(129), Geometric(112), slo)
    assert z.attainment == pytest.approx(1 - (128 / 129) ** 128, abs=0.015)
    b = Bounds.of(PAPER, 512, Geometric(129), Geometric(112), slo=slo)
    assert b.attainment_zero_load == z.attainment
    assert b.infeasible(0.9) and not b.infeasible(0.6)
    # the unloaded latencies are what relative SLOs read: 1x passes every request
    records = [RequestLatency(u.ttft, u.tpot, u.tbt_max, u.e2e, 0.0, True, None, u)
               for u in z.unloaded]
    assert attainment(records, SLO.relative(ttft=1, tpot=1)).joint == 1.0


def test_bounds_bundle_e85():
    b = Bounds.of(PAPER, 512, Geometric(129), Geometric(112), kmax=64, slo=E85_SLO)
    assert round(b.lambda_tok, 2) == 13.87 and b.exact
    assert b.attainment_zero_load == 1.0 and not b.infeasible(0.9)
    # slot bound 64 / (0.04675 * 112) = 12.223 req/s, below lambda_tok: it is the limit
    assert b.lambda_slot == pytest.approx(64 / (T1 * 112))
    assert b.lambda_kv is None and b.limit == b.lambda_slot
    assert not Bounds.of(PAPER, 512, 129, 112).infeasible()  # A_0 not computed


# --- E8.4: Llama-3-8B on an H100, the default roofline ----------------------------

def test_e84_mix_shape_on_the_roofline():
    r = Roofline("H100", "llama-3-8b")
    tb = token_bound(r, 2048, 512, 256)
    # d = round(2048 * 256/768) = 683 decodes, p = 1365 prefill tokens in one chunk
    assert tb.mix_shape == (1365, 683) and not tb.exact
    # SPEC E8.4: t_mix = 82.4 ms and lambda_mix = 2048 / t_mix / 768 = 32.35 req/s.
    assert tb.t_mix == pytest.approx(0.0824, rel=0.005)
    assert tb.lambda_mix == pytest.approx(32.35, rel=0.005)
    # The shape, built by hand: the chunk at context E[vp]/2 = 256, each decode at
    # 8.6's mean context E[vp] + (E[vd] - 1)/2 = 639.5 (a request decodes at contexts
    # vp .. vp + vd - 1; E8.4 rounds to 640, which moves t_mix by 0.03 %).  683 * 639.5
    # = 436778.5 cached tokens: halfway between two whole contexts.
    def by_hand(decode_ctx):
        ctx = BatchContext.of(chunks=[(1365, 256)])._replace(decode_ctx=decode_ctx)
        return r.batch_time(683, 1365, 684, ctx)
    assert tb.t_mix == pytest.approx((by_hand(436778) + by_hand(436779)) / 2, rel=1e-12)
    assert tb.t_mix == pytest.approx(by_hand(683 * 640), rel=0.001)
    # the LP's shapes include the mix shape, so the hull bound is at least lambda_mix
    assert tb.lambda_tok >= tb.lambda_mix


def test_roofline_smallest_iteration_and_shape_time():
    r = Roofline("H100", "llama-3-8b")
    assert smallest_iteration(r) == r.batch_time(1, 0, 1, BatchContext())
    assert smallest_iteration(PAPER) == pytest.approx(T1)
    # a fractional context interpolates between the whole contexts either side
    lo, hi = (r.batch_time(1, 0, 1, BatchContext(decode_ctx=x)) for x in (1000, 1001))
    assert shape_time(r, 1, 0, 1000.25) == pytest.approx(lo + 0.25 * (hi - lo))


# --- the LP over shapes, by hand on a made-up context model ------------------------

class TwoPure:
    """A context model where a pure batch (all prefill or all decode) of 64 tokens
    lasts 1 s and any mixed batch 10 s."""

    needs_context = True

    def batch_time(self, decode, prefill, requests, context=None):
        return 1.0 if decode == 0 or prefill == 0 else 10.0


def test_token_bound_lp_time_shares_the_shapes():
    m = TwoPure()
    # m_p = m_d = 1: half the time each pure shape, (32, 32) tokens/s: 32 req/s; the
    # mix shape (32, 32) in one 10 s batch gives only 3.2 req/s.
    tb = token_bound(m, 64, 1, 1)
    assert tb.lambda_tok == pytest.approx(32) and tb.lambda_mix == pytest.approx(3.2)
    # m_p = 3, m_d = 1: prefill a share theta with 64 theta / 3 = 64 (1 - theta):
    # theta = 3/4, 16 req/s
    assert token_bound(m, 64, 3, 1).lambda_tok == pytest.approx(16)
    # kmax = 32 forbids the all-decode shape of 64 but not a batch of 32 decodes
    # alone (1 s): 64 theta prefill = 32 (1 - theta) decodes at theta = 1/3, 21.33
    # req/s.  SPEC 8.6's full shapes alone leave only the (32, 32) mix in 10 s:
    # 3.2 req/s, no bound at all
    tb = token_bound(m, 64, 1, 1, kmax=32)
    assert tb.lambda_tok == pytest.approx(64 / 3) and tb.lambda_mix == pytest.approx(3.2)
    # no prefill at all: the all-decode shape, 64 decodes/s over 1 token each
    assert token_bound(m, 64, 0, 1).lambda_tok == pytest.approx(64)


# --- slot and memory bounds ------------------------------------------------------

def test_slot_bound():
    # 64 slots, 0.04675 s per decode, 112 decodes each: 64 / (0.04675 * 112) = 12.223
    assert slot_bound(64, T1, 112) == pytest.approx(12.2231, abs=1e-4)


def test_memory_bound_fixed_sizes_is_exact():
    # E[vd vp + vd (vd + 1)/2] = 256 * 512 + 256 * 257 / 2 = 131072 + 32896 = 163968
    # 421011 tokens (8.4: Llama-3-8B on an H100) at t_1 = 10 ms: 256.76 req/s
    lam = memory_bound(421_011, 0.01, Fixed(512), Fixed(256))
    assert lam == pytest.approx(421_011 / (0.01 * 163_968), rel=1e-12)
    assert memory_bound(421_011, 0.01, 512, 256) == lam   # plain ints are fixed sizes


def test_memory_bound_sampled_geometric():
    # Geometric of mean m: E[X^2] = 2 m^2 - m.  vp, vd independent, means 129 and 112:
    # E = 129 * 112 + (2 * 112^2 - 112 + 112) / 2 = 14448 + 12544 = 26992
    lam = memory_bound(100_000, T1, Geometric(129), Geometric(112))
    assert lam == pytest.approx(100_000 / (T1 * 26_992), rel=0.02)
    assert memory_bound(100_000, T1, Geometric(129), Geometric(112), seed=0) == lam
    b = Bounds.of(Constant(0.01), 512, 512, 256, capacity_tokens=421_011)
    assert b.lambda_kv == pytest.approx(256.76, abs=0.01)


@pytest.mark.parametrize("call, name", [
    (lambda: token_bound(PAPER, 0, 129, 112), "bmax"),
    (lambda: token_bound(PAPER, 512, -1, 112), "mean_prefill"),
    (lambda: token_bound(PAPER, 512, 129, 0), "mean_decode"),
    (lambda: token_bound(PAPER, 512, 129, 112, kmax=0), "kmax"),
    (lambda: slot_bound(64, -T1, 112), "t1"),
    (lambda: memory_bound(0, T1, 129, 112), "capacity_tokens"),
    (lambda: memory_bound(10, T1, Geometric(129), Geometric(112), draws=0), "draws"),
    (lambda: unloaded_latency(PAPER, 512, 10, 0), "vd"),
    (lambda: zero_load(PAPER, 512, 129, 112, {"a": E85_SLO}), "slo"),
    (lambda: Bounds.of(PAPER, 512, 129, 112).infeasible(2), "target"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()


# --- cost (SPEC 8.8, E8.5, E8.6) --------------------------------------------------

def test_cost_e85_sarathi():
    # 12.5 req/s * 112 tokens * 3600 s = 5.04 M output tokens/h at $2.21/h: $0.4385/M
    c = Cost.of(engines=1, tp=1, price_per_gpu_hour=2.21, rate=12.5, mean_prefill=129,
                mean_decode=112)
    assert c.per_hour == pytest.approx(2.21)
    assert c.per_million_output == pytest.approx(2.21 / 5.04)
    assert round(c.per_million_output, 2) == 0.44
    # 241 tokens per request: 10.845 M tokens/h, $0.2038/M
    assert c.per_million_total == pytest.approx(2.21 / (12.5 * 241 * 3600 / 1e6))
    assert c.per_million_good_output == c.per_million_output   # attainment 1


def test_cost_e86_three_against_four_engines():
    # 39 req/s * 112 * 3600 = 15.7248 M tokens/h; 3 A100s $6.63/h, 4 $8.84/h
    three = Cost.of(3, 1, 2.21, 39, 129, 112, attainment=0.929)
    four = Cost.of(4, 1, 2.21, 39, 129, 112, attainment=0.996)
    assert round(three.per_million_output, 2) == 0.42
    assert round(four.per_million_output, 2) == 0.56
    # good output: 6.63 / (15.7248 * 0.929) = $0.4538/M
    assert three.per_million_good_output == pytest.approx(6.63 / (15.7248 * 0.929))
    assert Cost.of(2, 4, 4.25, 1, 0, 100).per_hour == pytest.approx(34)   # K tp price
    assert math.isinf(Cost.of(1, 1, 2.21, 1, 1, 1, attainment=0).per_million_good_output)


@pytest.mark.parametrize("kwargs, name", [
    ({"engines": 0}, "engines"), ({"tp": 1.5}, "tp"), ({"price_per_gpu_hour": -1},
                                                        "price_per_gpu_hour"),
    ({"rate": 0}, "rate"), ({"mean_decode": 0}, "mean_decode"), ({"attainment": 1.2},
                                                                  "attainment"),
])
def test_cost_bad_arguments(kwargs, name):
    args = dict(engines=1, tp=1, price_per_gpu_hour=2.21, rate=1, mean_prefill=1,
                mean_decode=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"^{name}"):
        Cost.of(**args)
