"""First tokens emitted with the prefill (``first_token="prefill"``), worked by
hand, and both engine paths against the reference steppers."""

import random

import pytest

import llmqueue as q
from llmqueue.engine.errors import Stalled
from llmqueue.engine.reference import run_reference
from llmqueue.engine.reference_kv import run_reference_kv
from llmqueue.policies.builtin import make_policy

T = 0.04675  # the paper's staircase for a batch of at most 128 tokens

pytestmark = pytest.mark.filterwarnings("ignore:request .* can never fit")


def test_the_paper_model_is_the_default():
    rows = [(0.0, 10, 3), (0.05, 10, 1)]
    assert q.simulate(rows).summary == q.simulate(rows, first_token="decode").summary


def test_a_lone_request_gets_its_first_token_with_its_prefill():
    # 10 + 3 tokens: the prefill iteration emits token 1, two decodes emit 2 and 3
    r = q.simulate([(0.0, 10, 3)], first_token="prefill", requests=True)
    times = r.requests()[0]
    assert times.vd == 3  # the output tokens, as given
    assert times.prefill_done == times.first_token == pytest.approx(T)
    assert times.finished == pytest.approx(3 * T)
    s = r.summary
    assert (s.batches, s.ttft_p50) == (3, pytest.approx(T))
    assert s.tpot_p50 == pytest.approx(T)  # (3T - T) / (3 - 1)
    # the paper's model: a prefill, then three decode iterations
    paper = q.simulate([(0.0, 10, 3)]).summary
    assert (paper.batches, paper.ttft_p50) == (4, pytest.approx(2 * T))


def test_a_one_token_request_finishes_with_its_prefill():
    r = q.simulate([(0.0, 10, 1), (0.0, 0, 1)], first_token="prefill", requests=True)
    long, empty = r.requests()
    assert long.first_token == long.finished == long.prefill_done == pytest.approx(T)
    # no prompt to prefill: its token comes from its decode (in the same iteration here)
    assert empty.first_token == empty.finished == pytest.approx(T)
    s = r.summary
    assert (s.batches, s.completed, s.tpot_p50) == (1, 2, None)
    assert s["output_tokens_per_s"] * s.duration == pytest.approx(2)


def test_the_first_gap_runs_from_the_prefill_end():
    # c + a * ceil(b / 4): A's prefill (10 tokens) takes 0.31 s; B arrives meanwhile and
    # its prefill rides with A's first decode (11 tokens, 0.31 s); A's last decode 0.11 s
    latency = q.Staircase(0.01, 0.1, 4)
    rows = [(0.0, 10, 3), (0.05, 10, 1)]
    r = q.simulate(rows, first_token="prefill", latency=latency, bmax=None, requests=True)
    a, b = r.requests()
    assert (a.first_token, a.finished) == (pytest.approx(0.31), pytest.approx(0.73))
    assert (b.first_token, b.finished) == (pytest.approx(0.62), pytest.approx(0.62))
    assert list(r.tpot) == [pytest.approx(0.21)]  # (0.73 - 0.31) / 2
    assert list(r.tbt_max) == [pytest.approx(0.31)]  # token 1 -> 2 waited for B's prefill
    assert r.summary.ttft_p50 == pytest.approx((0.31 + 0.57) / 2)
    paper = q.simulate(rows, latency=latency, bmax=None, requests=True)
    assert list(paper.tbt_max) == [pytest.approx(0.11)]


def test_the_kv_cache_holds_the_tokens_processed():
    # vLLM: the last token's KV is never written, so the peak is vp + vd - 1
    kv = q.KV(capacity_tokens=14)
    s = q.simulate([(0.0, 10, 5)], kv=kv, first_token="prefill").summary
    assert (s.completed, s["kv_max"], s["ignored"]) == (1, 14, 0)
    s = q.simulate([(0.0, 10, 5)], kv=kv).summary  # the paper's model needs 15
    assert (s.completed, s["ignored"]) == (0, 1)


def test_output_and_prefill_rates_add_up():
    rows = [(0.01 * i, 30 + i, 1 + i % 7) for i in range(40)]
    for first in ("decode", "prefill"):
        s = q.simulate(rows, first_token=first, bmax=64, kmax=8).summary
        seconds = s.duration
        output = s["output_tokens_per_s"] * seconds
        prefill = s["prefill_tokens_per_s"] * seconds
        assert prefill == pytest.approx(sum(p for _, p, _ in rows))
        assert output == pytest.approx(sum(d for _, _, d in rows))  # every token, once
        emitted = 40 if first == "prefill" else 0
        assert output + prefill == pytest.approx(s.throughput_tokens_per_s * seconds + emitted)


def test_sessions_and_wait_are_refused():
    with pytest.raises(ValueError, match="sessions"):
        q.simulate(q.Sessions(1.0, 3, seed=1), first_token="prefill", horizon=5.0)
    with pytest.raises(ValueError, match="wait"):
        q.simulate([(0.0, 10, 3)], q.Wait(n=2), kv=q.KV(capacity_tokens=100),
                   first_token="prefill")
    with pytest.raises(ValueError, match="first_token must be one of decode, prefill"):
        q.simulate([(0.0, 10, 3)], first_token="sampled")


def _times(requests):
    return sorted((r.rid, r.arrival, r.admitted, r.prefill_done, r.first_token, r.finished)
                  for r in requests)


def _memory(requests):
    return sorted((r.rid, r.memory.ignored, r.memory.preemptions, r.memory.recomputed,
                   r.memory.area) for r in requests)


@pytest.mark.parametrize("seed", range(16))
def test_both_engine_paths_match_the_reference_steppers(seed):
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(60):
        t += rng.expovariate(rng.choice([2.0, 10.0]))
        rows.append((round(t, 3), rng.choice([0, rng.randint(1, 30), rng.randint(30, 200)]),
                     rng.choice([1, 2, rng.randint(1, 60)])))
    chunked = rng.random() < 0.8
    policy = make_policy(["sarathi", "orca", "vllm", "fastertransformer"][seed % 4],
                         chunked=chunked)
    options = {"bmax": rng.choice([16, 64, 256]) if chunked else 256,
               "kmax": rng.choice([None, 2, 8]), "horizon": rng.choice([None, 5.0])}
    kv = None if seed % 2 else q.KV(
        capacity_tokens=rng.choice([300, 1000]), block_size=rng.choice([1, 4, 16]),
        admission=rng.choice(["lazy", "prompt", "peak"]), restart=rng.choice(["keep", "scratch"]))
    try:
        if kv is None:
            batches, requests = run_reference(q.from_list(rows), policy, first_token="prefill",
                                              **options)
        else:
            ref = run_reference_kv(q.from_list(rows), policy, kv, first_token="prefill",
                                   **options)
            batches, requests = ref.batches, ref.requests
    except Stalled:
        return
    fast = q.simulate(q.from_list(rows), policy, kv=kv, batches=True, requests=True,
                      first_token="prefill", **options)
    assert fast.batch_log == batches
    assert _times(fast.request_log) == _times(requests)
    if kv is not None:
        assert list(fast.kv_log) == ref.kv_log
        assert _memory(fast.request_log) == _memory(requests)
        bare = q.simulate(q.from_list(rows), policy, kv=kv, first_token="prefill",
                          **options).summary
        keys = ("batches", "preemptions", "recomputed_tokens", "kv_mean", "kv_max",
                "memory_area_mean", "completed", "output_tokens_per_s")
        assert {k: bare[k] for k in keys} == {k: fast.summary[k] for k in keys}
