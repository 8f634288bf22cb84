"""Several configurations in one ``plan`` (``--grid``, llmqueue.planning.compare):
skipped ones with their reason, one table the cheapest that meets the SLO
first, one figure, prices per GPU type, and bad input as one-line errors."""

import json

import matplotlib.pyplot as plt
import pytest

from conftest import cli_error
from llmqueue.cli.main import main
from llmqueue.planning.compare import (Configuration, price_for, rank, ranking, read_prices,
                                       table_columns, table_row)
from llmqueue.planning.engines import EnginesResult
from llmqueue.planning.plan import PlanResult
from llmqueue.plotting import plot_plans
from llmqueue.theory.bounds import Bounds
from llmqueue.theory.cost import Cost

BOUNDS = Bounds(lambda_tok=50.0, lambda_mix=50.0, exact=True)


def config(name, goodput, tp=1, price=None, k=None, rate=None, infeasible=False,
           skipped=None):
    """A configuration as planning would leave it (no simulation)."""
    if skipped is not None:
        return Configuration({"name": name}, "H100", tp, skipped=skipped)
    cost = None if price is None or goodput <= 0 else Cost.of(1, tp, price, goodput, 100, 100)
    r = PlanResult(goodput, goodput, 2 * goodput, None, (), BOUNDS, 0.9, "joint", 1,
                   {"tp": tp}, cost=cost, infeasible=infeasible)
    engines = None
    if rate is not None:
        pool = None if k is None or price is None else Cost.of(k, tp, price, rate, 100, 100)
        engines = EnginesResult(rate, k, 1, (), BOUNDS, "jsq-tokens", 0.9, None, False, {},
                                cost=pool)
    return Configuration({"name": name}, "H100", tp, r, engines, price=price)


def names(configs):
    return [c.settings["name"] for c in configs]


def test_without_prices_the_largest_goodput_per_gpu_first():
    cs = [config("a", 10, tp=2), config("b", 8), config("c", 0), config("d", 30, tp=4),
          config("e", 5, infeasible=True), config("f", 1, skipped="tp must divide")]
    assert ranking(cs, None) == "per_gpu"
    assert names(rank(cs, None)) == ["b", "d", "a", "c", "e"]  # 8, 7.5, 5; then the misses


def test_with_prices_the_cheapest_per_million_output_first():
    cs = [config("a", 10, price=2.0), config("b", 30, tp=2, price=3.5), config("c", 20, price=2.0)]
    assert ranking(cs, None) == "per_million_output"
    # $/h over req/s: 0.2, 0.233, 0.1 for a, b, c
    assert names(rank(cs, None)) == ["c", "a", "b"]


def test_for_a_rate_the_fewest_gpus_or_the_cheapest_pool_first():
    cs = [config("a", 5, tp=2, k=3, rate=12), config("b", 4, k=4, rate=12),
          config("c", 6, tp=1, k=None, rate=12), config("d", 3, tp=2, k=2, rate=12)]
    assert ranking(cs, 12) == "gpus"
    assert names(rank(cs, 12)) == ["b", "d", "a", "c"]  # 4 GPUs (more per GPU first), 4, 6
    priced = [config("a", 5, tp=2, k=3, rate=12, price=2.0),
              config("b", 4, k=5, rate=12, price=3.0), config("c", 6, k=None, rate=12)]
    assert ranking(priced, 12) == "per_hour"
    assert names(rank(priced, 12)) == ["a", "b", "c"]  # $12/h, $15/h, no K_min
    row = table_row(1, priced[0])
    assert row["gpus"] == 6 and row["per_hour"] == 12.0 and row["verdict"] == "meets"
    assert [k for k, _, _ in table_columns(True, True)][-4:] == ["per_hour", "per_m_out",
                                                                  "verdict", "wall"]


def test_prices_per_gpu_type():
    assert read_prices(None) is None and read_prices("2.21") == 2.21
    prices = read_prices("H100-SXM-80GB=2.21, H200=3.5")  # an alias names its record
    assert prices == {"H100": 2.21, "H200": 3.5}
    assert price_for(prices, "H200", ["H100", "H200"]) == 3.5
    assert price_for(2.21, "H100", ["H100", None]) == 2.21
    with pytest.raises(ValueError, match="prices every GPU alike"):
        price_for(2.21, "H100", ["H100", "H200"])
    with pytest.raises(ValueError, match="no price for H200"):
        price_for({"H100": 2.0}, "H200")
    with pytest.raises(ValueError, match="names no gpu"):
        price_for({"H100": 2.0}, None)


