"""The ``Examples`` in the public API's docstrings run and hold (issue #17).

Each example's expected output comes from a closed form or a worked figure of
SPEC, so a failing example is a wrong docstring or a changed behaviour.
"""

import doctest
import importlib

import pytest

#: Modules holding the documented public names, and the examples each must have
#: at least (so the test fails if the examples disappear).
MODULES = {
    "llmqueue.engine.simulate": 3,      # simulate
    "llmqueue.engine.kv": 2,            # KV
    "llmqueue.models.workload": 7,      # renewal, poisson, compose
    "llmqueue.models.latency": 2,       # Staircase
    "llmqueue.models.mooncake": 1,      # parse_line
    "llmqueue.models.prefixes": 3,      # zipf_popularity, BlockIds, PrefixGroups
    "llmqueue.models.sessions": 3,      # Sessions
    "llmqueue.theory.memory": 7,        # kv_area, mu_mem, lambda_joint, kv_bytes_per_token,
                                        # kv_capacity_tokens
    "llmqueue.theory.wait": 1,          # wait_thresholds
    "llmqueue.theory.capacity": 1,      # lambda_star
    "llmqueue.theory.slo": 5,           # SLO
    "llmqueue.theory.prefix": 9,        # ideal_hit_ratio, che_hit_ratio, zipf_popularity, ...
    "llmqueue.policies.wait": 4,        # Wait
    "llmqueue.hardware.memory": 1,      # kv_capacity
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
    assert result.attempted >= MODULES[name], \
        f"{name} has {result.attempted} docstring examples, expected >= {MODULES[name]}"

