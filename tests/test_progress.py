"""Progress bars: on a terminal only, never changing a figure."""

import json

import llmqueue as q
from llmqueue.cli.main import main
from llmqueue.common import progress


def test_a_shown_run_draws_a_bar_and_keeps_its_numbers(capsys):
    wl = q.poisson(2.0, 50, 20, seed=3)
    plain = q.simulate(wl, horizon=200).summary
    with progress.runs_shown(True):
        shown = q.simulate(wl, horizon=200).summary
        counted = q.simulate(q.renewal(0.5, 20, 5, count=30))
    err = capsys.readouterr().err
    assert "sarathi" in err and "200" in err  # the bar: its label and the horizon
    assert dict(shown) == dict(plain)
    assert counted.summary["completed"] == 30


def test_no_bar_outside_a_terminal_or_under_json(capsys):
    assert not progress.runs_are_shown()
    assert main(["run", "single", "--horizon", "50", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert err == ""
