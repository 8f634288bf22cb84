"""What a capacity plan is about: the engine (:class:`EngineSpec`) and the
traffic (:class:`Traffic`) of SPEC 8.7 (the text forms of size and arrival laws
are read by :mod:`llmqueue.models.sizes` and :mod:`llmqueue.models.arrivals`).

``Traffic`` holds an arrival law **of unit rate** (Poisson, or gamma gaps of a
given coefficient of variation) and two size laws; :func:`arrivals` draws a
replication's requests from a seed so that the same seed gives the same unit-
rate gaps and the same sizes at every rate (common random numbers, SPEC 8.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.models.arrivals import parse_arrival
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.models.sizes import SizeLaw, SizeLike, as_law, decode_mean, decode_sizes


@dataclass(frozen=True)
class EngineSpec:
    """One engine: its policy (a scheduler name or a picklable policy object),
    token budget ``bmax`` per iteration, ``kmax`` slots (``None`` = unlimited),
    latency model (the paper's staircase by default) and chunked prefill."""

    policy: Any = "sarathi"
    bmax: int = 512
    kmax: Optional[int] = None
    latency: LatencyModel = Staircase()
    chunked: bool = True

    def __post_init__(self) -> None:
        validation.positive_int("bmax", self.bmax)
        validation.optional_positive_int("kmax", self.kmax)
        if not callable(getattr(self.latency, "batch_time", None)):
            raise ValueError(f"latency must be a latency model with batch_time(), "
                             f"got {self.latency!r}")
        if not isinstance(self.chunked, bool):
            raise ValueError(f"chunked must be True or False, got {self.chunked!r}")

    @property
    def tp(self) -> int:
        """GPUs per engine: the latency model's ``tp`` (1 when it has none)."""
        return int(getattr(self.latency, "tp", 1))

    @property
    def scheduler(self) -> str:
        """The policy's name, for reports."""
        return self.policy if isinstance(self.policy, str) else \
            str(getattr(self.policy, "name", self.policy))


@dataclass(frozen=True)
class Traffic:
    """Requests of unit arrival rate: Poisson when ``cv`` is ``None``, else gamma
    gaps with coefficient of variation ``cv``; prompt sizes from ``prefill`` and
    output sizes from ``decode`` (a law or a plain integer; decode draws of 0
    give 1).  ``plan`` scales the unit-rate gaps by ``1/rate``."""

    prefill: SizeLike
    decode: SizeLike
    cv: Optional[float] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefill", as_law("prefill", self.prefill))
        object.__setattr__(self, "decode", as_law("decode", self.decode))
        if self.cv is not None:
            validation.positive_number("cv", self.cv)

    @property
    def prefill_law(self) -> SizeLaw:
        """The prompt size law."""
        return as_law("prefill", self.prefill)

    @property
    def decode_law(self) -> SizeLaw:
        """The output size law."""
        return as_law("decode", self.decode)

    @property
    def mean_prefill(self) -> float:
        """``m_p``: the prompt law's mean (tokens)."""
        return float(self.prefill_law.mean)

    @property
    def mean_decode(self) -> float:
        """``m_d``: the mean output size, draws of 0 counted as 1 (tokens)."""
        m = decode_mean(self.decode_law)
        if m is None:  # chance of 0 unknown: a large sample's mean
            rng = np.random.default_rng(0)
            m = float(np.mean(decode_sizes(self.decode_law, rng, 10**5)))
        return float(m)

    def describe(self) -> str:
        """One line: arrivals and sizes."""
        law = "poisson" if self.cv is None else f"gamma cv={self.cv:g}"
        return f"{law}, prefill {self.prefill_law!r}, decode {self.decode_law!r}"


def arrivals(traffic: Traffic, n: int, seed: int, replication: int
             ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Replication ``replication``'s ``n`` requests: unit-rate arrival times,
    prompt sizes, output sizes, and a seed for a router.  Seeded by
    ``(seed, replication)`` only, never by the rate (common random numbers)."""
    streams = np.random.SeedSequence([seed, replication]).spawn(4)
    ra, rp, rd = (np.random.default_rng(s) for s in streams[:3])
    if traffic.cv is None:
        gaps = ra.exponential(1.0, n)
    else:
        shape = 1.0 / (traffic.cv * traffic.cv)
        gaps = ra.gamma(shape, 1.0 / shape, n)
    prompts = traffic.prefill_law.sample(rp, n)
    outputs = decode_sizes(traffic.decode_law, rd, n)
    router_seed = int(streams[3].generate_state(1)[0])
    return np.cumsum(gaps), prompts, outputs, router_seed


def arrival_cv(text: str) -> Optional[float]:
    """:class:`Traffic`'s ``cv`` from SPEC 9's arrival text
    (:func:`~llmqueue.models.arrivals.parse_arrival`): ``poisson`` gives ``None``,
    ``gamma:CV`` gives CV; ``renewal`` is refused (a plan replicates random
    arrivals)."""
    kind, cv = parse_arrival(text)
    if kind == "renewal":
        raise ValueError(f"arrival must be poisson or gamma:CV for plan (a renewal stream has "
                         f"no randomness to replicate), got {text!r}")
    return cv
