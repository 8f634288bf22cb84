"""The experiment contract: declared options are honoured, the others refused
before anything runs; parameters are checked against their bounds."""

import os
import subprocess
import sys

import pytest

from llmqueue.engine.options import NETWORK_OPTIONS, RunOptions
from llmqueue.experiments import REGISTRY, get, point_c


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "llmqueue", *argv], capture_output=True,
                          text=True, cwd=os.path.dirname(__file__))


@pytest.mark.parametrize("name", ["parallel", "agents", "rybko-stolyar", "disaggregated"])
def test_networks_refuse_a_warmup_instead_of_ignoring_it(name):
    with pytest.raises(ValueError, match=f"{name} does not support warmup"):
        get(name).execute(get(name).resolve({}), RunOptions(horizon=20.0, warmup=5.0))


def test_a_sweep_with_a_warmup_refuses_a_network_before_any_run():
    proc = cli("sweep", "parallel", "--grid", "load=0.5", "--warmup", "10", "--horizon", "20")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "parallel does not support warmup" in proc.stderr


def test_every_experiment_declares_options_it_can_take():
    for experiment in REGISTRY.values():
        # a horizon, unless it runs its requests until they finish (sarathi-demo, the plans)
        assert "horizon" in experiment.options or experiment.horizon is None, experiment.name
        if experiment.network:
            assert experiment.options <= NETWORK_OPTIONS


def test_seed_is_refused_where_nothing_is_random():
    assert not point_c.EXPERIMENT.seeded
    proc = cli("run", "point-c", "--scheduler", "sarathi", "--seed", "3", "--horizon", "5")
    assert proc.returncode == 2 and "point-c does not support seed" in proc.stderr


def test_disaggregated_keeps_the_batch_log_it_is_asked_for(tmp_path):
    out = tmp_path / "b.csv"
    proc = cli("run", "disaggregated", "--horizon", "20", "--batches", str(out))
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    # one file per row: colocated total, each disaggregated pool, disaggregated total
    assert written == ["b-colocated-total.csv", "b-disaggregated-decode.csv",
                       "b-disaggregated-prefill.csv", "b-disaggregated-total.csv"]
    lines = (tmp_path / "b-colocated-total.csv").read_text().splitlines()
    assert lines[0] == "start,duration,prefill_tokens,decode_tokens,requests,members"
    assert len(lines) > 10


@pytest.mark.parametrize("value", ["-5", "0"])
def test_point_c_refuses_a_bad_bmax(value):
    proc = cli("run", "point-c", "--set", f"bmax={value}")
    assert proc.returncode == 2
    assert "bmax must be an integer >= 1 or none" in proc.stderr


def test_point_c_uses_a_bmax_it_is_given():
    params = point_c.EXPERIMENT.resolve({"bmax": "256"})
    assert point_c.rows_of(params) == [(name, 256, True) for name in
                                       ("sarathi", "orca", "vllm", "fastertransformer")]
    [(label, result)] = point_c.run({**params, "scheduler": "sarathi"},
                                    RunOptions(horizon=20.0))
    assert label == "sarathi-256" and result.summary["arrivals"] == 42  # 20 / 0.4675
    default = point_c.EXPERIMENT.resolve({})
    assert point_c.rows_of(default) == point_c.ROWS
    assert point_c.rows_of({**default, "scheduler": "orca"}) == [("orca", 128, True)]


def test_point_c_refuses_chunked_false_on_the_reference_rows():
    with pytest.raises(ValueError, match="chunked=false needs a scheduler or a bmax"):
        point_c.rows_of(point_c.EXPERIMENT.resolve({"chunked": "false"}))


def test_point_c_with_a_real_kv_cache_is_memory_bound():
    # SPEC 7.8.6: 38,000 KV tokens cannot hold point C's load (1 / 0.4675 = 2.14 req/s)
    params = point_c.EXPERIMENT.resolve({"scheduler": "sarathi", "kv": "38000"})
    [(_, result)] = point_c.run(params, RunOptions(horizon=30.0))
    s = result.summary
    assert s["binding"] == "memory" and s["mu_mem"] < 1 / point_c.GAP
    assert s["preemptions"] >= 0 and 0 < s["kv_utilization"] <= 1
    [(_, plain)] = point_c.run(point_c.EXPERIMENT.resolve({"scheduler": "sarathi"}),
                               RunOptions(horizon=30.0))
    assert "binding" not in plain.summary  # no memory: the row is as before
