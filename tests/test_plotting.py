"""llmqueue.plotting: every figure function draws into given axes or a figure of
its own, returns the figure, labels its axes with units, and writes nothing;
``import llmqueue`` loads no matplotlib."""

import dataclasses
import os
import re
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

import llmqueue
from llmqueue.engine.simulate import Result
from llmqueue.experiments import get
from llmqueue.plotting import (animate_pending, plot_against_load, plot_agents, plot_backlogs,
                               plot_chunk_sweep, plot_heat, plot_latency_cdfs, plot_lines,
                               plot_pending, plot_pending_zoom, plot_region, plot_theorem2, save)
from llmqueue.sweeps.runner import sweep

UNIT = re.compile(r"\(.+\)")


@pytest.fixture(scope="module")
def runs():
    """Two short single-engine runs with their time series."""
    out = []
    for name in ("sarathi", "vllm"):
        result = llmqueue.simulate(llmqueue.renewal(0.5, 100, 20), name, horizon=20.0,
                                   timeseries=True)
        out.append((name, result))
    return out


@pytest.fixture(scope="module")
def sweep_rows():
    """A small sweep: two rates, two budgets, two seeds."""
    return sweep(get("single"), {"rate": [1.0, 2.0], "bmax": [128, 256]}, 2,
                 fixed={"arrival": "poisson", "vp": 100, "vd": 20}, horizon=10.0,
                 progress=False)


def theorem2_rows(runs):
    """The runs with the summary figures of the theorem2 experiment."""
    return {name: dataclasses.replace(result, summary={
        **result.summary, "rate": 2.0, "fluid_slope": 10.0 * i, "load": 0.9 + 0.2 * i,
        "slope": 5.0 * i, "slope_se": 1.0, "seeds": 2}) for i, (name, result) in enumerate(runs)}


def region_rows():
    """Verdicts at two rates for two (scheduler, bmax) panels."""
    rows = []
    for scheduler, bmax in (("sarathi", 128), ("step-fill", 1024)):
        for lp, ld, verdict in ((200, 100, "stable"), (3200, 2100, "unstable")):
            rows.append((f"{scheduler}-{bmax}", Result({
                "scheduler": scheduler, "bmax": bmax, "lambda_p": lp, "lambda_d": ld,
                "verdict": verdict})))
    return rows


#: name -> (panels, draw(runs, sweep_rows, axes or None) -> figure or animation)
CASES = {
    "plot_pending": (1, lambda r, s, a: plot_pending(r, "pending", kmax=10, ax=a)),
    "plot_pending_zoom": (2, lambda r, s, a: plot_pending_zoom(r, "zoom", 5, axes=a)),
    "plot_latency_cdfs": (2, lambda r, s, a: plot_latency_cdfs(r, "cdfs", axes=a)),
    "plot_backlogs": (2, lambda r, s, a: plot_backlogs(
        [("one", {"a": r[0][1], "total": r[1][1]}), ("two", dict(r))], "backlogs", axes=a)),
    "plot_agents": (2, lambda r, s, a: plot_agents(
        {"planner": (0.2, 0.25, 0.9), "worker": (0.7, 0.75, 1.0)}, [1.0, 2.0, 3.0, 5.0],
        "agents", axes=a)),
    "plot_against_load": (2, lambda r, s, a: plot_against_load(
        [0.3, 0.6, 0.9], {"colocated": {"TTFT p99": [1.0, 2.0, 30.0], "TPOT p99": [0.1] * 3},
                          "split": {"TTFT p99": [1.5, 2.5, 3.0], "TPOT p99": [0.05] * 3}},
        {"split": 0.82}, "against load", axes=a)),
    "plot_region": (2, lambda r, s, a: plot_region(region_rows(), 100, axes=a)),
    "plot_theorem2": (2, lambda r, s, a: plot_theorem2(
        theorem2_rows(r), ["sarathi", "vllm"], 3343.0, 16.7, "theorem 2", axes=a)),
    "plot_chunk_sweep": (2, lambda r, s, a: plot_chunk_sweep(
        {"ttft": [[2.0, 2.2], [1.8, 1.9]], "tpot": [[0.02, 0.021], [0.019, 0.02]],
         "whole_ttft": [1.9, 2.0], "whole_tpot": [0.02, 0.02]}, [256, 512], "chunks", axes=a)),
    "plot_lines": (1, lambda r, s, a: plot_lines(s, "rate", "ttft_p99", hue="bmax", ax=a)),
    "plot_heat": (1, lambda r, s, a: plot_heat(s, "rate", "bmax", "pending_mean", ax=a)),
}


