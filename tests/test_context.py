"""The batch context a context-aware latency model sees in a simulation (SPEC 8.2):
hand-computed roofline iterations, the incremental sums against a brute-force
count, and skip-ahead over iterations that differ only by their context."""

import random

import pytest
import simpy

import llmqueue as q
from llmqueue.common.units import to_ticks
from llmqueue.engine import residents as residents_module
from llmqueue.engine.kv import kv_tokens
from llmqueue.engine.processes import Engine
from llmqueue.engine.recorder import Recorder
from llmqueue.engine.reference import run_reference
from llmqueue.engine.simulate import feed
from llmqueue.models.context import BatchContext
from llmqueue.policies.builtin import ClassPriority, make_policy

# Llama-3-8B on one H100 with the ideal preset (SPEC 8.1, 8.3): no tile, no
# overheads, no element-wise term; every efficiency 1.
L, H, NQ, NKV, DH, F_FFN, V = 32, 4096, 32, 8, 128, 14336, 128256
FLOPS, HBM = 989.4e12, 3.35e12
P_ATTN = H * NQ * DH + 2 * H * NKV * DH + NQ * DH * H
P_L = L * (P_ATTN + 3 * H * F_FFN)
P_HEAD = V * H
KAPPA = 2 * L * NKV * DH * 2


def ideal_seconds(decode_contexts=(), chunks=()):
    """SPEC 8.3 with the ideal preset, written out: decoders holding the given
    cached tokens, prefill chunks ``(n, s)``."""
    d, p = len(decode_contexts), sum(n for n, _ in chunks)
    tokens, sequences = d + p, len(chunks) + d
    t_lin = max((2 * tokens * P_L + 2 * sequences * P_HEAD) / FLOPS, 2 * (P_L + P_HEAD) / HBM)
    cross = sum(n * s for n, s in chunks)
    sq = sum(n * n for n, _ in chunks)
    t_ap = max(4 * NQ * DH * L * (cross + (sq + p) / 2) / FLOPS,
               KAPPA * (sum(s for _, s in chunks) + p) / HBM)
    x = sum(decode_contexts)
    t_ad = max(4 * NQ * DH * L * x / FLOPS, KAPPA * (x + d) / HBM)
    return t_lin + t_ap + t_ad


@pytest.fixture(scope="module")
def ideal():
    return q.Roofline("H100", "llama-3-8b", efficiency="ideal")


def durations(result):
    return [(b.decode, dict(b.prefill), b.duration) for b in result.batch_log]


def test_decode_iterations_see_each_decoders_cached_tokens(ideal):
    # two prompts of 1000 and 3000 tokens in one iteration, then five decode
    # iterations (run as one skipped run) at contexts (1000 + j, 3000 + j)
    run = q.simulate(q.from_list([(0.0, 1000, 5), (0.0, 3000, 5)]), "sarathi", bmax=4096,
                     kmax=None, latency=ideal, batches=True)
    rows = durations(run)
    assert rows[0][:2] == ((), {0: 1000, 1: 3000})
    assert rows[0][2] == pytest.approx(to_ticks(ideal_seconds(chunks=[(1000, 0), (3000, 0)])),
                                       abs=2)
    for j, (decode, prefill, ticks) in enumerate(rows[1:]):
        assert (decode, prefill) == ((0, 1), {})
        assert ticks == pytest.approx(to_ticks(ideal_seconds([1000 + j, 3000 + j])), abs=2)
    assert len(rows) == 6
    # the decode attention reads every cached token: a staircase-like model would not grow
    assert rows[5][2] > rows[1][2]


def test_prefill_chunks_see_the_tokens_cached_before_them(ideal):
    # a 3000-token prompt in chunks of 1024: contexts 0, 1024, 2048
    run = q.simulate(q.from_list([(0.0, 3000, 1)]), "sarathi", bmax=1024, kmax=None,
                     latency=ideal, batches=True)
    rows = durations(run)
    chunks = [(1024, 0), (1024, 1024), (952, 2048)]
    for (decode, prefill, ticks), chunk in zip(rows, chunks):
        assert decode == () and prefill == {0: chunk[0]}
        assert ticks == pytest.approx(to_ticks(ideal_seconds(chunks=[chunk])), abs=2)
    assert rows[3][:2] == ((0,), {})
    assert rows[3][2] == pytest.approx(to_ticks(ideal_seconds([3000])), abs=2)


def test_only_context_models_get_a_context():
    env = simpy.Environment()
    assert not Engine(env, make_policy("sarathi")).contexts
    assert Engine(env, make_policy("sarathi"),
                  latency=q.Roofline("H100", "llama-3-8b")).contexts


