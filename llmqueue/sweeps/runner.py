"""Sweeps: every combination of a parameter grid, times replicates, on any
executor with the :class:`concurrent.futures.Executor` interface.

Each run gives tidy rows: the grid point (a column per grid key, then one
per fixed parameter, then ``scheduler``), the replicate index and its seed, the horizon and warm-up,
the scenario's name and row label, every summary figure of the ``--json`` contract,
and the run's wall time.  With ``out`` the rows are appended to a CSV file and
flushed as each run finishes, so an interrupted sweep keeps every finished
run; ``resume`` skips the runs already in that file.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol,
                    Sequence, Tuple)

from llmqueue.common import files, validation
from llmqueue.common.frames import frame
from llmqueue.common.progress import bar as progress_bar
from llmqueue.common.params import Param
from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.policies.builtin import make_policy
from llmqueue.sweeps import grid as grids
from llmqueue.sweeps import store
from llmqueue.sweeps.store import (Row, RowWriter, cell, figure_columns, point_columns,
                                   read_rows, write_rows)
from llmqueue.theory.stats import aggregate

if TYPE_CHECKING:
    import pandas  # optional: only the frames need it

__all__ = ["Row", "RowWriter", "Runnable", "Task", "execute", "figure_columns", "plan",
           "point_columns", "read_frame", "read_rows", "run_task", "summarize", "sweep",
           "to_dataframe", "varying", "write_rows"]


class Runnable(Protocol):
    """What a sweep needs of an experiment (:class:`llmqueue.experiments.Experiment`
    is one): its name, typed parameters, defaults, and a checked run."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Param]: ...

    @property
    def horizon(self) -> Optional[float]: ...

    @property
    def seeded(self) -> bool: ...

    def resolve(self, overrides: Mapping[str, str]) -> Dict[str, object]: ...

    def check_options(self, options: RunOptions) -> None: ...

    def execute(self, params: Dict[str, object],
                options: Optional[RunOptions] = None) -> List[Tuple[str, Result]]: ...



@dataclass(frozen=True)
class Task:
    """One run of a sweep: everything a worker needs, and nothing it must look up."""

    experiment: Runnable
    params: Dict[str, object]  # every parameter of the experiment, resolved
    point: Dict[str, object]   # the grid values and the scheduler: the row's key columns
    replicate: int
    seed: int
    horizon: Optional[float]
    warmup: float

    def key(self) -> Tuple[str, ...]:
        """What identifies the run in a CSV file (as the file spells it)."""
        return tuple(cell(v) for v in (*self.point.values(), self.replicate, self.seed,
                                         self.horizon, self.warmup))


#: Most replicates a sweep runs per grid point.
MAX_SEEDS = 10_000


