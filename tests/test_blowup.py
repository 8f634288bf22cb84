"""The queue blow-up demo: its workload, its outcome, its explanation, its GIF."""

import numpy as np
import pytest
from PIL import Image

from llmqueue.engine.options import RunOptions
from llmqueue.experiments import blowup
from llmqueue.plotting import animate_pending, save
from llmqueue.theory import capacity as theory


def test_the_geometric_workload_has_the_stated_means_and_rate():
    arrivals = [a for _, a in zip(range(40000), blowup.geometric_workload(13.0, 129, 112, 4))]
    t = np.array([a.time for a in arrivals])
    prefill = np.array([a.prefill for a in arrivals])
    decode = np.array([a.decode for a in arrivals])
    assert prefill.min() >= 1 and decode.min() >= 1
    # geometric on 1, 2, ... with mean m has sd sqrt(m (m - 1)); 4 standard errors
    for sample, mean in ((prefill, 129), (decode, 112)):
        assert abs(sample.mean() - mean) < 4 * np.sqrt(mean * (mean - 1) / len(sample))
    assert abs(len(t) / t[-1] - 13.0) < 4 * 13.0 / np.sqrt(len(t))
    again = [a for _, a in zip(range(100), blowup.geometric_workload(13.0, 129, 112, 4))]
    assert again == arrivals[:100]


@pytest.fixture(scope="module")
def rows():
    params = blowup.EXPERIMENT.resolve({})
    return params, blowup.run(params, RunOptions(horizon=blowup.HORIZON, seed=1, timeseries=True))


def test_the_load_is_below_capacity(rows):
    params, _ = rows
    assert blowup.rate_of(params) == pytest.approx(0.95 * 3342.9 / 241, rel=1e-4)


def test_work_conserving_schedulers_hold_and_the_others_blow_up(rows):
    _, runs = rows
    s = {name: r.summary for name, r in runs}
    for name in ("sarathi", "orca"):
        assert s[name]["verdict"] == s[name]["predicted"] == "stable", name
        assert s[name]["non_work_conserving_batches"] == 0, name
    for name in ("vllm", "fastertransformer"):
        assert s[name]["verdict"] == "unstable", name
        assert s[name]["predicted"] == "no guarantee", name
        assert s[name]["non_work_conserving_batches"] > 0.5 * s[name]["batches"], name
        assert s[name]["pending_final"] > 5 * s["orca"]["pending_final"], name


def test_the_explanation_names_capacity_and_every_scheduler(rows):
    params, runs = rows
    text = "\n".join(blowup.explain(runs, params))
    assert f"{theory.token_capacity(512):.0f} tokens/s" in text
    for name in blowup.SCHEDULERS:
        assert f"- {name}:" in text
    assert "95% of the token capacity" in text


def test_the_animation_is_a_gif_of_the_asked_frames(rows, tmp_path):
    _, runs = rows
    path = tmp_path / "out" / "blowup.gif"
    save(animate_pending(runs, "test", note="load", seconds=1.0, fps=4), str(path), dpi=40)
    with Image.open(path) as im:
        assert im.format == "GIF" and im.n_frames == 4
