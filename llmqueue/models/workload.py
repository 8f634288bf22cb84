"""Where requests come from: arrival streams of ``(time, prefill, decode[, class])``.

A workload is an iterable of :class:`Arrival` in time order (seconds).  Its
``count`` is the number of requests it yields, or ``None`` for an endless
stream, which then needs a horizon.  :func:`compose` builds one from an
arrival law (:mod:`llmqueue.models.arrivals`), two size laws (:mod:`llmqueue.models.sizes`),
a count and a seed; :func:`renewal` and :func:`poisson` are its fixed-size
shorthands; :func:`llmqueue.models.traces.read_csv` replays a trace file.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Hashable, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

import numpy as np

from llmqueue.common import validation
from llmqueue.models.arrivals import BLOCK, ArrivalLaw, Poisson, Renewal
from llmqueue.models.sizes import SizeLike, as_law, decode_mean, decode_sizes


class Arrival(NamedTuple):
    """One request: arrival time (s), prefill tokens, decode tokens, class,
    and, for prefix caching (docs/model.md §8.1), the content ids of its prompt's hash
    blocks of ``hash_block`` tokens (``blocks``) and of the blocks that fill
    up while it decodes (``out_blocks``)."""

    time: float
    prefill: int
    decode: int
    klass: Hashable = None
    blocks: Optional[Tuple[Hashable, ...]] = None
    """One id per ``hash_block`` tokens of the prompt; equal ids, equal content."""
    out_blocks: Optional[Tuple[Hashable, ...]] = None
    """Ids of the blocks its decode tokens complete (sessions)."""
    hash_block: Optional[int] = None
    """Tokens per id (``H``): needed with ``blocks``."""


@dataclass(frozen=True, repr=False)
class Workload:
    """A replayable stream of arrivals: each iteration starts afresh.

    ``rate`` (requests/s), ``mean_prefill`` and ``mean_decode`` (tokens) are the
    stream's long-run figures where known (``None`` otherwise); the stability
    verdicts of a run compare it with Theorem 2 through them.
    """

    make: Callable[[], Iterator[Arrival]]
    """Starts the stream afresh."""
    count: Optional[int]
    """Arrivals in the stream (``None``: endless)."""
    description: str
    """One line saying what the stream is."""
    rate: Optional[float] = None
    mean_prefill: Optional[float] = None
    mean_decode: Optional[float] = None
    initial: int = 0
    """Requests at time 0 before the stream's own (``initial=N``), counted
    apart from ``rate`` when a run checks how many requests it would bring."""
    hash_block: Optional[int] = None
    """Tokens per content id (``H``, docs/model.md §8.1) when its arrivals carry ids
    (``blocks``), else ``None``."""

    def __iter__(self) -> Iterator[Arrival]:
        it = self.make()
        return it if self.count is None else itertools.islice(it, self.count)

    def __repr__(self) -> str:
        return f"Workload({self.description})"

    def without_ids(self) -> "Workload":
        """The same arrivals with no prefix-cache ids (docs/model.md §8.1), for an
        engine without a prefix cache (which refuses ids)."""
        def make() -> Iterator[Arrival]:
            for a in self.make():
                yield a._replace(blocks=None, out_blocks=None, hash_block=None) \
                    if len(a) > 4 else a
        return Workload(make, self.count, self.description + ", without prefix ids", self.rate,
                        self.mean_prefill, self.mean_decode, self.initial)


def compose(arrivals: ArrivalLaw, prefill: SizeLike, decode: SizeLike,
            count: Optional[int] = None, seed: int = 0, klass: Hashable = None,
            description: Optional[str] = None, initial: int = 0) -> Workload:
    """Requests whose times follow ``arrivals`` and whose sizes follow the
    ``prefill`` and ``decode`` laws (a plain integer is a fixed size).

    Same seed, same requests: ``numpy.random.SeedSequence(seed)`` gives the
    arrival, prefill and decode draws three independent streams, so changing
    one law never changes what the others draw.  The first ``n`` requests are
    the same whatever ``count`` is.  A decode law that draws 0 gives 1
    (a request has ``vd >= 1``).  ``count=None`` is an endless stream (which
    needs a horizon) unless the arrival law is finite (a trace).

    ``initial`` requests arrive at time 0, before the law's first arrival
    (the command line's ``initial=N``: a backlog at the start, for metastability and
    saturated runs); they draw the first sizes and count towards ``count``.

    Examples:
        >>> from llmqueue.models import Renewal, compose
        >>> [(a.time, a.prefill, a.decode) for a in compose(Renewal(0.5), 8, 4, count=4,
        ...                                                 initial=2)]
        [(0.0, 8, 4), (0.0, 8, 4), (0.5, 8, 4), (1.0, 8, 4)]
    """
    if not isinstance(arrivals, ArrivalLaw):
        raise ValueError(f"arrivals must be an arrival law (Renewal, Poisson, Gamma, "
                         f"TraceTimes), got {arrivals!r}")
    prefill_law, decode_law = as_law("prefill", prefill), as_law("decode", decode)
    validation.seed("seed", seed)
    if count is not None:
        validation.positive_int("count", count)
    validation.nonnegative_int("initial", initial)
    if arrivals.count is not None:
        finite = arrivals.count + initial
        count = finite if count is None else min(count, finite)

    def make() -> Iterator[Arrival]:
        streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)]
        times = itertools.chain(itertools.repeat(0.0, initial), arrivals.times(streams[0]))
        sizes: Dict[int, int] = {}  # one int object per size, however many requests share it
        while True:
            vp = prefill_law.sample(streams[1], BLOCK).tolist()
            vd = decode_sizes(decode_law, streams[2], BLOCK).tolist()
            for p, d, t in zip(vp, vd, times):
                yield Arrival(t, sizes.setdefault(p, p), sizes.setdefault(d, d), klass)

    text = description or (f"{arrivals!r}, prefill {prefill_law!r}, decode {decode_law!r}, "
                           f"seed={seed}" + (f", {initial} at t=0" if initial else ""))
    return Workload(make, count, text, rate=getattr(arrivals, "rate", None),
                    mean_prefill=prefill_law.mean, mean_decode=decode_mean(decode_law),
                    initial=initial)


def offline(count: int, prefill: SizeLike, decode: SizeLike, seed: int = 0) -> Workload:
    """An offline batch: ``count`` requests all present at time 0 and none after,
    sizes from the ``prefill`` and ``decode`` laws (a plain integer is a fixed
    size), drawn as :func:`compose` draws them with ``initial=count`` (so the
    same requests as the first ``count`` of ``run single --set initial=N``
    with that seed).  Run without a horizon, every request finishes and the
    run's ``duration`` is the batch's makespan; ``output_tokens_per_s`` is then
    the offline throughput engines publish.  Its ``rate`` is ``None``: a batch
    is no stream, so a run gives no stability verdict.

    Examples:
        >>> [(a.time, a.prefill, a.decode) for a in offline(3, 128, 16)]
        [(0.0, 128, 16), (0.0, 128, 16), (0.0, 128, 16)]
    """
    validation.positive_int("count", count)
    batch = compose(Renewal(1.0), prefill, decode, count=count, seed=seed, initial=count)
    text = (f"offline batch of {count} requests at t=0, prefill {as_law('prefill', prefill)!r}, "
            f"decode {as_law('decode', decode)!r}, seed={seed}")
    return dataclasses.replace(batch, rate=None, description=text)


def renewal(gap: float, prefill: int, decode: int, count: Optional[int] = None) -> Workload:
    """Arrivals at ``gap, 2*gap, 3*gap, ...`` (docs/model.md §2), each of fixed size.

    Examples:
        >>> [a.time for a in renewal(0.4675, 290, 990, count=3)]  # point C's gaps
        [0.4675, 0.935, 1.4025]
    """
    _check_sizes(prefill, decode)
    return compose(Renewal(gap), prefill, decode, count,
                   description=f"renewal gap={gap} s, {prefill}+{decode} tokens")


def poisson(rate: float, prefill: int, decode: int, seed: int = 0,
            count: Optional[int] = None) -> Workload:
    """Poisson arrivals at ``rate`` per second, each of fixed size, seeded.

    Examples:
        Same seed, same times; the times increase and the sizes are fixed.

        >>> w = poisson(2.0, 100, 50, seed=7, count=5)
        >>> times = [a.time for a in w]
        >>> times == [a.time for a in poisson(2.0, 100, 50, seed=7, count=5)]
        True
        >>> times == sorted(times) and times[0] > 0, {(a.prefill, a.decode) for a in w}
        (True, {(100, 50)})
    """
    _check_sizes(prefill, decode)
    return compose(Poisson(rate), prefill, decode, count, seed,
                   description=f"poisson rate={rate}/s, {prefill}+{decode} tokens, seed={seed}")


def _check_sizes(prefill: int, decode: int) -> None:
    validation.token_count("vp", prefill)
    validation.token_count("vd", decode, minimum=1)


def as_workload(arrivals: Any) -> Any:
    """``arrivals`` as a run reads them: a list or tuple of ``(time, prefill,
    decode[, class])`` rows becomes :func:`from_list` of them (checked, with
    its count); a :class:`Workload` or any other iterable of arrivals is
    returned as it is."""
    return from_list(arrivals) if isinstance(arrivals, (list, tuple)) else arrivals


def from_list(rows: Iterable[Sequence]) -> Workload:
    """Arrivals from ``(time, prefill, decode[, class])`` rows, checked and sorted
    by time (stable, so equal times keep their order)."""
    arrivals: List[Arrival] = []
    for i, row in enumerate(rows):
        if len(row) not in (3, 4):
            raise ValueError(f"request {i}: expected (arrival, prefill, decode[, class]), "
                             f"got {row!r}")
        time = validation.nonnegative_number(f"request {i} arrival", row[0])
        prefill = validation.nonnegative_int(f"request {i} prefill", row[1])
        decode = validation.positive_int(f"request {i} decode", row[2])
        arrivals.append(Arrival(time, prefill, decode, row[3] if len(row) == 4 else None))
    arrivals.sort(key=lambda a: a.time)
    n = len(arrivals)
    span = arrivals[-1].time - arrivals[0].time if arrivals else 0.0
    return Workload(lambda: iter(arrivals), n, f"{n} listed requests",
                    # n - 1 gaps between the first and last arrival, as for trace times
                    rate=(n - 1) / span if span > 0 else None,
                    mean_prefill=sum(a.prefill for a in arrivals) / n if n else None,
                    mean_decode=sum(a.decode for a in arrivals) / n if n else None)
