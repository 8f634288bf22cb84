"""``scenarios/regenerate.py`` accounts for every committed file of plots/, and
``save`` writes the same bytes for the same drawing (so regenerating plots/
leaves git clean)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.animation import FuncAnimation
from PIL import Image

from llmqueue.plotting import save

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scenarios" / "regenerate.py"


@pytest.fixture(scope="module")
def regen():
    spec = importlib.util.spec_from_file_location("regenerate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["regenerate"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["regenerate"]


def plots_on_disk():
    return sorted(p.name for p in (ROOT / "plots").iterdir() if p.is_file())


def test_list_maps_every_file_of_plots_to_one_producer():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--list"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    owners = {}
    for line in proc.stdout.splitlines():
        name, _seconds, _unit, *outputs = line.split()
        for out in outputs:
            assert out not in owners, f"{out} has two producers"
            owners[out] = name
    assert plots_on_disk() and set(plots_on_disk()) <= set(owners)
    assert set(owners) <= set(plots_on_disk())  # no producer declares a file that is not there


def test_a_file_without_producer_is_flagged(regen, monkeypatch, capsys):
    monkeypatch.setattr(regen, "committed", lambda: ["point_c_pending.png", "stray.png"])
    assert regen.listing() == 1
    assert "no producer: plots/stray.png" in capsys.readouterr().out


def test_each_script_names_the_files_it_is_said_to_write(regen):
    for p in regen.PRODUCERS:
        if p.argv:
            continue
        source = (ROOT / "scenarios" / f"{p.name}.py").read_text()
        if p.name == "kmax_region":  # the experiment draws; the script names the file
            assert "kmax_region.png" in source
            continue
        for out in p.outputs:
            assert f'"{out}"' in source or f'"{os.path.splitext(out)[0]}' in source, \
                (p.name, out)


def test_every_script_that_writes_into_plots_is_a_producer(regen):
    names = {p.name for p in regen.PRODUCERS}
    writers = {path.stem for path in (ROOT / "scenarios").glob("*.py")
               if '"plots"' in path.read_text() and path.name != "regenerate.py"}
    assert writers and writers <= names


def test_the_plan_producer_is_the_guide_command(regen):
    plan = next(p for p in regen.PRODUCERS if p.argv)  # docs/guide/planning.md's
    text = re.sub(r"\\\n\s*", " ", (ROOT / "docs" / "guide" / "planning.md").read_text())
    command = " ".join(["llmqueue", *plan.argv[2:]])
    assert command in re.sub(r" +", " ", text)


def test_an_unknown_name_is_refused(regen):
    with pytest.raises(ValueError, match="no producer named nope; allowed: agents"):
        regen.select(["nope"], quick=False)
    assert [p.name for p in regen.select(["coprime"], quick=True)] == []
    assert all(p.seconds <= regen.QUICK for p in regen.select([], quick=True))


def draw():
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0, 1, 4], label="a")
    ax.set_title("title")
    ax.legend()
    return fig


@pytest.mark.parametrize("ending", ["png", "svg", "pdf"])
def test_save_writes_the_same_bytes_twice(ending, tmp_path):
    first, second = tmp_path / f"a.{ending}", tmp_path / f"b.{ending}"
    save(draw(), str(first))
    save(draw(), str(second))
    assert first.read_bytes() == second.read_bytes()
    text = first.read_bytes()
    assert b"Matplotlib v" not in text and b"matplotlib.org" not in text


def test_a_png_carries_no_software_tag(tmp_path):
    path = tmp_path / "a.png"
    save(draw(), str(path))
    with Image.open(path) as im:
        assert "Software" not in im.info


def grow(line):
    """An animation step: the first i + 1 points of a parabola."""
    return lambda i: line.set_data(range(i + 1), [k * k for k in range(i + 1)])


def test_save_writes_the_same_gif_twice(tmp_path):
    paths = []
    for name in ("a.gif", "b.gif"):
        fig, ax = plt.subplots()
        ax.set_xlim(0, 3)
        ax.set_ylim(0, 9)
        anim = FuncAnimation(fig, grow(ax.plot([], [])[0]), frames=3, interval=200)
        paths.append(tmp_path / name)
        save(anim, str(paths[-1]), dpi=30)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    with Image.open(paths[0]) as im:
        assert im.n_frames == 3
