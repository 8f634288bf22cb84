"""Odd numbers and files found by review: each is a one-line error, never a
traceback or a hang."""

import subprocess
import sys

import pytest

import llmqueue as q
from llmqueue.models.latency import StepModel
from llmqueue.theory.capacity import peak_token_rate


@pytest.mark.parametrize("argv, fragment", [
    (["--set", "vp=99999999999999999999999"], "vp must be a whole number of tokens"),
    (["--horizon", "1e308"], "requests per run"),
    (["--set", "rate=1e-300"], "rate must be a finite number > 0 and at least 1e-12"),
    (["--set", "c=1e308", "--set", "a=1e308"], "c must be a number from 0 to"),
])
def test_huge_numbers_are_one_line_errors(argv, fragment):
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "single"] + argv,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and fragment in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_huge_budget_runs_and_its_peak_rate_has_the_closed_form():
    # the largest budget allowed is the engine's own "unlimited", 2**62 (issue 30: no more)
    s = q.simulate(q.renewal(1.0, 100, 10), bmax=2**62, kmax=100, horizon=20).summary
    assert s["completed"] > 0
    # the staircase's best batch is its largest: b / t_b tends to b0 / a
    assert peak_token_rate(2**62) == pytest.approx(128 / 0.03547, rel=1e-3)


