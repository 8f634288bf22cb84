"""Size laws: how many prefill or decode tokens a request brings.

A size law draws whole token counts from a seeded :class:`numpy.random.Generator`
with ``sample(rng, n)``; ``mean`` is the law's exact mean where it has a closed
form (used by capacity figures and by the tests).  The laws:

* :class:`Fixed` ``(value)``: always ``value``;
* :class:`UniformInt` ``(low, high)``: uniform on the integers ``low .. high - 1``
  (half-open, as docs/model.md §9.6 writes ``[1500, 2500)``);
* :class:`PoissonSize` ``(mean)``: Poisson counts;
* :class:`Geometric` ``(mean)``: geometric on ``1, 2, ...`` (the discrete
  exponential, a high-variance law), ``mean >= 1``;
* :class:`LogNormal` ``(mean, cv)``: a lognormal with mean ``mean`` and
  coefficient of variation ``cv`` (standard deviation / mean), rounded to the
  nearest integer.  With ``s2 = ln(1 + cv**2)`` the underlying normal has
  ``sigma = sqrt(s2)`` and ``mu = ln(mean) - s2 / 2``;
* :class:`Mixture` ``([(weight, law), ...])``: each draw picks a law with
  probability proportional to its weight (e.g. 20% long prompts);
* :class:`Empirical` ``(values)``: resampled uniformly, with replacement, from
  observed counts (a trace column).

``draw(rng)`` is one draw as a plain ``int`` (for job code that draws a size
at a time); ``variance`` is the law's variance and ``survival(x)`` = P(draw > x),
which give :func:`llmqueue.models.chunks.mean_chunks` and the expected memory area
of docs/model.md §6.6.
:func:`parse_size` reads the command line's text forms (``N``, ``uniform:LO:HI``, ...).
A decode law that draws 0 gives 1 in a workload (a request has ``vd >= 1``):
:func:`decode_sizes` applies that rule, for :func:`llmqueue.workload.compose`
and every other stream.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from llmqueue.common import files, validation


class SizeLaw:
    """Base class: a law of whole token counts."""

    mean: float

    @property
    def variance(self) -> float:
        """The law's variance (tokens^2)."""
        raise NotImplementedError(f"{type(self).__name__} has no variance")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` independent draws as an int64 array."""
        raise NotImplementedError

    def draw(self, rng: np.random.Generator) -> int:
        """One draw as a plain ``int``."""
        return int(self.sample(rng, 1)[0])

    def zero_probability(self) -> Optional[float]:
        """The probability of drawing 0 (``None`` where unknown)."""
        return None

    def survival(self, x: int) -> float:
        """``P(draw > x)`` for a whole ``x >= 0``."""
        raise NotImplementedError(f"{type(self).__name__} has no survival function")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class Fixed(SizeLaw):
    """Always ``value`` tokens."""

    def __init__(self, value: int) -> None:
        self.value = validation.token_count("value", value)
        self.mean = float(value)

    @property
    def variance(self) -> float:
        """0."""
        return 0.0

    def survival(self, x: int) -> float:
        """1 below ``value``, else 0."""
        return float(self.value > x)

    def zero_probability(self) -> float:
        """1 for a fixed size of 0, else 0."""
        return float(self.value == 0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` copies of ``value``."""
        return np.full(n, self.value, dtype=np.int64)


class UniformInt(SizeLaw):
    """Uniform on the integers ``low, low + 1, ..., high - 1``."""

    def __init__(self, low: int, high: int) -> None:
        validation.token_count("low", low)
        validation.token_count("high", high - 1)  # its largest size
        if high <= low:
            raise ValueError(f"high must be an integer > low={low} (the range is "
                             f"[low, high)), got {high!r}")
        self.low, self.high = low, high
        self.mean = (low + high - 1) / 2

    @property
    def variance(self) -> float:
        """``((high - low)^2 - 1) / 12``."""
        return ((self.high - self.low) ** 2 - 1) / 12

    def survival(self, x: int) -> float:
        """The share of ``low .. high - 1`` above ``x``."""
        return min(max(self.high - 1 - x, 0), self.high - self.low) / (self.high - self.low)

    def zero_probability(self) -> float:
        """``1 / (high - low)`` when 0 is in the range."""
        return 1.0 / (self.high - self.low) if self.low == 0 else 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` uniform integers in ``[low, high)``."""
        return rng.integers(self.low, self.high, n, dtype=np.int64)