def plan(scenario: Runnable, grid: Mapping[str, Sequence[object]],
         seeds: int = 1, *, schedulers: Optional[Sequence[str]] = None,
         fixed: Optional[Mapping[str, object]] = None, horizon: Optional[float] = None,
         warmup: float = 0.0, base_seed: int = 0) -> List[Task]:
    """The runs of a sweep, grid point by grid point, replicates innermost."""
    scen = scenario
    validation.positive_int("seeds", seeds)
    if seeds > MAX_SEEDS:
        raise ValueError(f"seeds must be at most {MAX_SEEDS} per grid point; got {seeds}")
    validation.nonnegative_int("base_seed", base_seed)
    if seeds > 1 and not scen.seeded:
        raise ValueError(f"seeds must be 1 for {scen.name}, which draws no random numbers; "
                         f"got {seeds}")
    horizon = scen.horizon if horizon is None else validation.positive_number("horizon",
                                                                              horizon)
    validation.nonnegative_number("warmup", warmup)
    if warmup and (horizon is None or warmup >= horizon):
        raise ValueError(f"warmup must be below the horizon ({horizon}); got {warmup}")
    scen.check_options(RunOptions(horizon=horizon, warmup=warmup))
    checked = grids.check(scen, grid)
    if schedulers is not None:
        if "scheduler" in checked:
            raise ValueError("scheduler: give it in the grid or as schedulers, not both")
        checked["scheduler"] = grids.check(scen, {"scheduler": list(schedulers)})["scheduler"]
    fixed_values = {k: v[0] for k, v in grids.check(scen, {k: [v] for k, v in
                                                          (fixed or {}).items()}).items()}
    both = set(fixed_values) & set(checked)
    if both:
        raise ValueError(f"{', '.join(sorted(both))}: both fixed and in the grid")
    for name in checked.get("scheduler", []):
        if name is not None:
            make_policy(name)  # fail before any run on an unknown scheduler
    order = [k for k in checked if k != "scheduler"] + list(fixed_values) + ["scheduler"]
    defaults = scen.resolve({})
    preset = getattr(scen, "with_preset", None)  # an engine preset (``engine``), if it has one
    tasks = []
    for values in grids.expand({k: checked[k] for k in order if k in checked}):
        params = {**defaults, **fixed_values, **values}
        if preset is not None:  # the keys of the grid and the fixed values are given
            params = preset(params, set(fixed_values) | set(values))
        point = {k: params.get(k) for k in order}
        for replicate in range(seeds):
            seed = grids.run_seed(base_seed, _seeded(scen.params, params), replicate)
            tasks.append(Task(scen, params, point, replicate, seed, horizon, warmup))
    return tasks


def _seeded(declared: Mapping[str, Param], params: Mapping[str, Any]) -> Dict[str, Any]:
    """The parameters a run's seed is drawn from: all but those declared
    ``quiet_default`` that are at their default."""
    return {k: v for k, v in params.items()
            if not (k in declared and declared[k].quiet_default and v == declared[k].default)}


def run_task(task: Task) -> List[Row]:
    """Run one task (in a worker) and return its tidy rows."""
    options = RunOptions(horizon=task.horizon, warmup=task.warmup,
                         seed=task.seed if task.experiment.seeded else None)
    start = time.perf_counter()
    results = task.experiment.execute(task.params, options)
    wall = time.perf_counter() - start
    head = {**task.point, "replicate": task.replicate, "seed": task.seed,
            "horizon": task.horizon, "warmup": task.warmup, "scenario": task.experiment.name}
    return [{**head, **_figures(result.row(label), head), "wall_time": wall}
            for label, result in results]


def _figures(row: Row, head: Row) -> Row:
    """A run's figures beside its parameters: a figure named like a parameter
    (``load``: the grid's value and the measured one) becomes ``load_measured``."""
    return {(f"{k}_measured" if k in head else k): v for k, v in row.items()}