def test_trace_files_with_a_byte_order_mark_are_read(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival,prefill,decode\n0.5,10,2\n")
    assert list(q.read_csv(str(path)))[0][:3] == (0.5, 10, 2)


def test_no_attention_cost_without_prefill():
    model = StepModel(exponent=0.0)
    assert model.batch_time(10, 0, 10) == pytest.approx(0.005 + 10 * 0.0008)


def test_json_output_is_strict_json_nan_and_infinities_become_null():
    import json
    import math

    import numpy as np

    from llmqueue.cli.report import strict_json
    text = strict_json({"a": math.nan, "b": [math.inf, 1.5, (2, -math.inf)],
                        "c": np.float64(np.nan), "d": np.int64(3), "e": 0.1})

    def refuse(token):
        raise ValueError(token)
    assert json.loads(text, parse_constant=refuse) == {
        "a": None, "b": [None, 1.5, [2, None]], "c": None, "d": 3, "e": 0.1}


def test_a_run_stopped_before_any_request_finishes_fails_its_checks_cleanly(capsys):
    import json

    from llmqueue.cli.main import main
    assert main(["run", "sarathi-demo", "--max-pending", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    checks = {c["name"].split()[0]: c for c in doc["checks"]}
    assert not checks["TTFT"]["passed"] and "undefined" in checks["TTFT"]["detail"]
    assert not checks["every"]["passed"]


def test_ctrl_c_exits_quietly_with_130():
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "llmqueue", "run", "theorem2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)  # well inside a run of several seconds
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip().splitlines() == [
        "llmqueue: interrupted (files already written are kept)"]


def test_cli_warnings_are_one_line():
    import warnings

    from llmqueue.cli.main import _one_line_warning
    text = _one_line_warning(RuntimeWarning("Mean of empty\nslice"), RuntimeWarning, "x.py", 3)
    assert text == "llmqueue: warning: Mean of empty slice (RuntimeWarning)\n"
    assert warnings.formatwarning is not _one_line_warning  # the API's warnings are untouched


@pytest.mark.parametrize("module, target, fragment", [
    ("def bad(view, budget):\n    return None\n", "bad", "returned None; expected a Plan"),
    ("import os\n", "os_getcwd", "cannot be imported"),
    ("def f(:\n", "f", "cannot be imported: SyntaxError"),
    ("raise RuntimeError('boom')\n", "x", "cannot be imported: RuntimeError: boom"),
    ("def f(view, budget):\n    return 1 / 0\n", "f", "raised ZeroDivisionError"),
])
def test_user_scheduler_targets_that_are_not_policies_are_one_line_errors(
        tmp_path, module, target, fragment):
    (tmp_path / "userpol.py").write_text(module)
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "single", "--scheduler",
                           f"userpol:{target}", "--horizon", "5"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_modules_in_the_working_directory_do_not_shadow_dependencies(tmp_path):
    for name in ("matplotlib", "tqdm"):
        (tmp_path / f"{name}.py").write_text("raise ImportError('shadowed')\n")
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run", "single", "--horizon", "5",
                           "--plot", "out.png"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.png").stat().st_size > 0


class _Greedy(q.Sarathi):
    """A subclass of a built-in policy that breaks the rules."""

    def plan(self, view, budget):
        plan = super().plan(view, budget)
        return q.Plan(list(plan.decode) + list(plan.decode[:1]), plan.prefill)  # one twice


class _Fractional(q.Sarathi):
    def plan(self, view, budget):
        return q.Plan([], [(r, 0.5) for r in view.prefilling[:1]])


@pytest.mark.parametrize("policy, fragment", [
    (_Greedy(), "appears twice"), (_Fractional(), "prefill tokens"),
])
def test_subclasses_of_builtin_policies_have_their_plans_checked(policy, fragment):
    with pytest.raises(ValueError, match=fragment):
        q.simulate(q.renewal(0.5, 20, 5), policy, bmax=64, kmax=10, horizon=10)


@pytest.mark.parametrize("argv", [
    ["single", "--set", "rate=1e308"], ["single", "--set", "gap=1e-300"],
    ["single", "--set", "arrival=poisson", "--set", "rate=1e12"],
    ["parallel", "--set", "load=1e20"], ["theorem2", "--set", "loads=1e23"],
    ["single", "--horizon", "1", "--set", "initial=20000000"],
])
def test_runs_asking_for_more_requests_than_the_limit_are_refused_at_once(argv):
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "run"] + argv,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "LLMQUEUE_MAX_REQUESTS" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_the_request_limit_counts_rate_times_horizon_and_can_be_raised(monkeypatch):
    from llmqueue.common import limits
    limits.check_requests(1000.0, 10_000.0)  # 10^7: at the limit
    with pytest.raises(ValueError, match="10,000,000 requests per run"):
        limits.check_requests(1000.0, 10_001.0)
    with pytest.raises(ValueError, match="limit"):
        limits.check_requests(None, None, count=10**7 + 1)
    limits.check_requests(1000.0, 9_000.0, initial=10**6)  # 9 10^6 + 10^6: at the limit
    with pytest.raises(ValueError, match="initial"):
        limits.check_requests(1000.0, 9_000.0, initial=10**6 + 1)
    monkeypatch.setenv("LLMQUEUE_MAX_REQUESTS", "100")
    with pytest.raises(ValueError, match="the limit is 100 "):
        q.simulate(q.renewal(0.01, 10, 2), horizon=1.5)
    with pytest.raises(ValueError, match="the limit is 100 "):  # 1 + 100 at time 0
        q.simulate(q.compose(q.Renewal(1.0), 10, 2, initial=100), horizon=1.0)
    monkeypatch.setenv("LLMQUEUE_MAX_REQUESTS", "lots")
    with pytest.raises(ValueError, match="LLMQUEUE_MAX_REQUESTS must be an integer"):
        limits.check_requests(1.0, 1.0)


def test_a_sweep_grid_larger_than_the_run_limit_is_refused():
    from llmqueue.sweeps.grid import expand
    with pytest.raises(ValueError, match="the limit is 100,000"):
        expand({"a": list(range(1000)), "b": list(range(1000))})


def test_laws_and_staircases_at_extreme_numbers_are_clear_errors():
    import numpy as np
    with pytest.raises(ValueError, match="cv must be a number from"):
        q.Gamma(1, 1e-300)
    with pytest.raises(ValueError, match="lognormal sizes need mean"):
        q.LogNormal(1e300, 10)
    big = q.LogNormal(2**40, 1000).sample(np.random.default_rng(0), 10_000)
    assert big.min() >= 0 and big.max() <= 2**40  # draws never wrap to negative
    with pytest.raises(ValueError, match="c must be a number from 0 to"):
        q.Staircase(1e308, 1e308)
    proc = subprocess.run([sys.executable, "-m", "llmqueue", "capacity", "--set", "c=1e308",
                           "--set", "a=1e308"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_die_with_a_killed_sweep(tmp_path):
    """A sweep killed with SIGKILL leaves no worker behind (they ask the kernel
    for a signal when their parent dies)."""
    import os
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "llmqueue", "sweep", "theorem2", "--grid",
                             "loads=0.9,1.1", "--seeds", "8", "--workers", "2", "--out",
                             str(tmp_path / "s.csv")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def children():
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)],
                             capture_output=True, text=True).stdout.split()
        return [int(p) for p in out]
    deadline = time.time() + 30
    while len(children()) < 2 and time.time() < deadline:
        time.sleep(0.2)
    workers = children()
    assert len(workers) >= 2, "the pool did not start"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.time() + 15
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [p for p in workers if os.path.exists(f"/proc/{p}")
                 and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    assert not alive, f"orphaned workers: {alive}"


def test_a_plain_list_of_rows_is_a_workload_checked_like_from_list():
    """simulate and Network.feed take (time, prefill, decode) rows as they are
    (list.count used to be read as the workload's count: a TypeError)."""
    from llmqueue.network.network import Network
    rows = [(0.0, 100, 10), (0.5, 10, 5)]
    assert q.simulate(rows).summary["completed"] == 2
    assert q.simulate(tuple(rows)).summary == q.simulate(q.from_list(rows)).summary
    net = Network()
    net.add_engine("a", "sarathi")
    net.feed("a", rows)
    assert net.run(horizon=10).total.summary["completed"] == 2
    with pytest.raises(ValueError, match="request 0 prefill must be an integer >= 0"):
        q.simulate([(0.0, -1, 10)])


def test_networks_refuse_what_cannot_run():
    from llmqueue.network.network import Network
    from llmqueue.network.workflows import start_jobs
    with pytest.raises(ValueError, match="at least one engine"):
        Network().run(horizon=1)
    net = Network()
    net.add_engine("a", "sarathi")
    with pytest.raises(ValueError, match="names an engine twice"):
        net.add_pool("p", ["a", "a"])

    def job(ctx):
        yield ctx.call("a", 10, 5)

    start_jobs(net, job, rate=1e9)  # 10^12 jobs in 1000 s: refused before the run starts
    with pytest.raises(ValueError, match="LLMQUEUE_MAX_REQUESTS"):
        net.run(horizon=1000)
