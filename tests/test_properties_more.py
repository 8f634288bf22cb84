"""More property-based tests (issue 9): random arrival and size laws, latency
models and networks of engines; the same numbers in another process."""

import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import check_run

import llmqueue as q
from llmqueue.engine.reference import run_reference
from llmqueue.models import arrivals, sizes
from llmqueue.models.latency import Interpolated, Linear, StepModel
from llmqueue.models.workload import compose
from llmqueue.network.network import Network
from llmqueue.network.routers import ROUTERS
from llmqueue.policies.builtin import make_policy

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

arrival_laws = st.one_of(
    st.builds(arrivals.Renewal, st.sampled_from([0.05, 0.3, 1.0])),
    st.builds(arrivals.Poisson, st.sampled_from([0.5, 4.0, 20.0])),
    st.builds(arrivals.Gamma, st.sampled_from([1.0, 6.0]), st.sampled_from([0.3, 1.0, 3.0])))
size_laws = st.one_of(
    st.builds(sizes.Fixed, st.integers(1, 500)),
    st.builds(sizes.UniformInt, st.just(1), st.integers(2, 400)),
    st.builds(sizes.PoissonSize, st.sampled_from([3.0, 80.0])),
    st.builds(sizes.LogNormal, st.sampled_from([20.0, 300.0]), st.sampled_from([0.5, 2.0])),
    st.builds(lambda a, b: sizes.Mixture([(0.8, a), (0.2, b)]),
              st.builds(sizes.Fixed, st.integers(1, 50)),
              st.builds(sizes.UniformInt, st.just(500), st.just(900))),
    st.builds(sizes.Empirical, st.lists(st.integers(0, 300), min_size=1, max_size=6)))
latencies = st.one_of(
    st.builds(StepModel), st.builds(Linear, st.sampled_from([0.0, 0.01]),
                                    st.sampled_from([1e-4, 1e-3])),
    st.just(Interpolated([1, 128, 512], [0.02, 0.05, 0.15])),
    st.builds(q.Staircase, st.sampled_from([0.0, 0.01]), st.just(0.03), st.sampled_from([32, 128])),
    st.builds(q.Constant, st.sampled_from([0.02, 0.2])))
names = st.sampled_from(["sarathi", "orca", "vllm", "fastertransformer", "step-fill",
                         "whole-prefill"])


@SETTINGS
@given(arrival_laws, size_laws, size_laws, latencies, names,
       st.sampled_from([16, 256, None]), st.sampled_from([1, 4, None]),
       st.integers(0, 2**31 - 1))
def test_laws_and_latency_models_keep_every_rule(arrival, prefill, decode, latency, name,
                                                 bmax, kmax, seed):
    workload = compose(arrival, prefill, decode, count=30, seed=seed)
    policy = make_policy(name)
    r = q.simulate(workload, policy, bmax=bmax, kmax=kmax, latency=latency, horizon=30.0,
                   batches=True, requests=True)
    check_run(r, bmax, kmax, work_conserving=policy.work_conserving)
    batches, _ = run_reference(workload, policy, bmax=bmax, kmax=kmax, latency=latency,
                               horizon=30.0)
    assert r.batch_log == batches
    again = q.simulate(workload, policy, bmax=bmax, kmax=kmax, latency=latency, horizon=30.0)
    # token timing (TBT, scheduling delay) is kept only with a request log: the rest of
    # the summary does not depend on the logs
    timing = {k for k in r.summary if k.startswith(("tbt_", "sched_delay_"))}
    assert all(again.summary[k] is None for k in timing)
    assert {k: v for k, v in again.summary.items() if k not in timing} == \
        {k: v for k, v in r.summary.items() if k not in timing}


@SETTINGS
@given(st.integers(1, 4), st.sampled_from(sorted(ROUTERS)), names, st.sampled_from([64, 512]),
       st.sampled_from([2, None]), st.floats(1.0, 30.0), st.integers(0, 1000))
def test_networks_account_for_every_request(engines, router, name, bmax, kmax, rate, seed):
    net = Network(seed=seed, batches=True)
    net.add_replicas("pool", engines, router=router, policy=name, bmax=bmax, kmax=kmax)
    workload = compose(arrivals.Poisson(rate), sizes.UniformInt(0, 300),
                       sizes.UniformInt(1, 40), count=60, seed=seed)
    fed = sum(1 for a in workload if a.time < 8.0)
    net.feed("pool", workload)
    result = net.run(horizon=8.0)
    total = result.total.summary
    assert total["arrivals"] == fed
    parts = [r.summary for r in result.engines.values()]
    assert sum(s["arrivals"] for s in parts) == fed
    for s in parts + [total]:
        assert s["arrivals"] == s["completed"] + s["residents_final"] + s["waiting_final"]
    for engine in result.engines.values():
        check_run(engine, bmax, kmax, work_conserving=make_policy(name).work_conserving)


def test_same_numbers_in_another_process_whatever_the_hash_seed():
    cmd = [sys.executable, "-m", "llmqueue", "run", "single", "--set", "arrival=poisson",
           "--set", "rate=3", "--set", "vp=300", "--set", "vd=80", "--seed", "5",
           "--horizon", "120", "--json"]
    outputs = []
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1]
