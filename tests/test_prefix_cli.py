"""The prefix-caching keys on the command line (SPEC 10.8): ``prefix=on`` with
``kv``, prefix groups, sessions and Mooncake traces on ``run``, and
``capacity`` with hits; bad input is one line and exit code 2."""

import json

import pytest

from conftest import cli_error
from llmqueue.cli.main import main

E10_2 = ["--set", "kv=2000000", "--set", "kv_block=16", "--set", "prefix_groups=8",
         "--set", "shared=1024", "--set", "vp=geometric:128", "--set", "vd=geometric:128",
         "--set", "bmax=512", "--set", "kmax=none", "--set", "arrival=poisson"]


def run_json(argv, capsys):
    main(argv + ["--json"])
    return json.loads(capsys.readouterr().out)


def test_capacity_with_prefix_groups_gives_e10_2s_capacity(capsys):
    # SPEC E10.2: 512 / t(512) over 1152 - 1024 + 128 tokens = 13.06 req/s, 5x without
    doc = run_json(["capacity", *E10_2, "--set", "prefix=on", "--set", "rate=11.75"], capsys)
    assert doc["mean_hit"] == 1024
    assert doc["lambda_star_cached"] == pytest.approx(13.06, abs=0.005)
    assert doc["prefix_gain"] == pytest.approx(5.0)
    assert doc["verdicts"]["sarathi"]["predicted"] == "unstable"
    assert doc["verdicts"]["sarathi"]["predicted_cached"] == "stable"


def test_run_single_with_prefix_groups_reports_the_hits(capsys):
    doc = run_json(["run", "single", *E10_2, "--set", "prefix=on", "--set", "rate=5",
                    "--horizon", "60"], capsys)
    s = doc["rows"][0]
    assert 0.5 < s["prefix_hit_ratio"] < 0.9 and s["evictions"] == 0
    assert s["load_effective"] < s["load"]
    # the same workload without the cache: its ids are dropped, the sizes stay
    plain = run_json(["run", "single", *E10_2, "--set", "rate=5", "--horizon", "60"],
                     capsys)["rows"][0]
    assert "prefix_hit_ratio" not in plain and plain["arrivals"] == s["arrivals"]


def test_sessions_on_the_command_line(capsys):
    doc = run_json(["run", "single", "--set", "kv=1000000", "--set", "kv_block=16",
                    "--set", "prefix=on", "--set", "sessions=0.5", "--set", "turns=3",
                    "--set", "think=2", "--set", "message=32", "--set", "vd=16",
                    "--set", "bmax=512", "--set", "kmax=none", "--horizon", "60"], capsys)
    s = doc["rows"][0]
    assert s["sessions_started"] > 10 and s["sessions_cut"] == 0
    # turns 2 and 3 hit their transcript: 48 of 80 and 96 of 128 prompt tokens
    assert 0.4 < s["prefix_hit_ratio"] < 0.75


def test_a_mooncake_trace_replays_with_its_hits(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, '
                    '"hash_ids": [1, 2, 3]}\n'
                    '{"timestamp": 5000, "input_length": 1030, "output_length": 4, '
                    '"hash_ids": [1, 2, 9]}\n')
    common = ["run", "trace", "--set", f"path={path}", "--set", "kv=100000",
              "--set", "kv_block=16", "--set", "bmax=4096"]
    s = run_json(common + ["--set", "prefix=on"], capsys)["rows"][0]
    # H = 512: the second prompt (1030 tokens, 2 whole blocks) finds ids 1 and 2
    assert s["prefix_hit_tokens"] == 1024
    assert s["prefix_hit_ratio"] == pytest.approx(1024 / 2130)
    assert "prefix_hit_tokens" not in run_json(common, capsys)["rows"][0]


@pytest.mark.parametrize("argv, fragment", [
    (["run", "single", "--set", "prefix=on"], "prefix needs a KV cache"),
    (["run", "single", "--set", "prefix=maybe"], "prefix"),
    (["run", "single", "--set", "kv=1000", "--set", "kv_block=16", "--set", "prefix=on",
      "--set", "prefix_groups=2", "--set", "hash_block=20"], "hash_block must be a multiple"),
    (["run", "single", "--set", "prefix_groups=0"], "prefix_groups"),
])
def test_bad_prefix_input_is_one_line_and_exit_code_2(argv, fragment):
    assert fragment in cli_error(argv)


def test_the_chrome_trace_marks_each_hit(tmp_path, capsys):
    path = tmp_path / "t.json"
    main(["run", "single", "--set", "kv=200000", "--set", "kv_block=16", "--set", "prefix=on",
          "--set", "prefix_groups=2", "--set", "shared=64", "--set", "vp=16", "--set", "vd=4",
          "--set", "rate=2", "--horizon", "5", "--chrome-trace", str(path)])
    capsys.readouterr()
    hits = [e["args"] for e in json.loads(path.read_text())["traceEvents"]
            if e["name"] == "prefix hit"]
    # 64 shared tokens of 16-token blocks: every request after its group's first hits 64
    assert hits and all(h["cached_tokens"] == 64 for h in hits)


@pytest.mark.parametrize("argv", [
    ["run", "parallel", "--set", "router=prefix-affinity"],
    ["run", "parallel", "--set", "router=session-sticky"],
    ["plan", "--ttft", "1", "--engines-for", "10", "--router", "prefix-score"],
])
def test_a_cache_aware_router_on_traffic_without_ids_is_refused(argv):
    assert "which this traffic does not have" in cli_error(argv)
