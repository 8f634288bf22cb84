"""What the KV-cache reference experiments (docs/model.md §6.8) share: the common engine
(no kmax, a budget too large to bind, whole prompts, a lazy KV cache that
preempts by recompute), constant iteration times, saturated workloads, the
pending slope over the second half of a run and means over seeds.

The experiments built on it: ``nie-table1`` (§6.8.1), ``memory-boundary``
(§6.8.2), ``coprime`` (§6.8.5) and ``memory-waste`` (§6.8.6); §6.8.3 and §6.8.4
(greedy admission against ``wait``, their setup in ``greedy_memory``) run on
the same engine.  Each registers itself with :func:`register_memory`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.common.params import Param
from llmqueue.common.units import UNLIMITED, to_ticks
from llmqueue.engine.kv import KV
from llmqueue.engine.results import Result
from llmqueue.engine.options import RunOptions
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import Check, Column, Experiment, Rows, register
from llmqueue.models.arrivals import Poisson
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.models.sizes import SizeLaw, UniformInt
from llmqueue.models.workload import Workload, compose
from llmqueue.theory.drift import edge_slope, window_times

#: docs/model.md §6.8's token budget: large enough that memory binds, never compute.
BMAX = 10**6
#: Arrivals above capacity in a saturated run, as a multiple of the capacity
#: (docs/model.md §6.8.1's lambda = 1.5 mu).
SATURATION = 1.5
#: Most requests a saturated run puts at time 0: a cache that starts more at
#: once serves that many in every iteration, minutes of computing per
#: simulated iteration (docs/model.md §6.8's runs need at most about 2,000).
MAX_BACKLOG = 20_000
#: The logs an experiment may keep besides its figures (``--batches``,
#: ``--requests``, ``--timeseries``).
RECORDINGS = frozenset({"batches", "requests", "timeseries"})


def constant_time(tau: float) -> Staircase:
    """Every iteration lasts ``tau`` seconds: ``staircase(c=tau, a=0, b0=1)``, as in
    docs/model.md §6.8."""
    return Staircase(c=validation.positive_number("tau", tau), a=0, b0=1)


def uniform(low: int, high: int) -> UniformInt:
    """The integer uniform ``U{low..high}``, both ends included (``uniform:LOW:HIGH``)."""
    validation.nonnegative_int("low", low)
    if not isinstance(high, int) or high < low:
        raise ValueError(f"high must be an integer >= low={low}, got {high!r}")
    return UniformInt(low, high + 1)


def memory_kv(M: int, restart: str = "keep", watermark: Optional[float] = None) -> KV:
    """docs/model.md §6.8's cache: ``M`` tokens in blocks of 1, lazy admission,
    preemption by recompute with ``restart`` (``keep`` or ``scratch``), and
    the admission ``watermark`` (``None``: none)."""
    return KV(capacity_tokens=M, block_size=1, admission="lazy", preemption="recompute",
              restart=restart, watermark=watermark)


def backlog_at_start(M: int, mean_prompt: float) -> int:
    """Requests put at time 0 in a saturated run: enough prompts to fill the
    cache of ``M`` tokens twice over (``ceil(2 M / E[vp])``), so the wait line
    is long from the first iteration.  More than :data:`MAX_BACKLOG` is a
    ``ValueError`` (the cache would hold too many requests to simulate)."""
    validation.positive_int("M", M)
    count = math.ceil(2 * M / max(1.0, validation.positive_number("mean_prompt", mean_prompt)))
    if count > MAX_BACKLOG:
        raise ValueError(f"kv / vp must be at most {MAX_BACKLOG // 2:,} for a saturated run "
                         f"(a cache of {M:,} tokens starts about {M / max(1.0, mean_prompt):,.0f} "
                         f"prompts of {mean_prompt:g} tokens at once, too many to simulate); "
                         "use a smaller kv or longer prompts")
    return count


def saturated(capacity: float, prefill: SizeLaw, decode: SizeLaw, M: int, seed: int,
              load: float = SATURATION) -> Workload:
    """A saturated stream (docs/model.md §6.8): :func:`backlog_at_start` requests at time
    0, then Poisson arrivals at ``load`` times ``capacity`` (requests/s),
    sizes from the ``prefill`` and ``decode`` laws."""
    validation.positive_number("capacity", capacity)
    if not validation.positive_number("load", load) > 1:
        raise ValueError(f"load must be a number > 1 (arrivals above capacity), got {load!r}")
    return compose(Poisson(load * capacity), prefill, decode, seed=seed,
                   initial=backlog_at_start(M, prefill.mean))


def serve(workload: Workload, policy: object, latency: LatencyModel, M: int, horizon: float,
          *, warmup: float = 0.0, chunked: bool = False, bmax: Optional[int] = BMAX,
          restart: str = "keep", watermark: Optional[float] = None, timeseries: bool = False,
          batches: bool = False, requests: bool = False) -> Result:
    """One run on docs/model.md §6.8's engine: no kmax, whole prompts unless
    ``chunked``, the cache of :func:`memory_kv`; ``timeseries``, ``batches``
    and ``requests`` keep those logs.

    "No kmax" is passed as :data:`~llmqueue.common.units.UNLIMITED` slots, not
    ``kmax=None``: the figures are the same, but with ``kmax=None`` the engine
    keeps every finished request alive until the run ends (its slot is put
    back into an infinite pool, which never accepts it), so memory grows with
    every arrival; a saturated run serves millions."""
    return simulate(workload, policy, bmax=bmax, kmax=UNLIMITED, chunked=chunked, latency=latency,
                    kv=memory_kv(M, restart, watermark), horizon=horizon, warmup=warmup,
                    timeseries=timeseries, batches=batches, requests=requests)


def pending_slope(result: Result, horizon: float) -> Tuple[Optional[float], Optional[float]]:
    """Slope of pending (requests/s) over the second half of a run of
    ``horizon`` seconds recorded with ``timeseries=True``, and its standard
    error: pending read at the drift windows' edges
    (:func:`~llmqueue.theory.drift.window_times`), as the backlog slope is."""
    if result.series is None:
        raise ValueError("pending_slope needs a run recorded with timeseries=True")
    edges = window_times(to_ticks(horizon))
    times = np.array([t for t, _, _ in result.series], dtype=np.int64)
    pending = np.array([p for _, p, _ in result.series], dtype=np.int64)
    at = np.searchsorted(times, edges, side="right") - 1
    values = [int(pending[i]) if i >= 0 else 0 for i in at]
    return edge_slope(edges, values)


def mean_se(values: Sequence[float]) -> Tuple[float, Optional[float]]:
    """Mean of ``values`` (one per seed) and its standard error (``None`` for one value)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("mean_se needs at least one value")
    se = float(data.std(ddof=1) / np.sqrt(data.size)) if data.size > 1 else None
    return float(data.mean()), se


def parse_numbers(name: str, text: str) -> List[float]:
    """``"0.6,0.9,1.1"`` as a list of numbers > 0 (``name`` names the parameter)."""
    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(np.isfinite(x) and x > 0 for x in values):
        raise ValueError(f"{name} must be comma-separated numbers > 0; got {text!r}")
    return values


def register_memory(name: str, summary: str, params: Dict[str, Param],
                    run: Callable[[Dict[str, Any], RunOptions], Rows],
                    checks: Callable[[Rows], List[Check]], columns: Sequence[Column],
                    notes: Callable[[Rows, Dict[str, Any]], List[str]], *, horizon: float,
                    recordings: bool = False) -> Experiment:
    """Register one of docs/model.md §6.8's experiments: seeded, honouring ``horizon``
    and ``seed`` (and the :data:`RECORDINGS` when ``recordings``), with its
    own checks, columns and notes."""
    options = {"horizon", "seed"} | (RECORDINGS if recordings else set())
    return register(Experiment(name=name, summary=summary, params=params, run=run,
                               horizon=horizon, seeded=True, options=frozenset(options),
                               checks=checks, columns=columns, notes=notes))
