"""Whether a plan's requests fit its engine's KV cache, said once before any
simulation (:func:`diagnose`).

* :class:`Memory`: how ``tp`` GPUs' memory is spent, by the arithmetic of
  :func:`~llmqueue.hardware.memory.kv_capacity` (:func:`memory_of`): the
  weights (per GPU), what they leave, the activations and reserve, and the KV
  pool in bytes and tokens;
* :class:`Fit`: the pool's tokens, the largest request that can ever fit
  (``vp + vd`` tokens, :meth:`~llmqueue.engine.kv.KV.fits_ever`), and the
  share of the workload's requests that never can (:func:`never_share`).  An
  engine rejects those on arrival (docs/model.md §6.1) and a plan counts them
  as misses, so ``1 - share`` bounds the attainment at every rate; a plan's
  replications do not submit them (they are decided at once).

The share is exact for fixed sizes and for observed sizes (an empirical law,
:meth:`~llmqueue.planning.spec.Traffic.samples`' pairs); otherwise it is the
sum over the prompt's sizes of ``P(vp = k) P(vd > F - k)`` from the size
laws' survival functions (exact up to :data:`EPS`); laws without a survival
function, or whose sum would take more than :data:`MAX_TERMS` terms, are
estimated from a seeded sample of :data:`DRAWS` requests.  :attr:`Fit.method`
says which.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from llmqueue.hardware.latency import precision_of
from llmqueue.hardware.memory import GiB, RESERVE_GIB, kv_capacity, kv_share
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.precision import precision as find_precision
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.hardware.specs import model as find_model
from llmqueue.models.sizes import (Empirical, Fixed, Geometric, Mixture, SizeLaw, SizeLike,
                                   UniformInt, as_law, decode_sizes)
from llmqueue.planning.groups import Shifted
from llmqueue.planning.spec import EngineSpec, Traffic
from llmqueue.theory.bounds import Bounds

#: The survival sum stops where the prompt law has less than this left (the
#: share is then exact to within it).
EPS = 1e-12
#: Most prompt sizes the survival sum adds up; beyond, a sample.
MAX_TERMS = 200_000
#: Requests of the sample that estimates the share when the laws give no sum.
DRAWS = 100_000
#: :func:`~llmqueue.hardware.memory.kv_capacity`'s activations per GPU (GiB).
ACTIVATION_GIB = 5.5
#: How each method is said.
EXACT, SURVIVAL, OBSERVED = "exact: fixed sizes", "from the size laws' survival functions", \
    "exact: the observed sizes"
#: How each of :data:`~llmqueue.hardware.memory.SHARES` is said.
SHARE_TEXT = {"total": "of all memory (vLLM's gpu_memory_utilization)",
              "free": "of the memory left free (TensorRT-LLM's kv_cache_free_gpu_mem_fraction)"}


class NeverFitWarning(UserWarning):
    """Some of a plan's requests can never fit its engine's KV cache (said once
    per plan, in place of the engine's warning in every replication)."""


@dataclass(frozen=True)
class Memory:
    """The memory of ``tp`` GPUs ``gpu`` serving ``model`` (bytes), as
    :func:`~llmqueue.hardware.memory.kv_capacity` spends it: every weight
    (``weights``, split evenly over the GPUs), ``activations`` per GPU,
    ``reserve`` in all, and a share ``share`` of the whole memory
    (``of="total"``) or of what is left free (``of="free"``) for the KV pool
    of ``pool`` bytes: ``tokens`` tokens of ``kappa`` bytes."""

    gpu: str
    model: str
    tp: int
    gpu_memory: float
    weights: float
    activations: float
    reserve: float
    share: float
    of: str
    pool: float
    kappa: float
    tokens: int

    @property
    def weights_per_gpu(self) -> float:
        """The weights each GPU holds (bytes)."""
        return self.weights / self.tp

    @property
    def left_per_gpu(self) -> float:
        """The memory the weights leave on each GPU (bytes)."""
        return self.gpu_memory - self.weights_per_gpu

    def as_dict(self) -> Dict[str, Any]:
        """The fields and the per-GPU figures, JSON-ready."""
        return {**asdict(self), "weights_per_gpu": self.weights_per_gpu,
                "left_per_gpu": self.left_per_gpu}

    def statement(self) -> str:
        """One sentence: what the weights take and leave, and the KV pool."""
        return (f"{self.model} on {self.tp} x {self.gpu} ({self.gpu_memory / GiB:.4g} GiB "
                f"each): weights {self.weights_per_gpu / GiB:.4g} GiB per GPU leave "
                f"{self.left_per_gpu / GiB:.4g} GiB; after activations "
                f"({self.activations / GiB:.3g} GiB per GPU), the reserve "
                f"({self.reserve / GiB:.3g} GiB) and a share {self.share:g} "
                f"{SHARE_TEXT[self.of]}, the KV pool is {self.pool / GiB:.4g} GiB: "
                f"{self.tokens:,} tokens of {self.kappa / 1024:.4g} KiB")


def memory_of(gpu: Union[str, GPU], model: Union[str, ModelShape], tp: int = 1, *,
              fraction: Optional[float] = None, of: str = "total",
              precision: Union[str, Precision, None] = None) -> Memory:
    """How :func:`~llmqueue.hardware.memory.kv_capacity` spends the memory of
    ``tp`` GPUs ``gpu`` on ``model`` (its defaults: 0.9 of all memory, 5.5 GiB
    of activations per GPU, the reserve of :data:`RESERVE_GIB`).  A model that
    leaves no KV memory is ``kv_capacity``'s ValueError ("model does not fit")."""
    tokens = kv_capacity(gpu, model, tp, fraction=fraction, of=of, precision=precision)
    g, m, p = find_gpu(gpu), find_model(model), find_precision(precision)
    share = 0.9 if fraction is None else float(fraction)
    weights = p.weight_memory(m)
    kappa = p.model(m).kv_bytes_per_token()
    activations = ACTIVATION_GIB * GiB
    reserve = RESERVE_GIB[tp == 1] * GiB
    usable = share * tp * g.memory if of == "total" else tp * g.memory
    free = usable - weights - tp * activations - reserve
    pool = free if of == "total" else share * free
    return Memory(g.name, m.name, tp, float(g.memory), float(weights), activations, reserve,
                  share, of, float(pool), float(kappa), tokens)


def memory_of_engine(engine: EngineSpec) -> Optional[Memory]:
    """The :class:`Memory` behind ``engine``'s KV cache when its latency model
    is a roofline whose capacity the cache holds (``kv=auto``); else None."""
    latency, kv = engine.latency, engine.kv
    if kv is None or getattr(latency, "kv_capacity", None) != kv.tokens:
        return None
    try:
        fraction, of = getattr(latency, "_share", (None, "total"))
        return memory_of(latency.gpu, latency.model, latency.tp,  # type: ignore[attr-defined]
                         fraction=fraction, of=of,
                         precision=getattr(latency, "precision", None))
    except (AttributeError, TypeError, ValueError):
        return None


def memory_of_settings(p: Mapping[str, Any]) -> Optional[Memory]:
    """The :class:`Memory` of ``run single``'s parameters when ``kv=auto`` takes
    the KV pool from the GPUs (their share and precision keys), else None."""
    if p.get("kv") != "auto":
        return None
    fraction, of = kv_share(p.get("kv_cache_free_gpu_mem_fraction"),
                            p.get("gpu_memory_utilization"))
    return memory_of(p["gpu"], p["model"], p.get("tp", 1), fraction=fraction, of=of,
                     precision=precision_of(p.get("precision", "bf16"),
                                            p.get("attention_precision", "bf16"),
                                            p.get("kv_cache_dtype", "auto")))


def _survival(law: SizeLaw, xs: Any) -> np.ndarray:
    """``P(draw > x)`` for each whole ``x`` of ``xs`` (1 below 0); a law
    without a survival function raises NotImplementedError."""
    x = np.asarray(xs, dtype=np.int64)
    out = np.ones(x.shape)
    pos = x >= 0
    if isinstance(law, Fixed):
        out[pos] = law.value > x[pos]
    elif isinstance(law, Geometric):
        out[pos] = (1.0 - 1.0 / law.mean) ** x[pos]
    elif isinstance(law, UniformInt):
        width = law.high - law.low
        out[pos] = np.clip(law.high - 1 - x[pos], 0, width) / width
    elif isinstance(law, Empirical):
        values = np.sort(law.values)
        out[pos] = 1.0 - np.searchsorted(values, x[pos], side="right") / values.size
    elif isinstance(law, Shifted):
        return _survival(law.law, x - law.by)
    elif isinstance(law, Mixture):
        return sum((w * _survival(part, x) for w, part in zip(law.weights, law.laws)),
                   np.zeros(x.shape))
    else:
        out[pos] = [law.survival(int(v)) for v in x[pos].tolist()]
    return out


def _decode_survival(law: SizeLaw, xs: Any) -> np.ndarray:
    """``P(max(vd, 1) > x)`` (a request has at least one output token)."""
    x = np.asarray(xs, dtype=np.int64)
    return np.where(x < 1, 1.0, _survival(law, np.maximum(x, 1)))


class _Sample(Exception):
    """The laws give no sum within :data:`MAX_TERMS`: sample."""


def _sum(prompt: SizeLaw, decode: SizeLaw, fit: int) -> float:
    """``P(vp + max(vd, 1) > fit)`` from the survival functions."""
    if isinstance(prompt, Empirical):  # exact: each observed prompt
        values, counts = np.unique(prompt.values, return_counts=True)
        return float(np.dot(counts, _decode_survival(decode, fit - values)) / counts.sum())
    if isinstance(decode, Empirical):
        values, counts = np.unique(np.maximum(decode.values, 1), return_counts=True)
        return float(np.dot(counts, _survival(prompt, fit - values)) / counts.sum())
    half = fit // 2  # vp <= half and vd <= fit - half fit: the rest bounds the share
    if _survival(prompt, [half])[0] + _decode_survival(decode, [fit - half])[0] <= EPS:
        return 0.0
    terms = 1024
    while terms < fit and _survival(prompt, [terms - 1])[0] > EPS:
        terms *= 2
    terms = min(terms, fit)
    if terms > MAX_TERMS:
        raise _Sample
    before = _survival(prompt, np.arange(-1, terms))  # P(vp > k - 1), k = 0 .. terms
    pmf = np.clip(before[:-1] - before[1:], 0.0, None)  # P(vp = k), k < terms
    # prompts of `terms` tokens or more (less than EPS unless terms = fit) never fit
    return float(before[-1] + np.dot(pmf, _decode_survival(decode, fit - np.arange(terms))))


def never_share(prefill: SizeLike, decode: SizeLike, fit_tokens: int,
                seed: int = 0) -> Tuple[float, str]:
    """``(share, method)``: the share of requests of prompt law ``prefill`` and
    output law ``decode`` (draws of 0 count as 1) with ``vp + vd > fit_tokens``
    (the module docstring says how, and ``method`` which way)."""
    prompt, out = as_law("prefill", prefill), as_law("decode", decode)
    if fit_tokens < 1:
        return 1.0, EXACT
    if isinstance(prompt, Fixed) and isinstance(out, Fixed):
        return float(prompt.value + max(out.value, 1) > fit_tokens), EXACT
    try:
        share = _sum(prompt, out, fit_tokens)
        method = OBSERVED if isinstance(prompt, Empirical) or isinstance(out, Empirical) \
            else SURVIVAL
        return min(max(share, 0.0), 1.0), method
    except (NotImplementedError, _Sample):
        rp, rd = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
        sizes = prompt.sample(rp, DRAWS) + decode_sizes(out, rd, DRAWS)
        return float(np.mean(sizes > fit_tokens)), \
            f"estimated from a sample of {DRAWS:,} requests, seed {seed}"


@dataclass(frozen=True)
class Fit:
    """How a workload fits a KV cache: the pool's ``kv_tokens``, the largest
    request that can ever fit (``vp + vd <= fit_tokens``), the share ``never``
    of requests that never can and how it was found (``method``), the mean
    request ``mean_tokens`` (``m_p + m_d``), and the :class:`Memory` behind the
    pool when it comes from a GPU (``kv=auto``)."""

    kv_tokens: int
    fit_tokens: int
    never: float
    method: str
    mean_tokens: float
    memory: Optional[Memory] = None

    @property
    def none_fit(self) -> bool:
        """Whether no request can ever fit (every one is a miss)."""
        return self.never >= 1.0

    @property
    def exact(self) -> bool:
        """Whether ``never`` is exact (or from the survival functions, to within
        :data:`EPS`), not estimated from a sample."""
        return self.method in (EXACT, SURVIVAL, OBSERVED)

    @property
    def ceiling(self) -> float:
        """The largest attainment any rate can reach, ``1 - never``."""
        return 1.0 - self.never

    def share_text(self) -> str:
        """The share as a percentage."""
        if self.never in (0.0, 1.0):
            return f"{100 * self.never:.0f}%"
        return f"{100 * self.never:.3g}%"

    def statement(self) -> str:
        """The diagnosis in one line."""
        head = f"the KV cache holds {self.kv_tokens:,} tokens" if self.memory is None \
            else self.memory.statement()
        largest = (f"{head}; the largest request that fits has vp + vd = {self.fit_tokens:,} "
                   f"tokens (the mean request {self.mean_tokens:,.0f})")
        if self.never <= 0.0:
            return f"{largest}; every request fits."
        if self.none_fit:
            return (f"{largest}; no request of this workload can ever fit ({self.method}): "
                    "all are rejected on arrival and count as misses.")
        return (f"{largest}; {self.share_text()} of requests can never fit the KV cache "
                f"({self.method}): they are rejected on arrival and count as misses, so "
                f"attainment is at most {self.ceiling:.4g} at any rate.")

    def as_dict(self) -> Dict[str, Any]:
        """JSON-ready."""
        return {"kv_tokens": self.kv_tokens, "fit_tokens": self.fit_tokens,
                "never_share": self.never, "method": self.method,
                "mean_tokens": self.mean_tokens, "ceiling": self.ceiling,
                "memory": None if self.memory is None else self.memory.as_dict(),
                "statement": self.statement()}


def diagnose(workload: Traffic, engine: EngineSpec, memory: Optional[Memory] = None,
             seed: int = 0) -> Optional[Fit]:
    """The :class:`Fit` of ``workload`` on ``engine``'s KV cache (None without
    one), with ``memory`` (default: :func:`memory_of_engine`).  Request classes
    add their shares' worth; observed pairs are counted exactly; with
    ``first_token="prefill"`` a request holds one output token less (a prompt
    of 0 tokens aside).  ``seed`` seeds the sample where one is needed."""
    kv = engine.kv
    if kv is None:
        return None
    fit = kv.fit_tokens + (1 if engine.first_token == "prefill" else 0)
    if workload.pairs is not None:
        sizes = np.array(workload.pairs[0]) + np.maximum(np.array(workload.pairs[1]), 1)
        never, method = float(np.mean(sizes > fit)), OBSERVED
    else:
        never = 0.0
        found = []
        for _, share, alone in workload.class_traffic():
            part, how = never_share(alone.prefill_law, alone.decode_law, fit, seed)
            never += share * part
            found.append(how)
        method = next((m for m in found if m not in (EXACT, SURVIVAL, OBSERVED)), None) or \
            (SURVIVAL if SURVIVAL in found else OBSERVED if OBSERVED in found else EXACT)
    return Fit(kv.tokens, kv.fit_tokens, min(max(never, 0.0), 1.0), method,
               workload.mean_prefill + workload.mean_decode,
               memory_of_engine(engine) if memory is None else memory)


def warn(fit: Optional[Fit]) -> None:
    """Say once (a :class:`NeverFitWarning`; Python shows a repeated one once)
    that some requests can never fit, in place of the engine's warning in each
    replication."""
    if fit is not None and fit.never > 0:
        warnings.warn(fit.statement(), NeverFitWarning, stacklevel=2)


#: The rate bounds :func:`binding` compares: compute (the token budget per
#: iteration), the ``kmax`` slots, memory (the KV pool).
RATE_BOUNDS = ("lambda_tok", "lambda_slot", "lambda_kv")


def binding(bounds: Bounds) -> str:
    """Which rate bound is the smallest (``lambda_tok``, ``lambda_slot`` or
    ``lambda_kv``): what caps the rate an engine can serve."""
    return min((value, name) for name, value in
               ((name, getattr(bounds, name)) for name in RATE_BOUNDS) if value is not None)[1]


def memory_note(bounds: Bounds, fit: Optional[Fit]) -> Optional[str]:
    """A line saying the plan is driven by memory, when ``lambda_kv`` binds."""
    if bounds.lambda_kv is None or binding(bounds) != "lambda_kv":
        return None
    others = ", ".join(f"{name} = {getattr(bounds, name):.4g}" for name in RATE_BOUNDS[:2]
                       if getattr(bounds, name) is not None)
    pool = "" if fit is None else f" of {fit.kv_tokens:,} tokens"
    return (f"memory binds: lambda_kv = {bounds.lambda_kv:.4g} req/s is the smallest bound "
            f"({others}; {bounds.lambda_tok / bounds.lambda_kv:.3g}x below compute): the KV "
            f"pool{pool}, not compute, caps the rate (more memory per engine raises it: a "
            f"larger tp, an FP8 KV cache, a larger GPU)")