def test_the_figure_has_a_bar_per_configuration():
    cs = [config("a", 10, tp=2, price=2.0), config("b", 8, price=2.0), config("c", 0)]
    fig = plot_plans(cs, None, "per_million_output")
    ax = fig.axes[0]
    assert ax.get_title() and "(" in ax.get_xlabel() and "(req/s)" in ax.get_ylabel()
    assert ax.get_legend() is not None and len(ax.patches) == 2  # c meets no SLO: a cross
    plt.close(fig)
    _, mine = plt.subplots()
    assert plot_plans(cs, 12.0, ax=mine) is mine.figure and "GPUs" in mine.get_ylabel()
    plt.close(mine.figure)


ROOFLINE = ["plan", "--set", "latency=roofline", "--set", "kv=auto", "--set", "bmax=2048",
            "--set", "vp=geometric:256", "--set", "vd=geometric:64", "--ttft", "2",
            "--tpot", "0.1", "--requests", "60", "--reps", "2"]


def test_a_grid_skips_what_cannot_run_and_ranks_the_rest(capsys):
    argv = ROOFLINE + ["--grid", "gpu=H100,H200", "--grid", "tp=1,3",
                       "--grid", "model=llama-3-8b,llama-3-70b",
                       "--price", "H100=2.21,H200=3.5", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranking"] == "per_million_output" and "p90" in doc["judged"]
    configs = doc["configurations"]
    planned = [c for c in configs if c["skipped"] is None]
    assert [c["label"] for c in planned] == ["gpu=H100 tp=1 model=llama-3-8b",
                                             "gpu=H200 tp=1 model=llama-3-8b"] or \
        [c["label"] for c in planned] == ["gpu=H200 tp=1 model=llama-3-8b",
                                          "gpu=H100 tp=1 model=llama-3-8b"]
    costs = [c["per_million_output"] for c in planned]
    assert all(c["meets"] for c in planned) and costs == sorted(costs)
    assert [c["price"] for c in planned] == [2.21 if "H100" in c["label"] else 3.5
                                            for c in planned]
    skipped = {c["label"]: c["skipped"] for c in configs if c["skipped"] is not None}
    assert len(skipped) == 6 and configs[2:] == [c for c in configs if c["skipped"]]
    assert "tp must divide" in skipped["gpu=H100 tp=3 model=llama-3-8b"]
    assert "model does not fit" in skipped["gpu=H200 tp=1 model=llama-3-70b"]
    assert planned[0]["fit"]["memory"]["gpu"] in ("H100", "H200")


def test_a_grid_prints_one_table_and_draws_one_figure(tmp_path, capsys):
    figure = tmp_path / "plans.png"
    argv = ["plan", "--set", "kmax=none", "--set", "vp=geometric:64", "--set",
            "vd=geometric:64", "--set", "kv=1000", "--grid", "bmax=64,512", "--ttft", "5",
            "--requests", "100", "--reps", "2", "--engines-for", "2", "--plot", str(figure)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plan of 2 configurations (joint mode, target 0.9")
    header = next(i for i, line in enumerate(lines) if line.startswith("row "))
    assert "GPUs" in lines[header] and "K_min" in lines[header]
    assert lines[header + 2].startswith("1  bmax=") and lines[header + 3][:3] in ("2  ", "-  ")
    assert any(line.startswith("ranked by GPUs the rate needs") for line in lines)
    assert figure.stat().st_size > 0


@pytest.mark.parametrize("argv, fragment", [
    (["--grid", "bmax=64,128", "--set", "bmax=64"], "given by --set and by --grid"),
    (["--grid", "bmax=64", "--grid", "bmax=128"], "--grid bmax: given twice"),
    (["--grid", "nosuch=1,2"], "no parameter 'nosuch'"),
    (["--grid", "rate=1,2"], "rate cannot be set for plan"),
    (["--set", "latency=roofline", "--set", "model=llama-3-8b", "--grid", "gpu=H100,H200",
      "--price", "2.21"], "prices every GPU alike"),
    (["--set", "latency=roofline", "--set", "model=llama-3-8b", "--grid", "gpu=H100,H200",
      "--price", "H100=2.21"], "no price for H200"),
    (["--price", "H100=cheap"], "must be a number"),
    (["--price", "B300=1"], "B300"),
    (["--set", "latency=roofline", "--set", "model=llama-3-8b", "--set", "gpu=H100",
      "--grid", "tp=3,5"], "no configuration can be planned"),
])
def test_bad_grids_and_prices_are_one_line_errors(argv, fragment):
    assert fragment in cli_error(["plan", "--ttft", "1", *argv])
