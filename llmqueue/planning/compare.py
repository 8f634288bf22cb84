"""Several configurations planned for one workload and SLO (``llmqueue plan
--grid``), ranked so that the cheapest that meets the SLO comes first.

Each :class:`Configuration` holds a plan (and the fewest engines for a rate,
when one is asked for), or why it was skipped (the model does not fit the
GPUs, ``tp`` does not divide the heads, no request fits the KV cache).
:func:`rank` orders them (:func:`ranking` says by what):

* with a price for every configuration: by dollars per hour at ``K_min`` for a
  rate, else by dollars per million output tokens at the goodput;
* without: by the GPUs ``K_min * tp`` a rate needs, else by the goodput per
  GPU, largest first (ties, in every ranking: the larger goodput per GPU);

then the configurations that do not meet the SLO (infeasible, a goodput of 0,
no ``K_min``) in their given order; the skipped ones are not ranked.

:func:`read_prices` reads ``--price``: one number for every GPU, or one per
GPU type (``H100=2.21,H200=3.5``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from concurrent.futures import Executor
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from llmqueue.common import validation
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.network.routers import check_traffic
from llmqueue.planning.bounds import bounds_of, check_slo
from llmqueue.planning.engines import EnginesResult, plan_engines, pool_limit
from llmqueue.planning.fit import Fit, Memory, binding, diagnose, memory_note
from llmqueue.planning.hits import cached_bounds
from llmqueue.planning.plan import PlanResult, plan
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.slo import SLO

#: ``--price``: one price for every GPU, or a price per GPU type (by its record's name).
Prices = Union[float, Dict[str, float]]


@dataclass(frozen=True)
class Configuration:
    """One configuration of a comparison: the ``settings`` that tell it apart
    (``KEY=VALUE`` texts), its GPU type (None without one) and GPUs per
    engine, and what planning gave: the plan, the fewest engines for a rate,
    the fit of its requests in the KV cache; or why it was ``skipped``."""

    settings: Dict[str, str]
    gpu: Optional[str] = None
    tp: int = 1
    result: Optional[PlanResult] = None
    engines: Optional[EnginesResult] = None
    fit: Optional[Fit] = None
    skipped: Optional[str] = None
    price: Optional[float] = None
    notes: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``key=value`` of each setting, space-separated."""
        return " ".join(f"{k}={v}" for k, v in self.settings.items()) or "(one configuration)"

    @property
    def meets(self) -> bool:
        """Whether it meets the SLO: a goodput above 0, and a ``K_min`` when a
        rate was asked for."""
        r = self.result
        if r is None or r.infeasible or r.goodput <= 0:
            return False
        return self.engines is None or self.engines.k_min is not None

    @property
    def gpus(self) -> Optional[int]:
        """GPUs the rate needs, ``K_min * tp`` (None without ``K_min``)."""
        k = None if self.engines is None else self.engines.k_min
        return None if k is None else k * self.tp

    @property
    def per_gpu(self) -> Optional[float]:
        """The goodput per GPU (req/s)."""
        return None if self.result is None else self.result.per_gpu_goodput

    @property
    def per_hour(self) -> Optional[float]:
        """Dollars per hour: of ``K_min`` engines for a rate, else of one engine."""
        cost = self.engines.cost if self.engines is not None else \
            None if self.result is None else self.result.cost
        return None if cost is None else cost.per_hour

    @property
    def per_million_output(self) -> Optional[float]:
        """Dollars per million output tokens (at ``K_min``, else at the goodput)."""
        cost = self.engines.cost if self.engines is not None else \
            None if self.result is None else self.result.cost
        return None if cost is None else cost.per_million_output

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready: the settings, the verdict, the plan's document and the
        fewest engines'."""
        return {"label": self.label, "settings": self.settings, "gpu": self.gpu, "tp": self.tp,
                "price": self.price, "meets": self.meets, "skipped": self.skipped,
                "gpus": self.gpus, "per_gpu_goodput": self.per_gpu,
                "per_hour": self.per_hour, "per_million_output": self.per_million_output,
                "fit": None if self.fit is None else self.fit.as_dict(),
                "plan": None if self.result is None else self.result.as_dict(),
                "engines_for": None if self.engines is None else self.engines.as_dict(),
                "notes": list(self.notes)}


def ranking(configs: Sequence[Configuration], rate: Optional[float]) -> str:
    """What :func:`rank` orders by: ``per_hour``, ``per_million_output``,
    ``gpus`` or ``per_gpu``."""
    meeting = [c for c in configs if c.meets]
    priced = bool(meeting) and all(c.per_hour is not None for c in meeting)
    if rate is not None:
        return "per_hour" if priced else "gpus"
    return "per_million_output" if priced else "per_gpu"


