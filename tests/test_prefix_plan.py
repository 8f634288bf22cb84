"""``plan`` reads prefix caching (issue #31 item 8): prefix groups in a plan's
traffic, probes on a prefix cache with content ids, and bounds at the effective
prompt: the groups' hit where the cache never evicts, the first probe's
measured hit where it may; bad combinations are one-line errors."""

import doctest
import json

import numpy as np
import pytest

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.engine.kv import KV
from llmqueue.planning import EngineSpec, Traffic, plan, plan_engines
from llmqueue.planning import groups as groups_module
from llmqueue.planning.hits import unloaded_cached
from llmqueue.planning.replicate import Task, run_replication
from llmqueue.planning.spec import arrivals, prompt_ids
from llmqueue.theory.bounds import unloaded_latency
from llmqueue.theory.slo import SLO

# SPEC E10.2: 8 groups, zipf 1, 1024 shared tokens, suffix and decode geometric 128,
# the staircase, sarathi, bmax 512, kmax none, KV blocks of 16 (H = 16)
E10_2 = Traffic.prefix_groups(8, 1024, q.Geometric(128), q.Geometric(128))
LAMBDA_C, LAMBDA_0 = 13.06, 2.612  # with every group's head cached, and without the cache
QUICK = dict(n_requests=200, reps=2, rel_tol=0.05)


def engine(tokens=10**9, prefix=True):
    return EngineSpec("sarathi", 512, None, kv=KV(capacity_tokens=tokens, block_size=16,
                                                  prefix=prefix))


@pytest.fixture(scope="module")
def cached():
    return plan(E10_2, engine(), SLO(ttft=5.0), **QUICK)


def test_e10_2_plan_reads_the_groups_hit(cached):
    r = cached
    assert r.hits.source == "groups" and r.hits.mean_hit == 1024 and not r.hits.may_evict
    assert r.bounds.lambda_tok == pytest.approx(LAMBDA_C, abs=0.005) and r.bounds.exact
    assert r.hits.nominal.lambda_tok == pytest.approx(LAMBDA_0, abs=0.001)
    first = r.probes[0]  # the bound at the effective prompt: a FAIL without simulation
    assert first.rate == r.bounds.lambda_tok and first.reps == 0 and first.decision == "fail"
    assert 4 * LAMBDA_0 < r.goodput < LAMBDA_C  # far above the capacity without the cache
    assert 0.8 < r.at_lo["prefix_hit_ratio"][0] < 0.9  # 1024 of 1152, less the cold misses
    doc = r.as_dict()
    assert doc["mean_hit"] == 1024 and doc["mean_hit_source"] == "groups"
    assert "exact at an unlimited cache" in doc["mean_hit_note"]
    assert doc["prefix_gain"] == pytest.approx(5.0)
    assert doc["effective_prefill"] == pytest.approx(128)
    json.dumps(doc)


def test_the_same_plan_without_the_cache_keeps_its_numbers():
    r = plan(E10_2, engine(prefix=False), SLO(ttft=5.0), **QUICK)
    assert r.hits is None and "mean_hit" not in r.as_dict()
    assert "prefix_hit_ratio" not in r.at_lo
    assert r.bounds.lambda_tok == pytest.approx(LAMBDA_0, abs=0.001)
    assert r.goodput < LAMBDA_0
    # its requests carry no ids: the engine without a prefix cache takes them
    task = Task(E10_2, engine(prefix=False), SLO(ttft=5.0), 1.0, 0, 0, 10, 50, 0.9, "joint",
                False)
    assert run_replication(task).hits is None


def test_a_cache_that_may_evict_reads_the_first_probe():
    # E10.3's groups in a small cache: far fewer hits than the groups' heads
    work = Traffic.prefix_groups(200, 512, 64, 16, zipf=0.8)
    r = plan(work, engine(20_000), SLO(ttft=2.0), **QUICK)
    hits = r.hits
    assert hits.source == "first probe" and hits.may_evict
    first = r.probes[0]  # at the capacity without the cache, simulated
    assert first.reps and first.rate == pytest.approx(hits.nominal.limit)
    assert first.note.startswith("measures the prefix cache's hit")
    assert hits.rate == first.rate and 0.2 < hits.hit_ratio < 0.6
    assert 100 < hits.mean_hit < 0.8 * work.groups.mean_hit
    assert not r.bounds.exact and r.bounds.lambda_tok < hits.ceiling
    assert r.goodput > hits.nominal.limit  # the cache helps, even small
    assert "measured by the first probe" in r.as_dict()["mean_hit_note"]
    assert all(p.rate <= hits.ceiling for p in r.probes)