def check_labels(axes):
    """Every panel has a title and a y label with a unit; some panel an x label
    with one, and no panel an x label without."""
    for ax in axes:
        assert ax.get_title(), "a panel without a title"
        assert UNIT.search(ax.get_ylabel()) or not ax.get_ylabel() and ax is not axes[0], \
            ax.get_ylabel()
        assert UNIT.search(ax.get_xlabel()) or not ax.get_xlabel(), ax.get_xlabel()
    assert any(UNIT.search(ax.get_xlabel()) for ax in axes)
    assert UNIT.search(axes[0].get_ylabel()), axes[0].get_ylabel()


@pytest.mark.parametrize("name", sorted(CASES))
def test_draws_into_given_axes_and_returns_their_figure(name, runs, sweep_rows, tmp_path):
    panels, draw = CASES[name]
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 3), squeeze=False)
    axes = list(axes[0])
    given = axes[0] if panels == 1 else axes
    before = len(plt.get_fignums())
    out = draw(runs, sweep_rows, given)
    assert out is fig and len(plt.get_fignums()) == before  # no new figure
    assert all(ax.has_data() for ax in axes)
    check_labels(axes)
    assert not list(tmp_path.iterdir())  # drawing writes nothing
    plt.close(fig)


@pytest.mark.parametrize("name", sorted(CASES))
def test_makes_its_own_figure_and_save_writes_it(name, runs, sweep_rows, tmp_path):
    panels, draw = CASES[name]
    fig = draw(runs, sweep_rows, None)
    assert isinstance(fig, plt.Figure)
    shown = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(shown) == panels
    check_labels(shown)
    assert fig.texts or fig._suptitle or panels == 1  # several panels share a title
    path = tmp_path / "sub" / f"{name}.png"
    assert save(fig, str(path)) == str(path)
    assert path.stat().st_size > 5_000
    assert fig.number not in plt.get_fignums()  # save closes the figure


def test_kmax_lies_under_the_data(runs):
    fig = plot_pending(runs, "pending", kmax=10)
    ax = fig.axes[0]
    kmax = [line for line in ax.lines if line.get_label().startswith("kmax")][0]
    data = [line for line in ax.lines if line is not kmax]
    assert all(kmax.get_zorder() < line.get_zorder() for line in data)
    assert ax.get_ylim()[0] == 0
    plt.close(fig)


def test_confidence_bands_stop_at_zero(sweep_rows):
    fig = plot_lines(sweep_rows, "rate", "ttft_p99", hue="bmax")
    for band in fig.axes[0].collections:
        assert np.min(band.get_paths()[0].vertices[:, 1]) >= 0
    plt.close(fig)


def test_sweep_labels_are_words_with_units(sweep_rows):
    fig = plot_lines(sweep_rows, "rate", "ttft_p99")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "TTFT p99 (s)" and ax.get_xlabel() == "arrival rate (requests/s)"
    plt.close(fig)
    # one line: its legend entry is the figure in words too, never the raw column name
    one = [r for r in sweep_rows if r["bmax"] == sweep_rows[0]["bmax"]]
    fig = plot_lines(one, "rate", "ttft_p99")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["TTFT p99 (s)"]
    plt.close(fig)


def test_wrong_number_of_axes_is_refused(runs):
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="axes must hold 2 axes"):
        plot_latency_cdfs(runs, "cdfs", axes=[ax])
    plt.close(fig)


def test_animation_draws_into_given_axes_and_saves_a_gif(runs, tmp_path):
    fig, ax = plt.subplots()
    anim = animate_pending(runs, "animated", note="note", seconds=1.0, fps=3, ax=ax)
    assert len(ax.lines) == len(runs) and ax.get_title() == "animated"
    assert UNIT.search(ax.get_xlabel()) and UNIT.search(ax.get_ylabel())
    path = tmp_path / "a.gif"
    save(anim, str(path), dpi=30)
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 3
    assert fig.number not in plt.get_fignums()


def python(code, **env):
    """What ``code`` prints in a fresh interpreter that imports this checkout."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": root, **env})
    return out.stdout.strip()


def test_import_llmqueue_loads_no_matplotlib():
    assert python("import sys, llmqueue, llmqueue.experiments, llmqueue.cli.main; "
                  "print(llmqueue.__file__, 'matplotlib' in sys.modules)") == \
        f"{llmqueue.__file__} False"


def test_importing_plotting_keeps_the_chosen_backend():
    assert python("import llmqueue.plotting, matplotlib; print(matplotlib.get_backend())",
                  MPLBACKEND="pdf") == "pdf"
