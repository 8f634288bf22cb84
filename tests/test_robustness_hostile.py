"""Issue 30, part C: hostile input that got past the earlier rounds.  Figure
names are checked as the file written; a sweep's lock and ``--resume`` never
destroy a user's file; heavy-tailed size laws and huge traces end promptly;
every refusal is one line on stderr and exit code 2 (from the API a
ValueError)."""

import csv
import importlib.util
import os
import runpy
import subprocess
import sys
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from llmqueue.cli.main import main
from llmqueue.common import files
from llmqueue.models.chunks import mean_chunks
from llmqueue.models.sizes import Empirical, Fixed, Geometric, LogNormal, Mixture, UniformInt
from llmqueue.plotting import save

ROOT = Path(__file__).resolve().parent.parent
TRACE = "arrival,prefill,decode\n0,10,5\n0.5,20,5\n1.0,30,3\n"
SWEEP = ["sweep", "point-c", "--horizon", "1", "--workers", "1"]


def refused(argv, capsys, *fragments):
    """``main(argv)`` is exit code 2 with one stderr line holding ``fragments``
    and nothing on stdout (refused before anything ran); returns the line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(f in lines[0] for f in fragments), lines[0]
    assert out == "", out
    return lines[0]


# ---- item 8: a figure's name is the file written, checked before the run


@pytest.mark.parametrize("argv", [
    ["run", "trace", "--set", "path=req.png", "--plot", "req"],
    ["run", "azure", "--set", "path=req.png", "--set", "cdf=req"],
    ["plan", "--ttft", "1", "--set", "vd=empirical:req.png", "--plot", "req"],
])
def test_a_figure_without_an_ending_may_not_overwrite_an_input(tmp_path, monkeypatch, capsys,
                                                              argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "req.png").write_text(TRACE if argv[0] == "run" else "5\n6\n")
    before = (tmp_path / "req.png").read_bytes()
    refused(argv, capsys, "req.png is the same file as")
    assert (tmp_path / "req.png").read_bytes() == before


def test_plot_out_without_an_ending_may_not_overwrite_its_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.png").write_text("kmax,replicate,seed,horizon,warmup,scenario,label,arrivals\n"
                                    "1,0,0,1,0,trace,sarathi,3\n2,0,0,1,0,trace,sarathi,3\n")
    before = (tmp_path / "s.png").read_bytes()
    refused(["plot", "s.png", "--x", "kmax", "--y", "arrivals", "--out", "s"], capsys,
            "--out: s.png is the same file as csv")
    assert (tmp_path / "s.png").read_bytes() == before


@pytest.mark.parametrize("argv, option", [
    (["run", "trace", "--set", "path=t.csv", "--plot", "out.bmp"], "--plot"),
    (["run", "azure", "--set", "path=t.csv", "--set", "cdf=cdf.txt"], "cdf"),
    (["plan", "--ttft", "1", "--plot", "plan.gifx"], "--plot"),
    (["plot", "s.csv", "--x", "kmax", "--y", "arrivals", "--out", "fig.html"], "--out"),
])
def test_an_image_ending_matplotlib_cannot_write_is_refused_before_the_run(
        tmp_path, monkeypatch, capsys, argv, option):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "s.csv").write_text("kmax,replicate,seed,horizon,warmup,scenario,label,"
                                    "arrivals\n1,0,0,1,0,trace,sarathi,3\n")
    refused(argv, capsys, f"{option}: cannot write", "must end in .png, .svg", ".pdf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv", "t.csv"]


def test_figure_path_is_the_file_matplotlib_writes(tmp_path):
    assert files.figure_path("a/b", "--plot") == "a/b.png"
    assert files.figure_path("b.", "--plot") == "b..png"  # as matplotlib names it
    assert files.figure_path(".png", "--plot") == ".png.png"  # a hidden file's name
    assert files.figure_path("b.SVG", "--plot") == "b.SVG"
    assert files.figure_path("movie", "figure", files.ANIMATION_ENDINGS) == "movie.gif"
    with pytest.raises(ValueError, match=r"--plot: cannot write b\.csv: .*\.png.*got \.csv"):
        files.figure_path("b.csv", "--plot")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    assert save(fig, str(tmp_path / "fig")) == str(tmp_path / "fig.png")
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="must end in"):
        save(fig, str(tmp_path / "fig.bmp"))
    plt.close("all")


# ---- item 9: the sweep's lock and --resume never destroy a user's file


def test_the_lock_never_removes_a_file_it_did_not_create(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "poetry.lock").write_text("[[package]]\nname = 'simpy'\n")
    assert main([*SWEEP, "--grid", "gap=0.5", "--out", "poetry"]) == 0
    assert (tmp_path / "poetry.lock").read_text() == "[[package]]\nname = 'simpy'\n"
    assert main([*SWEEP, "--grid", "gap=0.5,0.6", "--out", "poetry", "--resume"]) == 0
    assert (tmp_path / "poetry.lock").read_text() == "[[package]]\nname = 'simpy'\n"
    # its own lock file, created by the sweep, is gone
    assert main([*SWEEP, "--grid", "gap=0.5", "--out", "s.csv"]) == 0
    assert not (tmp_path / "s.csv.lock").exists()
    capsys.readouterr()


def test_resume_refuses_a_file_of_one_line_without_a_line_break(tmp_path, monkeypatch,
                                                                capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").write_bytes(b"precious data, no line break")
    refused([*SWEEP, "--grid", "gap=0.5", "--out", "notes", "--resume"], capsys,
            "out: notes is not a sweep over gap")
    assert (tmp_path / "notes").read_bytes() == b"precious data, no line break"


@pytest.mark.parametrize("cut", ["gap,schedu", "gap,scheduler,replicate,seed,horizon,warmup,"
                                 "scenario,label,pending_m"])
def test_resume_still_goes_on_after_a_header_cut_short(tmp_path, monkeypatch, capsys, cut):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.csv").write_text(cut)
    assert main([*SWEEP, "--grid", "gap=0.5", "--out", "s.csv", "--resume"]) == 0
    with open(tmp_path / "s.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][:2] == ["gap", "scheduler"] and len(rows) == 1 + 6
    capsys.readouterr()


def test_a_sweep_csv_saved_with_a_byte_order_mark_resumes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*SWEEP, "--grid", "gap=0.5", "--out", "s.csv"]) == 0
    first = (tmp_path / "s.csv").read_bytes()
    (tmp_path / "s.csv").write_bytes(b"\xef\xbb\xbf" + first)  # as an editor saves it
    assert main([*SWEEP, "--grid", "gap=0.5,0.6", "--out", "s.csv", "--resume"]) == 0
    capsys.readouterr()
    with open(tmp_path / "s.csv", newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["gap"] for r in rows] == ["0.5"] * 6 + ["0.6"] * 6
    assert (tmp_path / "s.csv").read_bytes()[3:].startswith(first)  # the first run kept


# ---- item 10: heavy tails and huge traces end promptly


class Counted(LogNormal):
    """A lognormal that counts its survival calls and fails past a bound (the
    old sum took about 10^9 of them: a hang)."""

    calls = 0

    def survival(self, x):
        Counted.calls += 1
        assert Counted.calls < 100_000, "mean_chunks evaluates the tail term by term"
        return super().survival(x)


def test_mean_chunks_of_a_heavy_tail_takes_few_evaluations():
    Counted.calls = 0
    law = Counted(1000, 1000)
    value = mean_chunks(law, 128)
    assert Counted.calls < 10_000
    assert law.mean / 128 * 0.99 < value < law.mean / 128 + 1
    # light tails: the same figure as summed term by term
    light = LogNormal(300, 1.0)
    terms = sum(light.survival(k * 128) for k in range(4000))
    assert mean_chunks(light, 128) == pytest.approx(terms, rel=1e-12)


@pytest.mark.parametrize("law", [UniformInt(10, 301), UniformInt(0, 1000), Fixed(290),
                                 Empirical([0, 1, 5, 128, 129, 400]), Geometric(3.5),
                                 Mixture([(1, Fixed(10)), (2, UniformInt(1, 300))])])
def test_mean_chunks_closed_forms(law):
    draws = law.sample(np.random.default_rng(0), 200_000)
    exact = sum(law.survival(k * 7) for k in range(2000))
    assert mean_chunks(law, 7) == pytest.approx(exact, rel=1e-9)
    assert mean_chunks(law, 7) == pytest.approx(np.mean(np.ceil(draws / 7)), rel=0.02)


def test_mean_chunks_of_laws_up_to_the_largest_size_is_immediate():
    start = time.perf_counter()
    assert mean_chunks(UniformInt(1, 2**40), 128) == pytest.approx(2**40 / 2 / 128, rel=1e-6)
    assert mean_chunks(Geometric(1e12), 128) == pytest.approx(1e12 / 128, rel=1e-6)
    assert time.perf_counter() - start < 1


def test_capacity_and_run_with_a_heavy_tailed_prompt_law_return():
    argv = ["--set", "kv=100000", "--set", "vp=lognormal:1000:1000"]
    for command in (["capacity", *argv], ["run", "single", *argv, "--horizon", "20"]):
        proc = subprocess.run([sys.executable, "-m", "llmqueue", *command], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert "memory binds" in proc.stdout or "unstable" in proc.stdout


def test_a_trace_over_the_request_limit_is_refused_before_its_rows_are_read(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LLMQUEUE_MAX_REQUESTS", "5")
    rows = "".join(f"{i},10,5\n" for i in range(6))
    (tmp_path / "big.csv").write_text("arrival,prefill,decode\nnot,a,row\n" + rows)
    refused(["run", "trace", "--set", f"path={tmp_path / 'big.csv'}"], capsys,
            "the limit is 5 requests per run", "LLMQUEUE_MAX_REQUESTS")
    (tmp_path / "five.csv").write_text("arrival,prefill,decode\n\n" + rows[:-7] + "\n\n")
    assert main(["run", "trace", "--set", f"path={tmp_path / 'five.csv'}"]) == 0
    capsys.readouterr()


# ---- item 14: one line, exit code 2


def test_fit_with_huge_seconds_is_one_line_without_warnings(tmp_path, capsys):
    path = tmp_path / "samples.csv"
    path.write_text("tokens,seconds\n1,0.01\n64,1e300\n128,0.03\n256,0.05\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow warning fails the test
        refused(["fit", str(path)], capsys, "samples.csv:3: seconds must be", "at most 1e+12")


def test_regenerate_refuses_bad_arguments_on_one_line(capsys):
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "scenarios" /
                                                  "regenerate.py")
    regen = importlib.util.module_from_spec(spec)
    sys.modules["regenerate"] = regen  # dataclasses look their module up
    try:
        spec.loader.exec_module(regen)
        for argv, says in ((["--jobs", "0"], "--jobs must be at least 1; got 0"),
                           (["--jobs", "x"], "invalid int value"),
                           (["--only", "nope"], "no producer named nope")):
            with pytest.raises(SystemExit) as stop:
                regen.main(argv)
            assert stop.value.code == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and says in err[0] and "usage" not in err[0], err
    finally:
        del sys.modules["regenerate"]


def test_a_scheduler_module_that_exits_at_import_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "exits_at_import_30c.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "exits_in_plan_30c.py").write_text(
        "import sys\ndef policy(view, budget):\n    sys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    refused(["run", "single", "--scheduler", "exits_at_import_30c:policy"], capsys,
            "cannot be imported: SystemExit: it called sys.exit(0)")
    refused(["capacity", "--scheduler", "exits_at_import_30c:policy"], capsys, "sys.exit(0)")
    assert main(["run", "single", "--scheduler", "exits_in_plan_30c:policy",
                 "--horizon", "5"]) == 2
    assert "raised SystemExit: it called sys.exit(0)" in capsys.readouterr().err


def test_capacity_refuses_wait_without_a_kv_cache_as_run_does(capsys):
    run = refused(["run", "single", "--scheduler", "wait", "--horizon", "5"], capsys,
                  "needs a KV cache")
    assert refused(["capacity", "--scheduler", "wait"], capsys) == run
    assert refused(["capacity", "--set", "scheduler=wait"], capsys) == run
    assert main(["capacity", "--scheduler", "wait", "--set", "kv=100000"]) == 0
    capsys.readouterr()


SCRIPTS = sorted(p for p in (ROOT / "scenarios").glob("*.py") if p.name != "regenerate.py")


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_every_scenario_script_refuses_arguments_before_it_runs(path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(path), "--horizon", "-1"])
    monkeypatch.setenv("LLMQUEUE_MAX_REQUESTS", "1")  # a script that ran would stop soon
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(path), run_name="__main__")
    assert stop.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (f"{path.name}: error: unrecognized arguments: "
                                         "--horizon -1")


def test_a_scenario_script_from_the_shell_is_exit_2_with_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "scenarios" / "point_c.py"), "--horizon",
                           "-1"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "point_c.py: error: unrecognized arguments: --horizon -1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "scenarios" / "point_c.py"), "-h"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert proc.returncode == 0 and "Operating point C" in proc.stdout


def test_a_scenario_script_into_a_closed_pipe_ends_quietly():
    # ``python scenarios/point_c.py | head -1``: the reader goes away after one line;
    # the script stops with 141 (128 + SIGPIPE) and says nothing, as ``llmqueue`` does
    # (it printed "error: [Errno 32] Broken pipe")
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    proc = subprocess.run([sys.executable, str(ROOT / "scenarios" / "point_c.py")],
                          stdout=reader.stdin, stderr=subprocess.PIPE, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    reader.stdin.close()
    reader.wait(timeout=60)
    assert proc.returncode == 141 and proc.stderr == ""
