"""Generated command lines: every one ends in exit code 0, or 2 with one line on
stderr, and never with a traceback (issue 9)."""

import contextlib
import io
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmqueue import experiments
from llmqueue.cli.main import main

KEYS = sorted({k for s in experiments.REGISTRY.values() for k in s.params} | {"bogus", ""})
VALUES = ["0", "-1", "1", "2", "3", "2.5", "128", "600", "none", "true", "false", "abc", "",
          "nan", "inf", "-0", "1e309", "0.5", "all", "random", "jsq-tokens", "poisson",
          "exiting", "entering", "fixed", "0.9"]
SCHEDULERS = ["sarathi", "orca", "vllm", "fastertransformer", "step-fill", "whole-prefill",
              "nope", "os:path", "no.such.module:thing", ":", "sarathi,orca"]
HORIZONS = ["0.5", "2", "2", "0", "-3", "nan", "inf", "abc"]
NAMES = list(experiments.REGISTRY) + ["nowhere", ""]



@st.composite
def argvs(draw):
    command = draw(st.sampled_from(["run"] * 6 + ["capacity", "sweep", "plot", "fit", "list",
                                                  "frob"]))
    argv = [command]
    name = draw(st.sampled_from(NAMES)) if command in ("run", "sweep") else "single"
    if command in ("run", "sweep"):
        argv.append(name)
    if command in ("plot", "fit"):
        argv.append(draw(st.sampled_from(["missing.csv", "", "-"])))
    own = sorted(experiments.REGISTRY[name].params) if name in experiments.REGISTRY else []
    own = own or KEYS
    keys = st.one_of(st.sampled_from(own), st.sampled_from(own), st.sampled_from(KEYS))
    for key, value in draw(st.lists(st.tuples(keys, st.sampled_from(VALUES)), max_size=3)):
        argv += ["--set", f"{key}={value}"]
    if command in ("run", "capacity", "sweep") and draw(st.booleans()):
        argv += ["--scheduler", draw(st.sampled_from(SCHEDULERS))]
    if command in ("run", "sweep"):
        # every run is bounded in time: a horizon is always given
        argv += ["--horizon", draw(st.sampled_from(HORIZONS))]
    if command == "sweep":
        argv += ["--grid", draw(st.sampled_from(["vp=1,2", "gap=0.5:1:0.5", "bogus=1",
                                                 "vp=", "gap=1:0:1", "rate=1:2:0"]))]
    extras = ["--json", "--json", "--seed", "--max-pending", "--plot", "--nonsense"]
    for flag in draw(st.lists(st.sampled_from(extras), max_size=2, unique=True)):
        argv.append(flag)
        if flag in ("--seed", "--max-pending"):
            argv.append(draw(st.sampled_from(["-1", "0", "3", "x"])))
        if flag == "--plot":
            argv.append("out.png")
    return argv


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs())
def test_any_command_line_ends_cleanly(argv):
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as stop:  # --help and friends
                    code = stop.code
        finally:
            os.chdir(cwd)
    assert code in (0, 2), (argv, err.getvalue())
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("llmqueue: error: "), (argv, lines)
    assert "Traceback" not in err.getvalue()
