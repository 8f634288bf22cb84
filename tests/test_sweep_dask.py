"""The same sweep on a Dask cluster: rows bit-identical to a serial run."""

import pytest

distributed = pytest.importorskip("distributed")

from llmqueue.experiments import get  # noqa: E402
from llmqueue.sweeps.executors import open_executor  # noqa: E402
from llmqueue.sweeps.runner import sweep  # noqa: E402

GRID = {"arrival": ["poisson"], "rate": [1.0, 2.0]}
KW = dict(schedulers=["sarathi", "orca"], horizon=30.0)


@pytest.fixture(scope="module")
def dask_executor():
    """One local cluster of two single-threaded worker processes for the module."""
    with open_executor(2, "local") as executor:
        yield executor


def without_wall_time(rows):
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]


def test_dask_gives_the_serial_rows(dask_executor, tmp_path):
    serial = sweep(get("single"), GRID, 2, **KW)
    out = str(tmp_path / "d.csv")
    on_dask = sweep(get("single"), GRID, 2, executor=dask_executor, out=out, **KW)
    assert without_wall_time(on_dask) == without_wall_time(serial)
    resumed = sweep(get("single"), GRID, 2, executor=dask_executor, out=out, resume=True, **KW)
    assert resumed == on_dask  # nothing ran again: even the wall times are the file's


def test_a_failing_run_on_dask_is_the_value_error_of_the_run(dask_executor):
    with pytest.raises(ValueError, match="kmax must be an integer >= 1"):
        sweep(get("single"), {"kmax": [0]}, 1, executor=dask_executor, horizon=5.0)