class PoissonSize(SizeLaw):
    """Poisson counts of the given mean."""

    def __init__(self, mean: float) -> None:
        self.mean = validation.positive_number("mean", mean)

    @property
    def variance(self) -> float:
        """The mean."""
        return self.mean

    def zero_probability(self) -> float:
        """``exp(-mean)``."""
        return math.exp(-self.mean)

    def survival(self, x: int) -> float:
        """``1 - sum over k <= x of exp(-mean) mean^k / k!`` (the terms more than
        12 standard deviations below the mean, under 1e-30 in all, left out)."""
        log_mean = math.log(self.mean)
        start = max(0, int(self.mean - 12 * math.sqrt(self.mean)) - 10)
        cdf = sum(math.exp(k * log_mean - self.mean - math.lgamma(k + 1))
                  for k in range(start, x + 1))
        return max(0.0, 1.0 - cdf)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` Poisson draws."""
        return rng.poisson(self.mean, n).astype(np.int64)


class Geometric(SizeLaw):
    """Geometric counts on ``1, 2, ...`` with mean ``mean`` (success probability
    ``1 / mean``): the discrete exponential, a high-variance size law."""

    def __init__(self, mean: float) -> None:
        if not 1 <= validation.positive_number("mean", mean) <= validation.MAX_TOKENS:
            raise ValueError(f"mean must be a number from 1 to {validation.MAX_TOKENS} "
                             f"(geometric on 1, 2, ...), got {mean!r}")
        self.mean = float(mean)

    @property
    def variance(self) -> float:
        """``mean (mean - 1)``: ``(1 - p) / p^2`` with ``p = 1 / mean``."""
        return self.mean * (self.mean - 1)

    def zero_probability(self) -> float:
        """Never: geometric counts start at 1."""
        return 0.0

    def survival(self, x: int) -> float:
        """``(1 - 1/mean)^x``."""
        return (1.0 - 1.0 / self.mean) ** max(x, 0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` geometric draws."""
        return rng.geometric(1.0 / self.mean, n).astype(np.int64)


class LogNormal(SizeLaw):
    """A lognormal of mean ``mean`` and coefficient of variation ``cv``, rounded
    to the nearest integer (the rounding moves the mean by far less than a token
    for means of tens of tokens or more)."""

    def __init__(self, mean: float, cv: float) -> None:
        self.mean = validation.positive_number("mean", mean)
        self.cv = validation.positive_number("cv", cv)
        if mean > validation.MAX_TOKENS or cv > 1e3:
            raise ValueError(f"lognormal sizes need mean <= {validation.MAX_TOKENS} tokens and "
                             f"cv <= 1000; got mean={mean!r}, cv={cv!r}")
        s2 = math.log1p(cv * cv)
        self._sigma = math.sqrt(s2)
        self._mu = math.log(mean) - s2 / 2

    @property
    def variance(self) -> float:
        """``(cv mean)^2`` (before rounding)."""
        return (self.cv * self.mean) ** 2

    def survival(self, x: int) -> float:
        """The chance the lognormal reaches ``x + 0.5`` (rounds above ``x``)."""
        z = (math.log(x + 0.5) - self._mu) / (self._sigma * math.sqrt(2))
        return 0.5 * math.erfc(z)

    def zero_probability(self) -> float:
        """The chance the lognormal falls below 0.5 (rounded to 0)."""
        return 0.5 * math.erfc(-(math.log(0.5) - self._mu) / (self._sigma * math.sqrt(2)))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` rounded lognormal draws."""
        draws = np.minimum(rng.lognormal(self._mu, self._sigma, n), validation.MAX_TOKENS)
        return np.rint(draws).astype(np.int64)