#: How each ranking is said.
RANKINGS = {"per_hour": "$/h of the fewest engines for the rate, cheapest first",
            "per_million_output": "$ per million output tokens at the goodput, cheapest first",
            "gpus": "GPUs the rate needs, fewest first",
            "per_gpu": "goodput per GPU, largest first"}


def rank(configs: Sequence[Configuration], rate: Optional[float]) -> List[Configuration]:
    """The planned configurations, those that meet the SLO first in the order
    of :func:`ranking` (ties: more goodput per GPU first, then the given
    order), then the others; the skipped ones are left out."""
    by = ranking(configs, rate)

    def key(c: Configuration) -> Tuple[float, float]:  # ties: more goodput per GPU first
        value = getattr(c, by)
        if value is None:
            return math.inf, 0.0
        return -float(value) if by == "per_gpu" else float(value), -(c.per_gpu or 0.0)
    planned = [c for c in configs if c.skipped is None]
    return sorted((c for c in planned if c.meets), key=key) + \
        [c for c in planned if not c.meets]


def gpu_of(settings: Mapping[str, Any]) -> Optional[str]:
    """The GPU type of ``run single``'s parameters (its record's name), or None."""
    return find_gpu(settings["gpu"]).name if settings.get("gpu") else None


def read_prices(text: Optional[str]) -> Optional[Prices]:
    """``--price``: a number ($ per GPU-hour for every GPU) or ``GPU=USD,...``
    (a price per GPU type; names as ``gpu=`` takes them, aliases too)."""
    if text is None:
        return None
    text = text.strip()
    if "=" not in text:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"--price takes $ per GPU-hour (a number) or GPU=USD,... (a "
                             f"price per GPU type, e.g. H100=2.21,H200=3.5); "
                             f"got {text!r}") from None
        return validation.nonnegative_number("--price", value)
    out: Dict[str, float] = {}
    for item in text.split(","):
        name, sep, number = (part.strip() for part in item.partition("="))
        if not sep or not name or not number:
            raise ValueError(f"--price takes GPU=USD,... (e.g. H100=2.21,H200=3.5); got "
                             f"{item.strip()!r} in {text!r}")
        gpu = find_gpu(name).name  # unknown names: the error lists the known ones
        try:
            price = float(number)
        except ValueError:
            raise ValueError(f"--price {name}: $ per GPU-hour must be a number; got "
                             f"{number!r}") from None
        if gpu in out:
            raise ValueError(f"--price {gpu}: given twice")
        out[gpu] = validation.nonnegative_number(f"--price {name}", price)
    return out


def price_for(prices: Optional[Prices], gpu: Optional[str],
              gpus: Sequence[Optional[str]] = ()) -> Optional[float]:
    """The price of a configuration on ``gpu`` (None: no price given).  One
    number prices every GPU alike, so it is refused when ``gpus`` (every
    configuration's) holds several types; a table must name ``gpu``."""
    if prices is None:
        return None
    kinds = sorted({g for g in gpus if g is not None})
    if not isinstance(prices, Mapping):
        if len(kinds) > 1:
            raise ValueError(f"--price {prices:g} prices every GPU alike, but the "
                             f"configurations use {', '.join(kinds)}: give one price per "
                             f"GPU type, --price {','.join(f'{k}=USD' for k in kinds)}")
        return float(prices)
    if gpu is None:
        raise ValueError("--price GPU=USD prices GPU types, but a configuration names no "
                         "gpu (set gpu=NAME, or give --price as one number)")
    if gpu not in prices:
        raise ValueError(f"--price has no price for {gpu} (given: {', '.join(prices)}); "
                         f"add {gpu}=USD")
    return prices[gpu]


def check_pool(rate: float, workload: Traffic, engine: EngineSpec, slo: SLO, target: float,
               seed: int, requests: int, router: str) -> None:
    """Refuse a pool for ``rate`` beyond the engines' limit before a plan runs
    (:func:`~llmqueue.planning.engines.pool_limit` at the plan's bounds)."""
    check_traffic(router, ids=workload.groups is not None and engine.kv is not None
                  and engine.kv.prefix)
    checked = check_slo(slo, workload)
    bounds = cached_bounds(bounds_of(workload, engine, checked, seed), workload, engine,
                           checked, seed, requests)[0]
    pool_limit(rate, bounds, target)