def execute(tasks: Sequence[Task], executor: Optional[Executor] = None,
            on_done: Optional[Callable[[List[Row]], None]] = None,
            progress: Optional[bool] = None) -> List[List[Row]]:
    """Run ``tasks`` in this process (``executor=None``) or on ``executor``;
    ``on_done`` gets each run's rows as it finishes.  Returns the rows in task
    order.  A progress bar goes to stderr when it is a terminal (or when
    ``progress`` is true)."""
    results: List[List[Row]] = [[] for _ in tasks]
    with progress_bar(len(tasks), "run", progress) as bar:
        def done(i: int, rows: List[Row]) -> None:
            results[i] = rows
            if on_done is not None:
                on_done(rows)
            bar.update()

        if executor is None:
            for i, task in enumerate(tasks):
                done(i, run_task(task))
            return results
        futures = {executor.submit(run_task, task): i for i, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                done(futures[future], future.result())
        finally:
            for future in futures:
                future.cancel()
    return results


def sweep(scenario: Runnable, grid: Mapping[str, Sequence[object]],
          seeds: int = 1, *, schedulers: Optional[Sequence[str]] = None,
          fixed: Optional[Mapping[str, object]] = None, horizon: Optional[float] = None,
          warmup: float = 0.0, base_seed: int = 0, executor: Optional[Executor] = None,
          out: Optional[str] = None, resume: bool = False,
          progress: Optional[bool] = None) -> List[Row]:
    """Run every combination of ``grid`` (a dict of value lists, over the
    scenario's parameters and ``scheduler``) with ``seeds`` replicates each,
    and return the tidy rows in grid order.

    ``executor``: ``None`` runs here, one run after another; otherwise any
    ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``, or
    ``dask.distributed.Client(...).get_executor()``).  ``out``: a CSV file the
    rows are appended to as runs finish (see :mod:`llmqueue.sweeps.store`),
    locked against a second sweep while this one runs; with ``resume`` the
    whole runs already in it are skipped (and their rows returned from the
    file), and cut or malformed ones run again.  ``out`` may not be a file a
    parameter names (a trace the runs read).
    """
    tasks = plan(scenario, grid, seeds, schedulers=schedulers, fixed=fixed,
                 horizon=horizon, warmup=warmup, base_seed=base_seed)
    if resume and out is None:
        raise ValueError("resume needs out, the CSV file of an earlier sweep")
    if out is None:
        return _rows(tasks, {}, execute(tasks, executor, None, progress))
    files.check_output(out, "out", regular=True)
    given = [*(fixed or {}).items(), *((k, v) for k, vs in grid.items() for v in vs)]
    files.refuse_clashes([("out", out)], files.named_files(given))
    with files.exclusive_lock(out, "out"):
        kept: Dict[store.Key, List[Row]] = {}
        if resume and os.path.exists(out):
            kept = store.read_done(out, list(tasks[0].point) if tasks else [],
                                   scenario.name)
        else:
            with files.writing(out, "out"):
                open(out, "w").close()
        todo = [t for t in tasks if t.key() not in kept]
        with RowWriter(out) as writer:
            return _rows(tasks, kept, execute(todo, executor, writer.write, progress))


def _rows(tasks: Sequence[Task], kept: Mapping[store.Key, List[Row]],
          fresh: List[List[Row]]) -> List[Row]:
    """The rows of ``tasks`` in order: from ``kept`` (a file's whole runs) or,
    for the others in turn, from ``fresh``."""
    runs = iter(fresh)
    return [row for t in tasks for row in (kept[t.key()] if t.key() in kept else next(runs))]


def summarize(rows: Sequence[Row]) -> List[Row]:
    """Per grid point and row label: ``n`` runs and, for every figure, its mean
    and 95% confidence half-width over the replicates (see :func:`stats.aggregate`)."""
    if not rows:
        return []
    columns = list(rows[0])
    # runs of another horizon or warm-up are other points, never more seeds
    keys = point_columns(columns) + [k for k in ("horizon", "warmup", "label") if k in columns]
    return aggregate(rows, keys, figure_columns(columns))


def varying(points: Sequence[Row], skip: Sequence[str] = ()) -> List[str]:
    """The grid columns of :func:`summarize`'s ``points`` whose value differs
    between them (but those in ``skip``), then ``label`` if one run gives
    several labelled rows."""
    if not points:
        return []
    columns = list(points[0])
    keys = columns[:columns.index("label")]
    out = [k for k in keys if k not in skip and len({str(p[k]) for p in points}) > 1]
    per_run = len({tuple(str(p[k]) for k in keys) for p in points})
    if per_run < len(points) and "label" not in skip:
        out.append("label")
    return out


def to_dataframe(rows: Sequence[Row]) -> "pandas.DataFrame":
    """The rows as a pandas DataFrame (pandas is an optional extra)."""
    return frame(rows, "to_dataframe")


def read_frame(path: str) -> "pandas.DataFrame":
    """A sweep's CSV (``llmqueue sweep --out``) as a pandas DataFrame, one row per
    run and figure columns typed as :func:`read_rows` reads them."""
    return frame(read_rows(path), "read_frame")
