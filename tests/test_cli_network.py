"""The command line for the multi-engine scenarios: rows, keys and bad input."""

import json

from test_cli import KEYS

from llmqueue.cli.main import main


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_parallel_gives_a_row_per_engine_and_a_total(capsys):
    doc = run_json(capsys, "run", "parallel", "--set", "engines=3", "--set", "router=jsq",
                   "--set", "load=0.5", "--horizon", "60", "--seed", "2")
    rows = doc["rows"]
    assert [r["label"] for r in rows] == ["engine-0", "engine-1", "engine-2", "total"]
    for row in rows:
        assert KEYS | {"load", "capacity_tokens_per_s", "router"} <= set(row)
    assert rows[-1]["arrivals"] == sum(r["arrivals"] for r in rows[:-1])
    assert rows[-1]["load"] < 0.6


def test_parallel_all_routers_gives_their_totals(capsys):
    doc = run_json(capsys, "run", "parallel", "--set", "router=all", "--set", "engines=2",
                   "--horizon", "20")
    assert [r["label"] for r in doc["rows"]] == [
        "random", "round-robin", "jsq", "jsq-tokens", "power-of-two"]


def test_rybko_stolyar_rows_carry_backlog_and_job_figures(capsys):
    doc = run_json(capsys, "run", "rybko-stolyar", "--set", "priority=entering",
                   "--horizon", "200")
    labels = [r["label"] for r in doc["rows"]]
    assert labels == ["entering/engine-1", "entering/engine-2", "entering/total"]
    total = doc["rows"][-1]
    assert KEYS <= set(total) and {"backlog_max", "backlog_final", "job_e2e_p50"} <= set(total)
    assert set(total["classes"]) == {"A", "B"}


def test_agents_and_disaggregated_run(capsys):
    doc = run_json(capsys, "run", "agents", "--horizon", "60")
    assert [r["label"] for r in doc["rows"]] == ["planner", "worker", "aggregator", "total"]
    assert doc["rows"][1]["load_expected"] > doc["rows"][0]["load_expected"]
    doc = run_json(capsys, "run", "disaggregated", "--horizon", "30")
    assert [r["label"] for r in doc["rows"]] == [
        "colocated/total", "disaggregated/prefill", "disaggregated/decode", "disaggregated/total"]


def test_bad_input_is_one_line_and_exit_2(capsys):
    for argv in (["run", "parallel", "--set", "router=fastest"],
                 ["run", "rybko-stolyar", "--set", "priority=none"],
                 ["run", "parallel", "--set", "engines=0"],
                 ["run", "disaggregated", "--set", "prefill_gpus=4"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("llmqueue: error:") and "\n" not in err
