"""A network run shown on a terminal advances a bar of simulated seconds and
gives exactly the run it gives unshown (its clock only pauses between instants)."""

import contextlib
import io

from llmqueue import experiments
from llmqueue.common import progress
from llmqueue.engine.options import RunOptions


def test_a_shown_network_run_is_the_same_run_with_a_bar():
    e = experiments.REGISTRY["parallel"]
    params = e.resolve({})
    plain = e.execute(params, RunOptions())
    err = io.StringIO()
    with progress.runs_shown(True), contextlib.redirect_stderr(err):
        shown = e.execute(params, RunOptions())
    assert "network" in err.getvalue() and "/600 s" in err.getvalue()
    assert [label for label, _ in shown] == [label for label, _ in plain]
    assert [repr(r.summary) for _, r in shown] == [repr(r.summary) for _, r in plain]
