"""Sweeps: same rows on every executor, resume that neither reruns nor
duplicates, and confidence intervals that cover a known mean."""

import csv
from concurrent.futures import ProcessPoolExecutor

import pytest

from llmqueue import Constant, poisson, simulate
from llmqueue.experiments import Experiment, Param, get, register
from llmqueue.sweeps.runner import plan, read_rows, summarize, sweep, to_dataframe

CALLS = []        # the parameters of every run of the counting scenario, in order
BOMB = {"at": None}  # a rate whose run is interrupted (Ctrl-C) when set


def count_run(params, options):
    """Poisson(rate) arrivals of one-token requests; counts its runs."""
    if params["rate"] == BOMB["at"]:
        raise KeyboardInterrupt
    CALLS.append((params["rate"], options.seed))
    result = simulate(poisson(params["rate"], 0, 1, seed=options.seed), latency=Constant(0.01),
                      horizon=options.horizon, **options.logs())
    return [("count", result)]


COUNT = register(Experiment(name="count-test", summary="test: Poisson arrivals, counted runs",
                          params={"rate": Param("float", 1.0, "arrivals per second")},
                          run=count_run, horizon=10.0, seeded=True))

GRID = {"arrival": ["poisson"], "rate": [1.0, 2.0]}
KW = dict(schedulers=["sarathi", "vllm"], horizon=30.0)


def without_wall_time(rows):
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


def test_rows_are_tidy_and_carry_every_summary_figure():
    rows = sweep(get("single"), GRID, 2, **KW)
    assert len(rows) == 2 * 2 * 2
    first = rows[0]
    assert list(first)[:9] == ["arrival", "rate", "scheduler", "replicate", "seed", "horizon",
                               "warmup", "scenario", "label"]
    figures = simulate(poisson(1.0, 290, 990), horizon=1.0).summary
    assert set(figures) <= set(first) and list(first)[-1] == "wall_time"
    assert [(r["rate"], r["scheduler"], r["replicate"]) for r in rows] == [
        (rate, s, i) for rate in (1.0, 2.0) for s in ("sarathi", "vllm") for i in (0, 1)]


def test_fixed_parameters_are_columns_too():
    row = sweep(get("single"), {"rate": [2.0]}, 1, fixed={"arrival": "poisson", "vp": 10},
                **KW)[0]
    assert list(row)[:4] == ["rate", "arrival", "vp", "scheduler"]
    assert (row["arrival"], row["vp"]) == ("poisson", 10)


def test_a_row_is_the_run_simulate_gives_with_that_seed():
    row = sweep(get("single"), {"arrival": ["poisson"], "rate": [2.0]}, 1, **KW)[0]
    direct = simulate(poisson(2.0, 290, 990, seed=row["seed"]), horizon=30.0).summary
    assert {k: row[k] for k in direct} == direct


def test_serial_and_process_pool_give_the_same_rows(tmp_path):
    serial = sweep(get("single"), GRID, 2, **KW)
    with ProcessPoolExecutor(2) as pool:
        pooled = sweep(get("single"), GRID, 2, executor=pool, out=str(tmp_path / "s.csv"), **KW)
    assert without_wall_time(pooled) == without_wall_time(serial)
    on_disk = read_rows(str(tmp_path / "s.csv"))
    key = lambda r: (r["rate"], r["scheduler"], r["replicate"])  # noqa: E731
    assert without_wall_time(sorted(on_disk, key=key)) == without_wall_time(serial)


