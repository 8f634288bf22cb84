"""``llmqueue sweep`` and ``llmqueue plot``: files, resume, bad input."""

import csv
import json
import os
import subprocess
import sys

import pytest

from llmqueue.cli.main import main

SWEEP = ["sweep", "single", "--set", "arrival=poisson", "--grid", "rate=1:2:0.5",
         "--scheduler", "sarathi,orca", "--seeds", "2", "--horizon", "20", "--workers", "1"]


def rows_in(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_sweep_writes_tidy_rows_and_prints_a_table(tmp_path, capsys):
    out = str(tmp_path / "s.csv")
    assert main(SWEEP + ["--out", out]) == 0
    table = capsys.readouterr().out
    assert "rate=1.5 scheduler=orca" in table and "tokens/s +- 95%" in table
    rows = rows_in(out)
    assert len(rows) == 3 * 2 * 2
    assert {"rate", "arrival", "scheduler", "seed", "replicate", "arrivals", "pending_mean",
            "ttft_p99", "backlog_slope", "backlog_slope_se", "wall_time"} <= set(rows[0])
    assert {r["rate"] for r in rows} == {"1.0", "1.5", "2.0"}


def test_resume_runs_only_what_is_missing(tmp_path, capsys):
    out = str(tmp_path / "s.csv")
    assert main(SWEEP + ["--out", out]) == 0
    before = rows_in(out)
    grown = [a if a != "rate=1:2:0.5" else "rate=1:2.5:0.5" for a in SWEEP]
    assert main(grown + ["--out", out, "--resume"]) == 0
    after = rows_in(out)
    assert after[:len(before)] == before  # the old rows, untouched
    assert [r["rate"] for r in after[len(before):]] == ["2.5"] * 4


def test_json_has_rows_and_points(capsys):
    assert main(SWEEP + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 12 and len(doc["points"]) == 6
    point = doc["points"][0]
    assert point["n"] == 2 and {"arrivals_mean", "arrivals_ci95",
                                "backlog_slope_mean_se"} <= set(point)


def test_plot_draws_lines_and_a_heat_map(tmp_path, capsys):
    out = str(tmp_path / "s.csv")
    assert main(SWEEP + ["--out", out]) == 0
    # (no request finishes in these 20 s runs: pending, not a latency, has numbers)
    assert main(["plot", out, "--x", "rate", "--y", "backlog_mean", "--hue", "scheduler"]) == 0
    assert os.path.getsize(str(tmp_path / "s-backlog_mean.png")) > 10_000
    heat = str(tmp_path / "heat.png")
    assert main(["plot", out, "--x", "rate,scheduler", "--y", "pending_mean",
                 "--out", heat]) == 0
    assert os.path.getsize(heat) > 10_000
    one = str(tmp_path / "one.png")
    assert main(["plot", out, "--x", "rate", "--y", "pending_mean", "--where",
                 "scheduler=orca", "--out", one]) == 0


@pytest.mark.parametrize("argv, fragment", [
    (["sweep", "single", "--grid", "colour=1,2"], "grid colour: single has no parameter"),
    (["sweep", "single", "--grid", "bmax=64,big"], "grid bmax must be an integer >= 1 or none"),
    (["sweep", "single", "--grid", "rate=3:1:1"], "grid rate: empty range"),
    (["sweep", "single", "--grid", "rate=1:3:0"], "grid rate: STEP must be > 0"),
    (["sweep", "single", "--grid", "rate=1,2", "--grid", "rate=3"], "grid rate: given twice"),
    (["sweep", "single", "--scheduler", "fifo"], "scheduler must be one of"),
    (["sweep", "point-c", "--seeds", "3"], "seeds must be 1 for point-c"),
    (["sweep", "single", "--resume"], "resume needs out"),
    (["sweep", "single", "--workers", "2", "--dask", "local"], "not allowed with argument"),
    (["plot", "/no/such.csv", "--x", "rate", "--y", "arrivals"], "cannot read"),
])
def test_bad_sweeps_are_one_line_and_exit_code_2(argv, fragment, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "llmqueue"] + argv, capture_output=True,
                          text=True, cwd=str(tmp_path),
                          env={**os.environ, "PYTHONPATH": os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__)))})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr


def test_plot_names_a_wrong_figure(tmp_path, capsys):
    out = str(tmp_path / "s.csv")
    assert main(SWEEP + ["--out", out]) == 0
    assert main(["plot", out, "--x", "rate", "--y", "speed"]) == 2
    assert "y must be a figure" in capsys.readouterr().err
    assert main(["plot", out, "--x", "rate,vp", "--y", "arrivals"]) == 2
    assert main(["plot", out, "--x", "rate,arrival", "--y", "arrivals"]) == 2
    assert "scheduler varies" in capsys.readouterr().err
    # a text column, a column no run filled (sweeps keep no token gaps), a header alone
    assert main(["plot", out, "--x", "rate", "--y", "verdict"]) == 2
    assert "--y verdict: no row" in capsys.readouterr().err
    assert main(["plot", out, "--x", "rate", "--y", "tbt_p99"]) == 2
    assert "--y tbt_p99: no row" in capsys.readouterr().err
    header = str(tmp_path / "header.csv")
    with open(out) as full, open(header, "w") as head:
        head.write(full.readline())
    assert main(["plot", header, "--x", "rate", "--y", "arrivals"]) == 2
    assert "holds no run yet" in capsys.readouterr().err


@pytest.mark.parametrize("caches", ["none,20000", "20000,none"])
def test_a_sweep_over_kv_with_and_without_a_cache_writes_one_file(tmp_path, capsys, caches):
    """A run with a KV cache has figures a run without has not (``kv_mean``,
    ``preemptions``, ...): the file gains those columns whichever run comes
    first, empty in the rows without a cache (it was "other columns than this
    sweep", exit 2, after half the rows were written), and resumes as it is."""
    out = str(tmp_path / "kv.csv")
    argv = ["sweep", "single", "--set", "arrival=poisson", "--set", "rate=2",
            "--grid", f"kv={caches}", "--scheduler", "sarathi", "--seeds", "1",
            "--horizon", "20", "--workers", "1", "--out", out]
    assert main(argv) == 0
    rows = rows_in(out)
    assert sorted(r["kv"] for r in rows) == ["", "20000"]
    for r in rows:
        cached = r["kv"] != ""
        assert (r["kv_mean"] != "") == cached and (r["preemptions"] != "") == cached
        assert float(r["throughput_tokens_per_s"]) > 0
    with open(out) as handle:
        lines = handle.read().splitlines()
    assert len({line.count(",") for line in lines}) == 1  # every row has every column
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    assert rows_in(out) == rows  # nothing left to run, nothing rewritten
