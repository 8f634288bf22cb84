"""The workload keys of single-engine experiments (SPEC 9): ``vp``/``vd`` as
size laws, ``arrival=renewal|poisson|gamma:CV`` and ``initial=N``, and the
workload they give.

A size parameter keeps a plain integer as an ``int`` (so runs at fixed sizes,
their seeds and their numbers are those of before) and any other law as its
checked text (``uniform:10:20``), which sweeps hash and read again;
:func:`size_law` turns either into a :class:`~llmqueue.models.sizes.SizeLaw`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple, Union

from llmqueue.common import validation
from llmqueue.common.params import Param
from llmqueue.models.arrivals import ARRIVAL_FORMS, Renewal, arrival_law, parse_arrival
from llmqueue.models.sizes import SIZE_FORMS, Fixed, SizeLaw, decode_mean, parse_size
from llmqueue.models.workload import Workload, compose, poisson, renewal

SizeValue = Union[int, str]
"""A size parameter's value: a fixed size, or a size law's text."""


def read_size(name: str, text: str) -> SizeValue:
    """A size parameter from text: a plain integer as ``int``, any other law of
    SPEC 9 as its text once it parses (a one-line ValueError otherwise)."""
    law = parse_size(name, text)
    return law.value if isinstance(law, Fixed) else str(text).strip()


def size_law(name: str, value: Union[SizeValue, SizeLaw]) -> SizeLaw:
    """The size law of a size parameter's value (an integer is a fixed size)."""
    return value if isinstance(value, SizeLaw) else parse_size(name, value)


def mean_sizes(p: Mapping[str, Any]) -> Tuple[float, float]:
    """The mean prompt and output sizes of ``p["vp"]`` and ``p["vd"]`` (tokens;
    output draws of 0 count as 1), for capacity figures.  Fixed sizes are
    themselves (integers; an output of 0 tokens is an error)."""
    prefill, decode = size_law("vp", p["vp"]), size_law("vd", p["vd"])
    if isinstance(decode, Fixed):
        validation.positive_int("vd", decode.value)
    mean = decode_mean(decode)
    if mean is None:
        raise ValueError(f"vd: {decode!r} does not say how often it draws 0")
    return (prefill.value if isinstance(prefill, Fixed) else prefill.mean,
            decode.value if isinstance(decode, Fixed) else mean)


def size_param(default: int, help: str) -> Param:
    """A ``vp``/``vd`` parameter taking SPEC 9's size laws (``N`` keeps the
    fixed size of before)."""
    return Param("custom", default, f"{help}: a fixed count or a size law", reader=read_size,
                 forms=f"a size law: {SIZE_FORMS}")


def read_arrival(name: str, text: str) -> str:
    """An arrival parameter from text: ``renewal``, ``poisson`` or ``gamma:CV``."""
    parse_arrival(text, name)
    return str(text).strip()


#: ``arrival`` (its text values are those of before) and ``initial`` (added after
#: sweeps drew run seeds: quiet at its default).
WORKLOAD_PARAMS: Dict[str, Param] = {
    "arrival": Param("custom", "renewal", "arrival law (renewal: one every gap, even with "
                     "random sizes; gamma:CV: gamma gaps of that coefficient of variation)",
                     reader=read_arrival, forms=ARRIVAL_FORMS),
    "initial": Param("int", 0, "requests (drawn from the size laws) in the system at time 0",
                     low=0, quiet_default=True),
}


def workload_of(p: Mapping[str, Any], seed: int, *, rate: Optional[float] = None,
                gap: Optional[float] = None) -> Workload:
    """Requests by ``p["arrival"]`` (renewal when absent) at ``rate`` per second
    or one per ``gap`` seconds (give one), with sizes from ``p["vp"]`` and
    ``p["vd"]`` and ``p.get("initial", 0)`` of them at time 0, seeded by
    ``seed``.  Fixed sizes without a backlog keep the streams of before
    (:func:`~llmqueue.models.workload.renewal` and
    :func:`~llmqueue.models.workload.poisson`, exactly); otherwise
    :func:`~llmqueue.models.workload.compose` (renewal: deterministic gaps,
    random sizes)."""
    if (rate is None) == (gap is None):
        raise ValueError("give exactly one of rate and gap")
    arrival = p.get("arrival", "renewal")
    kind, _ = parse_arrival(arrival)
    per_second = validation.arrival_rate("rate", rate) if rate is not None else \
        1.0 / validation.gap_seconds("gap", gap)
    every = gap if gap is not None else 1.0 / per_second
    vp, vd, initial = p["vp"], p["vd"], p.get("initial", 0)
    if isinstance(vd, int):
        validation.token_count("vd", vd, minimum=1)  # a fixed size of 0 is an error
    if isinstance(vp, int) and isinstance(vd, int) and not initial and kind != "gamma":
        return renewal(every, vp, vd) if kind == "renewal" else \
            poisson(per_second, vp, vd, seed=seed)
    law = Renewal(every) if kind == "renewal" else arrival_law(arrival, per_second)
    return compose(law, size_law("vp", vp), size_law("vd", vd), seed=seed, initial=initial)