def plan_configuration(settings: Dict[str, str], gpu: Optional[str],
                       engine: Union[EngineSpec, str], workload: Traffic, slo: SLO,
                       target: float, *, rate: Optional[float] = None,
                       router: str = "jsq-tokens", memory: Optional[Memory] = None,
                       price: Optional[float] = None, tp: int = 1,
                       executor: Optional[Executor] = None, **common: Any) -> Configuration:
    """One configuration planned (:func:`~llmqueue.planning.plan.plan`, and
    :func:`~llmqueue.planning.engines.plan_engines` for ``rate``; ``common``
    their ``mode``, ``reps``, ``n_requests``, ``seed``), or skipped with the
    reason: ``engine`` is the text of why it could not be built (the model
    does not fit the GPUs, ``tp`` does not divide the heads), no request fits
    its KV cache, or the pool ``rate`` needs is beyond the limit."""
    if isinstance(engine, str):
        return Configuration(settings, gpu, tp, skipped=engine, price=price)
    seed = int(common.get("seed", 0))
    fit = diagnose(workload, engine, memory, seed)
    if fit is not None and fit.none_fit:
        return Configuration(settings, gpu, engine.tp, fit=fit, price=price,
                             skipped=f"no request can ever fit its KV cache of "
                                     f"{fit.kv_tokens:,} tokens (vp + vd <= "
                                     f"{fit.fit_tokens:,} fits; the mean request has "
                                     f"{fit.mean_tokens:,.0f})")
    if rate is not None:
        try:
            check_pool(rate, workload, engine, slo, target, seed,
                       int(common.get("n_requests", 2000)), router)
        except ValueError as exc:
            return Configuration(settings, gpu, engine.tp, fit=fit, skipped=str(exc),
                                 price=price)
    result = plan(workload, engine, slo, target, executor=executor, price=price, **common)
    engines = None
    if rate is not None and not result.infeasible:
        engines = plan_engines(rate, workload, engine, slo, target, router,
                               result.goodput or None, executor=executor, price=price,
                               **common)
    notes = [] if not result.reason else [result.reason]
    memory_line = memory_note(result.bounds, fit)
    if memory_line is not None:
        notes.append(memory_line)
    if engines is not None:
        notes.extend(engines.notes)
    return Configuration(settings, gpu, engine.tp, result, engines, fit, price=price,
                         notes=tuple(notes))


#: :func:`~llmqueue.planning.fit.binding` as the table says it.
BINDS = {"lambda_tok": "tok", "lambda_slot": "slot", "lambda_kv": "kv"}


def table_row(rank: Optional[int], c: Configuration) -> Dict[str, Any]:
    """The table row of planned configuration ``c`` (``rank`` None: it does
    not meet the SLO)."""
    r = c.result
    assert r is not None  # planned
    verdict = "meets" if c.meets else "infeasible" if r.infeasible else \
        "no rate passed" if r.goodput <= 0 else "no K_min"
    return {"label": f"{rank if rank is not None else '-'}  {c.label}",
            "kv": None if c.fit is None else c.fit.kv_tokens,
            "never": None if c.fit is None else c.fit.share_text(),
            "binds": BINDS[binding(r.bounds)], "goodput": r.goodput,
            "band": f"[{r.lo:.4g}, {r.hi:.4g}]", "per_gpu": r.per_gpu_goodput,
            "k_min": None if c.engines is None else c.engines.k_min, "gpus": c.gpus,
            "per_hour": c.per_hour, "per_m_out": c.per_million_output, "verdict": verdict,
            "wall": r.seconds + (0.0 if c.engines is None else c.engines.seconds)}


def table_columns(rate: bool, priced: bool) -> List[Tuple[str, str, str]]:
    """``(key, title, format)`` of the table's columns (``rate``: with the
    fewest engines; ``priced``: with the costs)."""
    out = [("kv", "KV tokens", "{:,}"), ("never", "never fit", "{}"), ("binds", "binds", "{}"),
           ("goodput", "goodput req/s", "{:.4g}"), ("band", "[lo, hi]", "{}"),
           ("per_gpu", "per GPU", "{:.4g}")]
    if rate:
        out += [("k_min", "K_min", "{}"), ("gpus", "GPUs", "{}")]
    if priced:
        out += [("per_hour", "$/h", "{:.2f}"), ("per_m_out", "$/M out", "{:.3f}")]
    return out + [("verdict", "SLO", "{}"), ("wall", "wall s", "{:.1f}")]
