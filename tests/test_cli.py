"""The command line: the public contract of names, keys and files, and bad input."""

import csv
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import cli_error
from llmqueue.cli.main import main

KEYS = {"label", "arrivals", "completed", "pending_mean", "pending_max", "pending_final",
        "backlog_mean", "backlog_max", "backlog_final", "batches", "decode_batch_mean",
        "mixed_fraction", "decode_only_fraction", "prefill_only_fraction", "busy_fraction",
        "throughput_tokens_per_s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
        "e2e_mean"}


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_names_scenarios_and_schedulers(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = {line.split()[1] for line in out}
    assert {"point-c", "single", "trace", "sarathi", "orca", "vllm",
            "fastertransformer"} <= names


def test_point_c_json_has_the_six_rows_and_every_key(capsys):
    doc = run_json(capsys, "run", "point-c", "--horizon", "60")
    assert doc["scenario"] == "point-c"
    assert [r["label"] for r in doc["rows"]] == [
        "sarathi-128", "orca-128", "vllm-128", "fastertransformer-128",
        "fastertransformer-1024", "fastertransformer-whole"]
    for row in doc["rows"]:
        assert KEYS <= set(row)


def test_one_scheduler_gives_one_row(capsys):
    doc = run_json(capsys, "run", "point-c", "--scheduler", "orca", "--horizon", "30")
    assert [r["label"] for r in doc["rows"]] == ["orca-128"]


def test_single_takes_every_parameter(capsys):
    doc = run_json(capsys, "run", "single", "--scheduler", "vllm", "--set", "bmax=256",
                   "--set", "kmax=none", "--set", "arrival=poisson", "--set", "rate=2",
                   "--set", "vp=50", "--set", "vd=20", "--set", "c=0.01", "--set", "a=0.02",
                   "--set", "b0=64", "--set", "chunked=false", "--seed", "3",
                   "--horizon", "20")
    p = doc["params"]
    assert (p["scheduler"], p["bmax"], p["kmax"], p["chunked"], p["b0"]) == \
        ("vllm", 256, None, False, 64)
    assert 20 <= doc["rows"][0]["arrivals"] <= 60  # Poisson(40)


def test_log_files_follow_the_contract(tmp_path, capsys):
    ts, bt, rq = (str(tmp_path / n) for n in ("ts.csv", "b.csv", "r.csv"))
    assert main(["run", "single", "--horizon", "10", "--timeseries", ts, "--batches", bt,
                 "--requests", rq]) == 0
    with open(ts) as f:
        assert next(csv.reader(f)) == ["time", "pending", "backlog"]
    with open(bt) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["start", "duration", "prefill_tokens", "decode_tokens",
                             "requests", "members"]
    first = rows[0]
    assert first["members"] == "0:p128" and float(first["start"]) == pytest.approx(0.4675)
    with open(rq) as f:
        assert next(csv.reader(f)) == ["id", "arrival", "admitted", "prefill_done",
                                       "first_token", "finished", "vp", "vd"]


def test_trace_scenario_runs_until_every_request_finishes(tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("arrival,prefill,decode\n0.0,100,5\n0.1,20,3\n")
    doc = run_json(capsys, "run", "trace", "--set", f"path={path}")
    assert doc["rows"][0]["completed"] == 2 and doc["rows"][0]["pending_final"] == 0


def test_a_user_policy_runs_from_the_cli(tmp_path, capsys, monkeypatch):
    (tmp_path / "mypolicy.py").write_text(textwrap.dedent("""
        from llmqueue import Plan
        def decode_first_whole(view, budget):
            decode = view.decoding[:budget]
            left = budget - len(decode)
            chunks = []
            for r in view.prefilling:
                if r.prefill_left <= left:
                    chunks.append((r, r.prefill_left)); left -= r.prefill_left
            return Plan(decode, chunks)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    doc = run_json(capsys, "run", "single", "--scheduler", "mypolicy:decode_first_whole",
                   "--set", "bmax=512",
                   "--horizon", "30")
    assert doc["rows"][0]["batches"] > 0


@pytest.mark.parametrize("argv, fragment", [
    (["run", "single", "--set", "kmax=0"], "kmax must be an integer >= 1"),
    (["run", "single", "--set", "gap=-1"], "gap must be a finite number > 0"),
    (["run", "single", "--scheduler", "fifo"], "scheduler must be one of sarathi"),
    (["run", "nowhere"], "scenario must be one of point-c"),
    (["run", "single", "--set", "bmax=lots"], "bmax must be an integer >= 1 or none"),
    (["run", "single", "--set", "colour=red"], "single has no parameter 'colour'"),
    (["run", "single", "--horizon", "-5"], "--horizon must be a number > 0"),
    (["run", "trace"], "path must name a trace file"),
    (["run", "trace", "--set", "path=/no/such.csv"], "cannot read"),
    (["run", "single", "--set", "vp=2000", "--set", "chunked=false"], "can never fit"),
    (["frobnicate"], "invalid choice"),
    (["run", "single", "--set", "vp=uniform:1.5:3"], "vp 'uniform:1.5:3': LO and HI must be whole"),
    (["run", "single", "--set", "vp=uniform:1:1e17"], "LO and HI must be whole numbers"),
    (["run", "single", "--set", "vd=uniform:1:99999999999999999"], "vd 'uniform:1:9999"),
    (["run", "single", "--set", "vp=geometric:1e300"], "mean must be a number from 1 to"),
    (["run", "single", "--set", "gap=1e308"], "gap must be a finite number > 0 and at most 1e+12"),
    (["run", "single", "--set", "scheduler=wait", "--scheduler", "sarathi"],
     "scheduler given twice"),
    (["run", "single", "--set", "rate=1e-308"], "rate must be a finite number > 0 and at least"),
])
def test_bad_input_is_one_line_and_exit_code_2(argv, fragment):
    assert fragment in cli_error(argv)


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """``llmqueue list | head -1``: once the pipe's reader is gone the command
    stops with 141 (128 + SIGPIPE) and prints nothing more, neither an error
    nor a traceback at the interpreter's exit."""
    proc = subprocess.Popen([sys.executable, "-m", "llmqueue", "list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=os.path.dirname(__file__))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # gone before the command writes (it takes a while to start)
    err = proc.stderr.read()
    assert proc.wait() == 141, err
    assert err == b""


def test_malformed_trace_row_names_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("arrival,prefill,decode\n0.0,100,5\n0.5,abc,3\n")
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "trace", "--set",
                           f"path={path}"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{path}:3:" in proc.stderr


def test_version_prints_the_package_version(capsys):
    import llmqueue
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"llmqueue {llmqueue.__version__}"


def test_run_name_help_lists_every_parameter_with_type_default_and_meaning(capsys):
    from llmqueue import experiments
    assert main(["run", "single", "--help"]) == 0
    out = capsys.readouterr().out.split("parameters (--set KEY=VALUE):")[1]
    for name, param in experiments.get("single").params.items():
        line = next(x for x in out.splitlines() if x.strip().startswith(name + " "))
        assert param.describe() in line and "default" in line
        assert param.help in out
    assert "default 290" in out and "one of lazy, prompt, peak" in out
    assert "options it honours:" in out


def test_run_without_a_name_is_exit_2_listing_the_scenarios(capsys):
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "point-c" in err and "single" in err
