"""Hostile files, as the command line meets them (issue #18 item 4): every one
ends promptly with exit code 2 and one line on stderr naming the file, never a
traceback or a hang; files named as inputs survive; concurrent sweeps on one
``--out`` are refused; ``--resume`` runs again what a cut or edited file lost."""

import csv
import ctypes
import fcntl
import json
import os
import stat
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = "arrival,prefill,decode\n0,10,5\n0.5,20,5\n1.0,30,3\n"
SAMPLES = "tokens,seconds\n1,0.01\n64,0.02\n128,0.03\n256,0.05\n"
#: point-c draws no random numbers: three runs of six rows (one per scheduler).
POINT_C = ["sweep", "point-c", "--grid", "gap=0.5,0.6,0.7", "--horizon", "5", "--workers", "1"]


def cli(cwd, *argv, timeout=60, preexec_fn=None):
    """``python -m llmqueue ARGV`` in ``cwd``, running this checkout's code."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "llmqueue", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec_fn)


def fails(cwd, *argv, names, says="", **kw):
    """Run; assert exit 2, one stderr line naming ``names`` (and ``says``), no traceback."""
    start = time.monotonic()
    proc = cli(cwd, *argv, **kw)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert names in lines[0] and says in lines[0], lines[0]
    assert time.monotonic() - start < 30
    return lines[0]


@pytest.fixture
def trace(tmp_path):
    (tmp_path / "t.csv").write_text(TRACE)
    return tmp_path


# ---- an output naming an input is refused before anything is written


@pytest.mark.parametrize("argv, named", [
    (["sweep", "trace", "--set", "path=t.csv", "--out", "t.csv"], "out"),
    (["sweep", "trace", "--grid", "path=u.csv,t.csv", "--out", "./t.csv"], "out"),
    (["run", "trace", "--set", "path=t.csv", "--requests", "t.csv"], "--requests"),
    (["run", "trace", "--set", "path=t.csv", "--batches", "hard.csv"], "--batches"),
    (["run", "trace", "--set", "path=sym.csv", "--timeseries", "t.csv"], "--timeseries"),
    (["run", "trace", "--set", "path=t.png", "--plot", "t"], "--plot"),  # t: t.png
    (["run", "azure", "--set", "path=t.png", "--set", "limit=2", "--set", "cdf=t"], "cdf"),
    (["plan", "--set", "vd=empirical:e.txt", "--ttft", "1", "--csv", "e.txt"], "--csv"),
])
def test_an_output_naming_an_input_is_refused_and_the_input_survives(trace, argv, named):
    (trace / "u.csv").write_text(TRACE)
    (trace / "e.txt").write_text("5\n6\n")
    (trace / "t.png").write_text(TRACE)  # a trace with an image's name
    os.link(trace / "t.csv", trace / "hard.csv")  # the same file under two names
    os.symlink("t.csv", trace / "sym.csv")
    before = {p.name: p.read_bytes() for p in trace.iterdir()}
    fails(trace, *argv, names=named, says="is the same file as")
    assert {p.name: p.read_bytes() for p in trace.iterdir()} == before  # nothing written


def test_plot_refuses_to_draw_over_its_csv_and_run_over_its_own_outputs(trace):
    assert cli(trace, "sweep", "trace", "--set", "path=t.csv", "--out", "s.csv").returncode == 0
    kept = (trace / "s.csv").read_bytes()
    os.symlink("s.csv", trace / "s.png")  # --out s is s.png, which is the CSV
    fails(trace, "plot", "s.csv", "--x", "kmax", "--y", "arrivals", "--out", "s",
          names="s.png", says="is the same file as csv")
    assert (trace / "s.csv").read_bytes() == kept
    fails(trace, "run", "trace", "--set", "path=t.csv", "--requests", "a.csv", "--batches",
          "a.csv", names="--requests: a.csv", says="is the same file as --batches")
    assert not (trace / "a.csv").exists()


# ---- concurrent sweeps on one --out


def hold_lock(path):
    """Lock ``path`` as a running sweep does (its lock file holds the mark that
    says it is a sweep's); returns the open descriptor."""
    from llmqueue.common.files import LOCK_MARK
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.write(fd, LOCK_MARK)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_second_sweep_on_a_locked_out_fails_at_once_and_leaves_it_alone(trace):
    (trace / "s.csv").write_text("")
    fd = hold_lock(trace / "s.csv.lock")
    try:
        for extra in ([], ["--resume"]):
            fails(trace, "sweep", "trace", "--set", "path=t.csv", "--out", "s.csv", *extra,
                  names="s.csv", says="in use by another sweep (it holds the lock s.csv.lock)")
        assert (trace / "s.csv").read_text() == ""
    finally:
        os.close(fd)
    # released (as by a sweep killed with -9): the stale lock file is no obstacle
    assert cli(trace, "sweep", "trace", "--set", "path=t.csv", "--out", "s.csv").returncode == 0
    assert not (trace / "s.csv.lock").exists()
    assert len((trace / "s.csv").read_text().splitlines()) == 2


def test_two_sweeps_racing_for_one_file_leave_one_clean_sweep(tmp_path):
    argv = ["sweep", "single", "--grid", "rate=1:8:1", "--seeds", "10", "--horizon", "200",
            "--workers", "1", "--out", "s.csv"]
    env = {**os.environ, "PYTHONPATH": ROOT}
    first = subprocess.Popen([sys.executable, "-m", "llmqueue", *argv], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "s.csv.lock").exists() and first.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert first.poll() is None, "the first sweep ended before the second started"
        fails(tmp_path, *argv, names="s.csv", says="in use by another sweep")
        assert first.wait(timeout=120) == 0, first.stderr.read()
    finally:
        first.kill()
        first.wait()
    with open(tmp_path / "s.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert len(rows) == 1 + 8 * 10 and len({len(r) for r in rows}) == 1
    assert not (tmp_path / "s.csv.lock").exists()


# ---- --resume keeps only whole runs


def figures(rows):
    """Rows without their wall time, keyed by run and label, for comparison."""
    return sorted(tuple((k, v) for k, v in r.items() if k != "wall_time") for r in rows)


@pytest.fixture(scope="module")
def point_c(tmp_path_factory):
    """A whole sweep of POINT_C: its file's lines and its rows."""
    where = tmp_path_factory.mktemp("whole")
    proc = cli(where, *POINT_C, "--out", "s.csv", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = (where / "s.csv").read_text().splitlines(keepends=True)
    assert len(lines) == 1 + 18
    return lines, json.loads(proc.stdout)["rows"]


def cut_mid_line(lines):      # a hard kill inside the third run's fourth row
    return "".join(lines[:16]) + lines[16][:40]


def cut_at_line_break(lines):  # 15 rows: the third run has three of its six
    return "".join(lines[:16])


def extra_fields(lines):       # an edited row in the first run
    return "".join(lines[:4]) + lines[4].rstrip("\n") + ",x,y\n" + "".join(lines[5:])


def short_row(lines):          # a row of the second run cut, then a line break
    return "".join(lines[:9]) + lines[9][:60] + "\n" + "".join(lines[10:])


@pytest.mark.parametrize("damage", [cut_mid_line, cut_at_line_break, extra_fields, short_row])
def test_resume_runs_again_what_a_damaged_file_lost(tmp_path, point_c, damage):
    lines, whole = point_c
    (tmp_path / "s.csv").write_text(damage(lines))
    proc = cli(tmp_path, *POINT_C, "--out", "s.csv", "--resume", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert figures(rows) == figures(whole)  # 18 rows: every (gap, label) once
    with open(tmp_path / "s.csv", newline="") as handle:
        on_disk = list(csv.DictReader(handle))
    assert len(on_disk) == 18 and all(None not in r and None not in r.values() for r in on_disk)
    assert sorted((r["gap"], r["label"]) for r in on_disk) == \
        sorted((str(r["gap"]), r["label"]) for r in whole)


def test_resume_keeps_whole_runs_without_running_them_again(tmp_path, point_c):
    lines, _ = point_c
    (tmp_path / "s.csv").write_text("".join(lines[:13]))  # two whole runs
    proc = cli(tmp_path, *POINT_C, "--out", "s.csv", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "s.csv").read_text().startswith("".join(lines[:13]))


# ---- plot and resume on malformed rows


def test_plot_names_the_line_of_a_row_with_extra_fields_and_skips_a_cut_last_line(
        tmp_path, point_c):
    lines, _ = point_c
    (tmp_path / "s.csv").write_text(extra_fields(lines))
    width = len(lines[0].rstrip("\n").split(","))  # the header's fields; the row adds two
    fails(tmp_path, "plot", "s.csv", "--x", "gap", "--y", "arrivals", names="s.csv:5:",
          says=f"{width + 2} fields where the header has {width}")
    (tmp_path / "s.csv").write_text(cut_mid_line(lines))  # a sweep still writing it
    proc = cli(tmp_path, "plot", "s.csv", "--x", "gap", "--y", "arrivals")
    assert proc.returncode == 0 and (tmp_path / "s-arrivals.png").exists(), proc.stderr


# ---- what a reader cannot parse names the file and the line


def readers(name):
    """Each reader of the CLI reading ``name``."""
    return [["run", "trace", "--set", f"path={name}"], ["fit", name],
            ["plot", name, "--x", "gap", "--y", "arrivals"],
            POINT_C + ["--out", name, "--resume"]]


@pytest.mark.parametrize("which", range(4))
def test_a_field_over_the_csv_limit_names_the_file_and_line(tmp_path, which):
    header = ["arrival,prefill,decode", "tokens,seconds", "gap,replicate,label",
              "gap,replicate,label"][which]
    (tmp_path / "big.csv").write_text(f"{header}\n1,2,{'7' * 140_000}\n")
    fails(tmp_path, *readers("big.csv")[which], names="big.csv:2:",
          says="a field is longer than 131072 characters")


@pytest.mark.parametrize("which", range(4))
def test_latin_1_text_names_the_file_the_line_and_the_byte(tmp_path, which):
    (tmp_path / "l1.csv").write_bytes(b"arrival,prefill,decode\n0,10,5\n0.5,20,5 # caf\xe9\n")
    fails(tmp_path, *readers("l1.csv")[which], names="l1.csv",
          says="not UTF-8 text (byte 0xe9 at line 3)")


@pytest.mark.parametrize("special, which", [("fifo", 0), ("fifo", 1), ("fifo", 2), ("fifo", 3),
                                            ("/dev/zero", 0), ("/dev/zero", 3), ("/dev/full", 1),
                                            ("/dev/full", 3), ("folder", 2), ("folder", 3)])
def test_a_file_that_is_not_regular_is_refused_at_once(tmp_path, which, special):
    os.mkfifo(tmp_path / "fifo")  # no writer: reading it would wait for ever
    (tmp_path / "folder").mkdir()
    what = "a FIFO" if special == "fifo" else "a directory" if special == "folder" \
        else "a character device"
    fails(tmp_path, *readers(special)[which], names=special, says=f"it is {what}", timeout=20)


# ---- files that cannot be read or written


def without_root_powers():
    """As root, drop the powers that ignore file permissions (in the child);
    the test is skipped where that is not allowed."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop():
        for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl")
    try:
        subprocess.run(["true"], preexec_fn=drop, check=True)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot drop root's file powers here")
    return drop


@pytest.mark.parametrize("which", [0, 3])
def test_an_unreadable_file_is_named(tmp_path, which):
    drop = without_root_powers()
    (tmp_path / "locked.csv").write_text(TRACE)
    os.chmod(tmp_path / "locked.csv", 0)
    fails(tmp_path, *readers("locked.csv")[which], names="locked.csv",
          says="Permission denied", preexec_fn=drop)


def test_an_unwritable_output_is_named(trace):
    drop = without_root_powers()
    (trace / "ro.csv").write_text("keep\n")
    os.chmod(trace / "ro.csv", stat.S_IRUSR)
    fails(trace, "run", "trace", "--set", "path=t.csv", "--requests", "ro.csv",
          names="--requests: cannot write ro.csv", says="Permission denied", preexec_fn=drop)


@pytest.mark.parametrize("argv, names, says", [
    (["--requests", "/dev/full"], "--requests: cannot write /dev/full",
     "No space left on device"),
    (["--requests", "fifo"], "--requests: cannot write fifo", "it is a FIFO"),
    (["--batches", "folder"], "--batches: cannot write folder", "it is a directory"),
])
def test_outputs_that_cannot_take_the_file_are_one_line_errors(trace, argv, names, says):
    os.mkfifo(trace / "fifo")  # nobody reads it: writing would wait for ever
    (trace / "folder").mkdir()
    fails(trace, "run", "trace", "--set", "path=t.csv", *argv, names=names, says=says,
          timeout=20)


@pytest.mark.parametrize("out", ["/dev/full", "fifo"])
def test_a_sweep_writes_only_to_a_regular_file(trace, out):
    os.mkfifo(trace / "fifo")
    fails(trace, "sweep", "trace", "--set", "path=t.csv", "--out", out, names=f"out: "
          f"cannot write {out}", says="give a regular file", timeout=20)


def test_a_file_name_with_a_line_break_stays_on_one_line(tmp_path):
    fails(tmp_path, "run", "trace", "--set", "path=a\nb.csv", names="'a\\nb.csv'",
          says="No such file")


def test_the_readers_take_regular_files_as_before(tmp_path):
    (tmp_path / "s.csv").write_text(SAMPLES)
    assert cli(tmp_path, "fit", "s.csv").returncode == 0


def test_every_api_reader_refuses_a_fifo_at_once(tmp_path):
    import llmqueue as q
    from llmqueue.hardware.specs import ModelShape
    from llmqueue.sweeps.runner import read_rows
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    for reader in (q.read_trace, q.read_csv, q.read_samples, read_rows,
                   ModelShape.from_hf_config):
        with pytest.raises(ValueError, match="it is a FIFO"):
            reader(fifo)


def test_a_sweep_from_the_api_takes_the_lock_too(tmp_path):
    from llmqueue.experiments import get
    from llmqueue.sweeps.runner import sweep
    out = tmp_path / "s.csv"
    fd = hold_lock(str(out) + ".lock")
    try:
        with pytest.raises(ValueError, match="in use by another sweep"):
            sweep(get("point-c"), {"gap": [0.5]}, horizon=1.0, out=str(out))
    finally:
        os.close(fd)
    assert not out.exists()


def test_an_empirical_size_file_that_is_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "sizes"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "single", "--set",
                           f"vd=empirical:{fifo}", "--horizon", "5"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
