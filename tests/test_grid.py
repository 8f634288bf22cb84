"""Grids: expansion, the ``--grid`` grammar, and seeds that never move."""

import os
import subprocess
import sys

import pytest

from llmqueue.experiments import REGISTRY, get
from llmqueue.sweeps import grid
from llmqueue.sweeps.runner import plan

SINGLE = REGISTRY["single"]


def test_expand_is_the_cartesian_product_last_key_fastest():
    points = grid.expand({"a": [1, 2], "b": ["x", "y", "z"]})
    assert points == [{"a": a, "b": b} for a in (1, 2) for b in "xyz"]


@pytest.mark.parametrize("spec, key, values", [
    ("rate=1,2.5,4", "rate", [1.0, 2.5, 4.0]),
    ("rate=0.1:0.3:0.1", "rate", [0.1, 0.2, 0.3]),        # STOP included, no 0.30000000000000004
    ("rate=1:2:0.4", "rate", [1.0, 1.4, 1.8]),            # steps that miss STOP stop short
    ("bmax=128:512:128", "bmax", [128, 256, 384, 512]),
    ("kmax=none,50", "kmax", [None, 50]),
    ("chunked=true,false", "chunked", [True, False]),
    ("scheduler=sarathi,orca", "scheduler", ["sarathi", "orca"]),
    ("vp=7", "vp", [7]),
])
def test_grid_specs(spec, key, values):
    assert grid.parse(SINGLE, spec) == (key, values)


@pytest.mark.parametrize("spec, fragment", [
    ("colour=red,blue", "grid colour: single has no parameter 'colour'"),
    ("bmax=128,lots", "grid bmax must be an integer >= 1 or none; got 'lots'"),
    ("rate=3:1:1", "grid rate: empty range"),
    ("rate=1:3:0", "grid rate: STEP must be > 0"),
    ("rate=1:3:-1", "grid rate: STEP must be > 0"),
    ("rate=1:x:1", "grid rate: START:STOP:STEP needs three numbers"),
    ("bmax=1:10:2.5", "grid bmax: an integer parameter needs integer"),
    ("arrival=1:2:1", "grid arrival: START:STOP:STEP needs three numbers and a numeric"),
    ("rate=1,,2", "grid rate: empty value"),
    ("rate=", "--grid takes KEY=V1,V2"),
])
def test_bad_grid_specs_name_the_key(spec, fragment):
    with pytest.raises(ValueError) as err:
        grid.parse(SINGLE, spec)
    assert fragment in str(err.value)


def seeds_by_point(rates, schedulers=("sarathi",), **kw):
    tasks = plan(get("single"), {"arrival": ["poisson"], "rate": rates}, 3,
                 schedulers=list(schedulers), **kw)
    return {(t.point["rate"], t.point["scheduler"], t.replicate): t.seed for t in tasks}


def test_adding_a_grid_point_keeps_every_other_seed():
    small = seeds_by_point([1.0, 2.0])
    large = seeds_by_point([0.5, 1.0, 1.5, 2.0])
    assert all(large[key] == seed for key, seed in small.items())
    assert len(set(large.values())) == len(large)  # every point and replicate differs


def test_a_key_at_its_default_value_keeps_the_seeds():
    plain = plan(get("single"), {"arrival": ["poisson"], "rate": [1.0]}, 2)
    spelled = plan(get("single"), {"arrival": ["poisson"], "rate": [1.0], "vp": [290]}, 2)
    assert [t.seed for t in plain] == [t.seed for t in spelled]


def test_schedulers_share_their_arrivals_and_the_base_seed_moves_all():
    seeds = seeds_by_point([1.0], schedulers=("sarathi", "orca"))
    assert seeds[(1.0, "sarathi", 0)] == seeds[(1.0, "orca", 0)]
    other = seeds_by_point([1.0], base_seed=1)
    assert other[(1.0, "sarathi", 0)] != seeds[(1.0, "sarathi", 0)]


def test_seeds_are_the_same_in_every_process():
    here = grid.run_seed(0, {"rate": 2.0, "vp": 10, "kmax": None}, 4)
    code = ("from llmqueue.sweeps.grid import run_seed;"
            "print(run_seed(0, {'vp': 10, 'kmax': None, 'rate': 2.0}, 4))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": root}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True).stdout
        assert int(out) == here
    assert 0 <= here < 2**63


def test_parameters_added_later_keep_the_run_seeds_of_runs_that_do_not_set_them():
    # the seed of this kmax-region point before the KV parameters existed (a golden value:
    # a sweep's rows must not change when an experiment gains a parameter)
    tasks = plan(get("kmax-point"), {"lambda_p": [200.0], "lambda_d": [100.0]}, 1,
                 schedulers=["sarathi"], fixed={"bmax": 128, "kmax": 100, "gap": 0.4675},
                 horizon=3000.0)
    assert tasks[0].seed == 8278497016401325204
    with_memory = plan(get("kmax-point"), {"lambda_p": [200.0], "lambda_d": [100.0]}, 1,
                       schedulers=["sarathi"], fixed={"bmax": 128, "kmax": 100, "gap": 0.4675,
                                                      "kv": 50_000}, horizon=3000.0)
    assert with_memory[0].seed != tasks[0].seed