def test_batch_times_are_batch_time_at_each_later_context():
    rng = random.Random(3)
    model = q.Roofline("A100-80GB", "codellama-34b")
    for _ in range(200):
        d = rng.randint(0, 200)
        chunks = [(rng.randint(1, 600), rng.randint(0, 4000)) for _ in range(rng.randint(0, 3))]
        if d == 0 and not chunks:
            d = 1
        p = sum(n for n, _ in chunks)
        context = BatchContext.of([rng.randint(0, 6000) for _ in range(d)], chunks)
        k = rng.choice([rng.randint(1, 31), rng.randint(32, 300)])
        many = model.batch_times(d, p, d + len(chunks), context, k)
        assert many == [model.batch_time(d, p, d + len(chunks), context.after(j, d, p))
                        for j in range(k)]  # exactly, not approximately


class Growing:
    """A context model without ``batch_times``: 5 ms + 2 us per cached token
    (no context: none cached, as the theory asks)."""

    needs_context = True

    def batch_time(self, decode, prefill, requests, context=None):
        c = context or BatchContext()
        return 0.005 + 2e-6 * (c.decode_ctx + c.chunk_ctx) + 1e-5 * prefill


def random_rows(rng, n):
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rng.choice([2.0, 8.0, 30.0]))
        rows.append((round(t, 3), rng.choice([0, rng.randint(1, 30), rng.randint(30, 700)]),
                     rng.randint(1, 80), rng.choice(["x", "y"])))
    return q.from_list(rows)


@pytest.mark.parametrize("seed", range(8))
def test_skip_ahead_stepping_and_the_reference_agree(seed):
    rng = random.Random(seed)
    policy = make_policy(["sarathi", "orca", "vllm", "fastertransformer"][seed % 4])
    if seed % 3 == 0:
        policy = ClassPriority(policy, ["y", "x"])
    latency = [q.Roofline("A100-80GB", "codellama-34b"), Growing()][seed % 2]
    workload = random_rows(rng, 120)
    kw = dict(bmax=rng.choice([16, 64, 256]), kmax=rng.choice([None, 4, 32]),
              horizon=rng.choice([None, 12.0]), latency=latency)
    fast = q.simulate(workload, policy, batches=True, requests=True, timeseries=True, **kw)
    slow = q.simulate(workload, policy, batches=True, requests=True, timeseries=True,
                      skip_ahead=False, **kw)
    batches, _ = run_reference(workload, policy, **kw)
    assert fast.batch_log == slow.batch_log == batches
    assert fast.summary == slow.summary and fast.series == slow.series


@pytest.fixture
def checked_contexts(monkeypatch):
    """Every context the residents build, checked against a count by hand."""
    seen = []
    keep = residents_module.Residents.context

    def context(self, plan):
        mine = keep(self, plan)
        swapped = getattr(self, "swapped", ())  # off the GPU: neither served nor waiting
        waiting = sum(1 for r in self if r.prefill_left == 0
                      and all(r is not d for d in plan.decode)
                      and all(r is not x for x in swapped))
        assert mine == BatchContext.of([kv_tokens(r) for r in plan.decode],
                                       [(n, kv_tokens(r)) for r, n in plan.prefill], waiting)
        seen.append(mine)
        return mine
    monkeypatch.setattr(residents_module.Residents, "context", context)
    return seen


@pytest.mark.parametrize("seed", range(4))
def test_the_running_sums_count_every_cached_token(seed, checked_contexts):
    rng = random.Random(10 + seed)
    workload = random_rows(rng, 120)
    latency = q.Roofline("A100-80GB", "codellama-34b")
    name = ["sarathi", "orca", "vllm", "fastertransformer"][seed]
    q.simulate(workload, name, bmax=64, kmax=16, latency=latency)
    swap = dict(preemption="swap", swap_tokens=4000) if seed % 2 else {}  # KV kept on the CPU
    kv = q.KV(capacity_tokens=2000, block_size=rng.choice([1, 16]),
              admission=rng.choice(["lazy", "prompt"]), restart=rng.choice(["keep", "scratch"]),
              **swap)
    result = q.simulate(workload, ["sarathi", "orca"][seed % 2], bmax=128, kmax=None,
                        latency=latency, kv=kv)
    assert result.summary["preemptions"] > 0  # decoders left and came back
    assert len(checked_contexts) > 500


def test_skip_ahead_still_skips_under_a_context_model():
    env = simpy.Environment()
    engine = Engine(env, make_policy("fastertransformer"), bmax=128, recorder=Recorder(128),
                    latency=q.Roofline("A100-80GB", "codellama-34b"), until=10**12)
    env.process(feed(env, engine, q.renewal(0.4675, 290, 990), 10**12))
    steps = 0
    while env.peek() < 2 * 10**11:
        env.step()
        steps += 1
    assert engine.recorder.batches > 3000
    assert steps < engine.recorder.batches / 2