def test_zero_load_with_the_head_cached():
    # unloaded, a 1152-token prompt takes three chunks; with 1024 cached, one of 128
    cold, warm = unloaded_latency(q.Staircase(), 512, 1152, 10), \
        unloaded_cached(q.Staircase(), 512, 1152, 10, 1024)
    assert warm.ttft < 0.35 * cold.ttft and warm.tpot == cold.tpot
    r = plan(E10_2, engine(), SLO(ttft=0.25), max_probes=1, n_requests=50, reps=2)
    assert not r.infeasible and r.attainment_zero_load > 0.9
    assert r.hits.nominal.attainment_zero_load < 0.1  # infeasible without the cache


def test_common_random_numbers_and_ids():
    unit, vp, _, _ = arrivals(E10_2, 300, 3, 1)
    ids = prompt_ids(E10_2, vp, 3, 1)
    assert ids == prompt_ids(E10_2, vp, 3, 1)
    assert prompt_ids(E10_2, arrivals(E10_2, 100, 3, 1)[1], 3, 1) == ids[:100]
    assert all(len(i) == p // 16 for i, p in zip(ids, vp.tolist()))
    heads = {i[:64] for i in ids}  # 8 groups of 64 shared blocks each
    assert len(heads) <= 8 and all(min(h) % 64 == 0 for h in heads)
    assert prompt_ids(Traffic(q.Geometric(10), 5), vp, 3, 1) is None
    assert np.all(E10_2.groups.hits(vp) == 1024)
    assert E10_2.mean_prefill == 1152 and "prefix groups G=8" in E10_2.describe()


def test_plan_engines_reads_the_groups_hit():
    r = plan_engines(30, E10_2, engine(), SLO(ttft=5.0), n_requests=100, reps=2)
    assert r.k_lb == 3 and r.hits.mean_hit == 1024  # 30 / 13.06 -> 3, not 30 / 2.61 -> 12
    assert r.k_min is not None and 0 < r.load < 1
    assert r.as_dict()["mean_hit_source"] == "groups"


SET = ["--set", "kv=1000000000", "--set", "kv_block=16", "--set", "prefix_groups=8",
       "--set", "shared=1024", "--set", "vp=geometric:128", "--set", "vd=geometric:128",
       "--set", "bmax=512", "--set", "kmax=none"]
QUICK_CLI = ["--ttft", "5", "--requests", "100", "--reps", "2"]


def test_cli_plan_with_prefix(capsys):
    assert main(["plan", *SET, "--set", "prefix=on", *QUICK_CLI, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mean_hit"] == 1024 and doc["mean_hit_source"] == "groups"
    assert doc["lambda_tok"] == pytest.approx(LAMBDA_C, abs=0.005)
    assert doc["lambda_tok_no_cache"] == pytest.approx(LAMBDA_0, abs=0.001)
    assert "prefix=True" in doc["config"]["kv"]
    assert 4 * LAMBDA_0 < doc["goodput"] < LAMBDA_C
    assert main(["plan", *SET, "--set", "prefix=on", *QUICK_CLI]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("prefix cache: "))
    assert "E[hit] = 1024 tokens" in line and "exact at an unlimited cache" in line
    assert "lambda_tok 13.06 req/s against 2.612 without the cache" in line
    assert "SPEC" not in line


PLAIN = ["--set", "kv=100000", "--set", "kv_block=16", "--set", "vp=geometric:128"]


@pytest.mark.parametrize("given, fragment", [
    (SET + ["--set", "prefix=on", "--set", "sessions=0.5"], "sessions cannot be set for plan"),
    (PLAIN + ["--set", "turns=3"], "turns cannot be set for plan"),
    (PLAIN + ["--set", "prefix=on"], "prefix=on needs a workload whose prompts share heads"),
    (PLAIN + ["--set", "shared=64"], "shared needs prefix_groups"),
    (PLAIN + ["--set", "zipf=0.5"], "zipf needs prefix_groups"),
    (SET + ["--set", "prefix=on", "--set", "hash_block=20"], "hash_block must be a multiple"),
    (SET + ["--set", "prefix=on", "--set", "kv=none"], "need a KV cache"),
])
def test_bad_combinations_are_one_line_errors(given, fragment, capsys):
    assert main(["plan", *given, "--ttft", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err


def test_bad_python_arguments():
    plain = Traffic(q.Geometric(128), q.Geometric(128))
    with pytest.raises(ValueError, match="carries no prefix ids"):
        plan(plain, engine(), SLO(ttft=5.0), **QUICK)
    with pytest.raises(ValueError, match="hash_block must be a multiple"):
        plan(Traffic.prefix_groups(8, 1024, 128, 128, hash_block=8), engine(), SLO(ttft=5.0))
    with pytest.raises(ValueError, match="Traffic.prefix_groups"):
        Traffic(q.Geometric(128), 128, groups=E10_2.groups)
    with pytest.raises(ValueError, match="zipf"):
        Traffic.prefix_groups(8, 1024, 128, 128, zipf=-1)


def test_groups_examples():
    assert doctest.testmod(groups_module).failed == 0
