"""Arrival laws: when requests arrive (seconds).

An arrival law yields increasing times from a seeded generator with
``times(rng)``.  ``rate`` is its mean arrival rate (per second) and ``count``
the number of times it can give (``None``: endless).

* :class:`Renewal` ``(gap)``: ``gap, 2*gap, 3*gap, ...`` (docs/model.md §2: the first one
  after one gap, not at 0);
* :class:`Poisson` ``(rate)``: exponential gaps of mean ``1/rate``;
* :class:`Gamma` ``(rate, cv)``: gamma gaps of mean ``1/rate`` and coefficient
  of variation ``cv`` (shape ``1/cv**2``); ``cv > 1`` is burstier than
  Poisson, ``cv < 1`` more regular, ``cv = 1`` is Poisson;
* :class:`TraceTimes` ``(times, rate=None)``: the times of a trace, optionally
  rescaled (every time multiplied by one factor) so that the mean rate becomes
  ``rate``.

:func:`parse_arrival` reads the command line's text forms (``renewal``, ``poisson``,
``gamma:CV``) and :func:`arrival_law` turns one into a law at a given rate.
"""

from __future__ import annotations

import itertools
from typing import Callable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from llmqueue.common import validation

BLOCK = 4096  # gaps drawn per call to the generator


class ArrivalLaw:
    """Base class: a law of arrival times."""

    rate: float
    count: Optional[int] = None

    def times(self, rng: np.random.Generator) -> Iterator[float]:
        """Arrival times in seconds, in increasing order."""
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def _cumulate(gaps: Callable[[int], np.ndarray]) -> Iterator[float]:
    """Running sums of blocks of gaps."""
    t = 0.0
    while True:
        block = np.cumsum(gaps(BLOCK)) + t
        t = float(block[-1])
        yield from block.tolist()


class Renewal(ArrivalLaw):
    """Arrivals at ``gap, 2*gap, 3*gap, ...``."""

    def __init__(self, gap: float) -> None:
        self.gap = validation.gap_seconds("gap", gap)
        self.rate = 1.0 / self.gap

    def times(self, rng: np.random.Generator) -> Iterator[float]:
        """``k * gap`` for k = 1, 2, ... (exact multiples, no accumulated error)."""
        return (k * self.gap for k in itertools.count(1))


class Poisson(ArrivalLaw):
    """Exponential gaps of mean ``1 / rate``."""

    def __init__(self, rate: float) -> None:
        self.rate = validation.arrival_rate("rate", rate)

    def times(self, rng: np.random.Generator) -> Iterator[float]:
        """Running sums of exponential gaps."""
        return _cumulate(lambda n: rng.exponential(1.0 / self.rate, n))


#: Coefficients of variation a gamma law takes: beyond them its shape under- or
#: overflows a float.
CV_RANGE = (1e-6, 1e6)


class Gamma(ArrivalLaw):
    """Gamma gaps of mean ``1 / rate`` and coefficient of variation ``cv``."""

    def __init__(self, rate: float, cv: float) -> None:
        self.rate = validation.arrival_rate("rate", rate)
        self.cv = validation.positive_number("cv", cv)
        if not CV_RANGE[0] <= self.cv <= CV_RANGE[1]:
            raise ValueError(f"cv must be a number from {CV_RANGE[0]:g} to {CV_RANGE[1]:g} "
                             f"(gamma gaps); got {cv!r}")
        self._shape = 1.0 / (self.cv * self.cv)
        self._scale = 1.0 / (self.rate * self._shape)

    def times(self, rng: np.random.Generator) -> Iterator[float]:
        """Running sums of gamma gaps."""
        return _cumulate(lambda n: rng.gamma(self._shape, self._scale, n))


class TraceTimes(ArrivalLaw):
    """The arrival times of a trace, optionally rescaled to a mean ``rate``.

    The observed rate is ``(n - 1) / (last - first)``: arrivals per second over
    the span the trace covers.  Rescaling multiplies every time by
    ``observed / rate``, which keeps the shape of the traffic (bursts, lulls)
    and changes only its speed.
    """

    def __init__(self, times: Union[Sequence[float], np.ndarray],
                 rate: Optional[float] = None) -> None:
        data = np.asarray(times, dtype=float)
        if data.ndim != 1 or data.size == 0:
            raise ValueError("times must be a non-empty list of arrival times in seconds")
        if not np.all(np.isfinite(data)) or data.min() < 0 or np.any(np.diff(data) < 0):
            raise ValueError("times must be finite, >= 0 and non-decreasing")
        span = float(data[-1] - data[0])
        self.observed_rate = (data.size - 1) / span if span > 0 else None
        self.count = int(data.size)
        if rate is None:
            self.rate = self.observed_rate if self.observed_rate is not None else float("inf")
            self._times = data
        else:
            validation.positive_number("rate", rate)
            if self.observed_rate is None:
                raise ValueError(f"rate cannot rescale a trace whose {data.size} arrivals "
                                 f"all fall at one instant; got rate={rate!r}")
            self.rate = float(rate)
            self._times = data * (self.observed_rate / self.rate)

    def __repr__(self) -> str:
        return f"TraceTimes({self.count} times, rate={self.rate:.4g}/s)"

    def times(self, rng: Optional[np.random.Generator]) -> Iterator[float]:
        """The (rescaled) trace times; ``rng`` is not used."""
        return iter(self._times.tolist())


#: The text forms of an arrival law, for messages and help.
ARRIVAL_FORMS = "renewal, poisson or gamma:CV"


def parse_arrival(text: object, name: str = "arrival") -> Tuple[str, Optional[float]]:
    """``(kind, cv)`` from an arrival law's text: ``("renewal", None)``,
    ``("poisson", None)`` or ``("gamma", CV)`` for ``gamma:CV`` (gamma gaps of
    coefficient of variation CV > 0).  Anything else is a one-line ValueError
    naming ``name`` and the allowed forms."""
    text = str(text).strip()
    if text in ("renewal", "poisson"):
        return text, None
    kind, _, cv = text.partition(":")
    if kind == "gamma" and cv:
        try:
            value = float(cv)
        except ValueError:
            value = float("nan")
        if value > 0 and value != float("inf"):
            return "gamma", value
    raise ValueError(f"{name} must be {ARRIVAL_FORMS} (CV a number > 0); got {text!r}")


def arrival_law(text: object, rate: float, name: str = "arrival") -> ArrivalLaw:
    """The law ``text`` names (:func:`parse_arrival`) at ``rate`` arrivals per
    second: :class:`Renewal` with gap ``1/rate``, :class:`Poisson` or :class:`Gamma`."""
    kind, cv = parse_arrival(text, name)
    if kind == "renewal":
        return Renewal(1.0 / validation.arrival_rate("rate", rate))
    if kind == "poisson":
        return Poisson(rate)
    assert cv is not None
    return Gamma(rate, cv)