def rows_in(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_resume_neither_reruns_nor_duplicates(tmp_path):
    out = str(tmp_path / "c.csv")
    CALLS.clear()
    first = sweep(COUNT, {"rate": [1.0, 2.0]}, 3, out=out)
    assert len(CALLS) == 6 and len(rows_in(out)) == 6
    again = sweep(COUNT, {"rate": [1.0, 2.0]}, 3, out=out, resume=True)
    assert len(CALLS) == 6 and len(rows_in(out)) == 6
    assert without_wall_time(again) == without_wall_time(first)
    sweep(COUNT, {"rate": [1.0, 2.0, 3.0]}, 3, out=out, resume=True)
    assert [rate for rate, _ in CALLS[6:]] == [3.0, 3.0, 3.0]
    keys = [(r["rate"], r["replicate"]) for r in rows_in(out)]
    assert len(keys) == len(set(keys)) == 9


def test_an_interrupted_sweep_keeps_its_finished_runs(tmp_path):
    out = str(tmp_path / "c.csv")
    CALLS.clear()
    BOMB["at"] = 2.0
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep(COUNT, {"rate": [1.0, 2.0, 3.0]}, 2, out=out)
    finally:
        BOMB["at"] = None
    assert [r["rate"] for r in rows_in(out)] == ["1.0", "1.0"]
    with open(out, "a") as handle:
        handle.write("2.0,,0,12")  # a line cut short by a hard kill
    rows = sweep(COUNT, {"rate": [1.0, 2.0, 3.0]}, 2, out=out, resume=True)
    assert [rate for rate, _ in CALLS] == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert len(rows) == 6 and len(rows_in(out)) == 6
    assert sorted(r["seed"] for r in rows_in(out)) == sorted(str(r["seed"]) for r in rows)


def test_resume_refuses_a_file_of_another_sweep(tmp_path):
    out = str(tmp_path / "c.csv")
    sweep(COUNT, {"rate": [1.0]}, 1, out=out)
    with pytest.raises(ValueError, match="is not a sweep of single"):
        sweep(get("single"), {"rate": [1.0]}, 1, out=out, resume=True, horizon=5.0)
    with pytest.raises(ValueError, match="is not a sweep over rate, vp, scheduler"):
        sweep(get("single"), {"rate": [1.0]}, 1, fixed={"vp": 10}, out=out, resume=True)
    assert len(rows_in(out)) == 1


def coverage(points, seeds, horizon, warmup):
    """Fraction of grid points whose 95% interval for the mean arrival count
    holds the exact mean rate * (horizon - warmup)."""
    rates = [4.0 + 0.01 * i for i in range(points)]
    rows = sweep(COUNT, {"rate": rates}, seeds, horizon=horizon, warmup=warmup)
    hits = 0
    for p in summarize(rows):
        exact = p["rate"] * (horizon - warmup)
        hits += abs(p["arrivals_mean"] - exact) <= p["arrivals_ci95"]
    return hits / points


def test_intervals_cover_the_poisson_mean_at_about_95_percent():
    # 300 intervals from 4 seeds each (t with 3 df; a normal quantile would
    # cover only ~86%): binomial sd of the rate is 1.3%, the bound is 3 sd
    assert 0.912 <= coverage(300, 4, horizon=12.0, warmup=2.0) <= 0.988


@pytest.mark.slow
def test_intervals_cover_the_poisson_mean_long():
    # 2000 intervals: binomial sd 0.49%, the bound is 3 sd
    assert 0.935 <= coverage(2000, 5, horizon=20.0, warmup=5.0) <= 0.965


def test_bad_sweeps_are_value_errors():
    with pytest.raises(ValueError, match="seeds must be 1 for point-c"):
        plan(get("point-c"), {}, 3)
    with pytest.raises(ValueError, match="scheduler must be one of"):
        plan(get("single"), {}, 1, schedulers=["fifo"])
    with pytest.raises(ValueError, match="scheduler: give it in the grid or as schedulers"):
        plan(get("single"), {"scheduler": ["orca"]}, 1, schedulers=["vllm"])
    with pytest.raises(ValueError, match="warmup must be below the horizon"):
        plan(get("single"), {}, 1, horizon=10.0, warmup=10.0)
    with pytest.raises(ValueError, match="resume needs out"):
        sweep(COUNT, {}, 1, resume=True)


def test_rows_turn_into_a_dataframe():
    pandas = pytest.importorskip("pandas")
    frame = to_dataframe(sweep(COUNT, {"rate": [1.0, 2.0]}, 2))
    assert isinstance(frame, pandas.DataFrame) and frame.shape[0] == 4
    assert frame.groupby("rate")["arrivals"].count().tolist() == [2, 2]