class Mixture(SizeLaw):
    """Each draw comes from one of several laws, picked with probability
    proportional to its weight."""

    def __init__(self, parts: Sequence[Tuple[float, SizeLaw]]) -> None:
        if not isinstance(parts, (list, tuple)) or not parts:
            raise ValueError(f"parts must list at least one (weight, law) pair, got "
                             f"{validation.shown(parts)}")
        for i, part in enumerate(parts):
            if not isinstance(part, (list, tuple)) or len(part) != 2:
                raise ValueError(f"parts[{i}] must be a (weight, law) pair, got "
                                 f"{validation.shown(part)}")
            weight, law = part
            validation.positive_number(f"parts[{i}] weight", weight)
            if not isinstance(law, SizeLaw):
                raise ValueError(f"parts[{i}] law must be a size law, got {law!r}")
        total = sum(w for w, _ in parts)
        self.weights = np.array([w / total for w, _ in parts])
        self.laws = [law for _, law in parts]
        self.mean = float(sum(w * law.mean for w, law in zip(self.weights, self.laws)))

    @property
    def variance(self) -> float:
        """``sum w (variance + mean^2) - mean^2`` over the parts."""
        second = sum(w * (law.variance + law.mean ** 2) for w, law in zip(self.weights,
                                                                          self.laws))
        return float(second - self.mean ** 2)

    def survival(self, x: int) -> float:
        """The weighted survival of the parts."""
        return float(sum(w * law.survival(x) for w, law in zip(self.weights, self.laws)))

    def zero_probability(self) -> Optional[float]:
        """The weighted chances of the parts (``None`` if one is unknown)."""
        parts = [law.zero_probability() for law in self.laws]
        known = [p for p in parts if p is not None]
        return None if len(known) < len(parts) else float(np.dot(self.weights, known))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Pick a law per draw, then draw from each law for its picks."""
        pick = rng.choice(len(self.laws), size=n, p=self.weights)
        out = np.empty(n, dtype=np.int64)
        for i, law in enumerate(self.laws):
            where = np.flatnonzero(pick == i)
            out[where] = law.sample(rng, len(where))
        return out


class Empirical(SizeLaw):
    """Resampled uniformly, with replacement, from observed counts."""

    def __init__(self, values: Union[Sequence[int], np.ndarray]) -> None:
        data = np.asarray(values)
        if data.ndim != 1 or data.size == 0:
            raise ValueError(f"values must be a non-empty list of token counts, got "
                             f"{validation.shown(values)}")
        if not np.issubdtype(data.dtype, np.integer):
            raise ValueError(f"values must be whole token counts (integers), got {data.dtype} "
                             f"values such as {validation.shown(data[:1].tolist()[0])}")
        if data.min() < 0 or data.max() > validation.MAX_TOKENS:
            raise ValueError(f"values must be whole token counts >= 0 and at most "
                             f"{validation.MAX_TOKENS}, got values from {int(data.min())} to "
                             f"{int(data.max())}")
        self._values = data.astype(np.int64)
        self.mean = float(self._values.mean())

    @property
    def values(self) -> np.ndarray:
        """The observed counts (int64), not to be changed."""
        return self._values

    @property
    def variance(self) -> float:
        """The observed counts' variance."""
        return float(self._values.var())

    def survival(self, x: int) -> float:
        """The share of observed counts above ``x``."""
        return float(np.mean(self._values > x))

    def zero_probability(self) -> float:
        """The share of zeros among the observed counts."""
        return float(np.mean(self._values == 0))

    def __repr__(self) -> str:
        return f"Empirical({self._values.size} values, mean={self.mean:.1f})"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws with replacement."""
        return self._values[rng.integers(0, self._values.size, n)]


SizeLike = Union[int, SizeLaw]


def as_law(name: str, law: SizeLike) -> SizeLaw:
    """A size law from a law or a plain integer (a :class:`Fixed` size)."""
    if isinstance(law, SizeLaw):
        return law
    validation.nonnegative_int(name, law)
    return Fixed(law)


def decode_sizes(law: SizeLaw, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` decode sizes from ``law``: a draw of 0 gives 1 (a request has
    ``vd >= 1``)."""
    return np.maximum(law.sample(rng, n), 1)


def decode_mean(law: SizeLaw) -> Optional[float]:
    """The mean of :func:`decode_sizes` draws: ``E[max(X, 1)] = mean + P(X = 0)``
    (``None`` where the law's chance of 0 is unknown)."""
    zero = law.zero_probability()
    return None if zero is None else law.mean + zero


def decode_variance(law: SizeLaw) -> float:
    """The variance of :func:`decode_sizes` draws (draws of 0 counted as 1):
    ``E[max(X, 1)^2] - E[max(X, 1)]^2`` with ``E[max(X, 1)^2] = E[X^2] + P(X = 0)``.
    A law whose chance of 0 is unknown is a ValueError."""
    zero = law.zero_probability()
    if zero is None:
        raise ValueError(f"decode law {law!r} does not say how often it draws 0; give a "
                         f"law that does (Fixed, UniformInt, Geometric, ...)")
    mean = law.mean + zero
    return law.variance + law.mean ** 2 + zero - mean * mean


#: The text forms of a size law, for messages and help.
SIZE_FORMS = "N, uniform:LO:HI, geometric:MEAN, lognormal:MEAN:CV or empirical:FILE"


def parse_size(name: str, text: object) -> SizeLaw:
    """A size law from its text: ``N`` (fixed), ``uniform:LO:HI`` (both ends
    included), ``geometric:MEAN``, ``lognormal:MEAN:CV``, ``empirical:FILE``
    (one count per line).  ``name`` names the parameter in errors, which are
    one-line ValueErrors giving the allowed forms."""
    text = str(text).strip()
    kind, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    if not rest and kind.replace("_", "").isdigit():  # (isdigit: "²" too, refused here)
        return Fixed(validation.token_text(name, kind, f", or one of {SIZE_FORMS}"))
    try:
        if kind == "uniform" and len(parts) == 2:
            if not all(part.strip().isascii() and part.strip().isdigit() for part in parts):
                raise ValueError(f"LO and HI must be whole numbers of tokens, got {rest}")
            low, high = int(parts[0]), int(parts[1])
            if high < low:
                raise ValueError(f"HI must be >= LO, got {low}:{high}")
            return UniformInt(low, high + 1)
        if kind == "geometric" and len(parts) == 1:
            return Geometric(float(parts[0]))
        if kind == "lognormal" and len(parts) == 2:
            return LogNormal(float(parts[0]), float(parts[1]))
        if kind == "empirical" and rest:
            with files.open_text_input(rest, name) as handle:
                return Empirical([int(line) for line in handle if line.strip()])
    except (ValueError, OSError) as exc:
        raise ValueError(f"{name} {validation.shown(text)}: {' '.join(str(exc).split())} "
                         f"(allowed: {SIZE_FORMS})") from None
    raise ValueError(f"{name} must be {SIZE_FORMS}; got {validation.shown(text)}")
