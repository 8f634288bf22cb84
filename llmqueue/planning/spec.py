"""What a capacity plan is about: the engine (:class:`EngineSpec`) and the
traffic (:class:`Traffic`) of docs/model.md §7.7 (the text forms of size and arrival laws
are read by :mod:`llmqueue.models.sizes` and :mod:`llmqueue.models.arrivals`).

``Traffic`` holds an arrival law **of unit rate** (Poisson, or gamma gaps of a
given coefficient of variation) and two size laws, or with :meth:`Traffic.mix`
request classes, each with its share and its own size laws (for per-class
SLOs); or with :meth:`Traffic.prefix_groups` prompts that open with one of a
few shared heads (prefix caching, :mod:`llmqueue.planning.groups`).
:func:`arrivals` draws a replication's requests from a seed so that the same
seed gives the same unit-rate gaps, classes, sizes and content ids
(:func:`prompt_ids`) at every rate (common random numbers, docs/model.md §7.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.engine.first_token import check_first_token
from llmqueue.engine.kv import KV
from llmqueue.models.arrivals import parse_arrival
from llmqueue.models.prefixes import HASH_BLOCK
from llmqueue.models.latency import LatencyModel, Staircase
from llmqueue.models.sizes import (Empirical, Mixture, SizeLaw, SizeLike, as_law, decode_mean,
                                   decode_sizes)
from llmqueue.planning.groups import Groups, groups_of


@dataclass(frozen=True)
class EngineSpec:
    """One engine: its policy (a scheduler name or a picklable policy object),
    token budget ``bmax`` per iteration, ``kmax`` slots (``None`` = unlimited),
    latency model (the paper's staircase by default), chunked prefill and KV
    cache (``None``: no memory limit; else docs/model.md §6's :class:`KV`, whose capacity
    adds the memory bound ``lambda_kv`` of docs/model.md §7.6)."""

    policy: Any = "sarathi"
    bmax: int = 512
    kmax: Optional[int] = None
    latency: LatencyModel = Staircase()
    chunked: bool = True
    kv: Optional[KV] = None
    first_token: str = "decode"
    """When a request's first token appears: ``decode`` (the paper's model) or
    ``prefill`` (with its prompt's last iteration, as vLLM and TensorRT-LLM do;
    one engine only)."""

    def __post_init__(self) -> None:
        check_first_token(self.first_token)
        validation.positive_int("bmax", self.bmax)
        validation.optional_positive_int("kmax", self.kmax)
        if not callable(getattr(self.latency, "batch_time", None)):
            raise ValueError(f"latency must be a latency model with batch_time(), "
                             f"got {self.latency!r}")
        if not isinstance(self.chunked, bool):
            raise ValueError(f"chunked must be True or False, got {self.chunked!r}")
        if self.kv is not None and not isinstance(self.kv, KV):
            raise ValueError(f"kv must be a KV(...) or None, got {self.kv!r}")

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
class TrafficClass:
    """One request class of a :meth:`Traffic.mix`: its name (the key of a
    per-class SLO), its share of the arrivals and its size laws."""

    name: Hashable
    share: float
    prefill: SizeLaw
    decode: SizeLaw


@dataclass(frozen=True)
class Traffic:
    """Requests of unit arrival rate: Poisson when ``cv`` is ``None``, else gamma
    gaps with coefficient of variation ``cv``; prompt sizes from ``prefill`` and
    output sizes from ``decode`` (a law or a plain integer; decode draws of 0
    give 1).  ``plan`` scales the unit-rate gaps by ``1/rate``.  ``classes``
    (built by :meth:`mix`) splits the requests into classes; ``prefill`` and
    ``decode`` are then the mixtures of the classes' laws.  ``groups`` (built
    by :meth:`prefix_groups`) gives the prompts shared heads and content ids;
    ``prefill`` is then the whole prompt's law."""

    prefill: SizeLike
    decode: SizeLike
    cv: Optional[float] = None
    classes: Optional[Tuple[TrafficClass, ...]] = None
    groups: Optional[Groups] = None
    pairs: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None
    """``(prompts, outputs)`` of observed requests (built by :meth:`samples`):
    each request is one of them, drawn uniformly with replacement, so a
    prompt keeps its own output."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefill", as_law("prefill", self.prefill))
        object.__setattr__(self, "decode", as_law("decode", self.decode))
        if self.cv is not None:
            validation.positive_number("cv", self.cv)
        if self.classes is not None and not (
                isinstance(self.classes, tuple) and self.classes
                and all(isinstance(c, TrafficClass) for c in self.classes)):
            raise ValueError(f"classes must be a non-empty tuple of TrafficClass (build it "
                             f"with Traffic.mix), got {self.classes!r}")
        if groups_of(self.prefill, self.groups) is not None and self.classes is not None:
            raise ValueError("a workload has either request classes or prefix groups, not both")

    @classmethod
    def prefix_groups(cls, groups: int, shared: int, suffix: SizeLike, decode: SizeLike,
                      zipf: float = 1.0, cv: Optional[float] = None,
                      hash_block: int = HASH_BLOCK) -> "Traffic":
        """Requests of ``groups`` prefix groups of Zipf popularity ``zipf``:
        each prompt is its group's ``shared`` tokens, then a ``suffix`` of its
        own (a size law or a fixed size), cut into content ids of
        ``hash_block`` tokens (a multiple of the KV block size); an engine
        with a prefix cache (``KV(..., prefix=True)``) reuses a group's head."""
        spec = Groups(groups, zipf, shared, as_law("suffix", suffix), hash_block)
        return cls(spec.prompt, decode, cv, None, spec)

    @classmethod
    def samples(cls, prompts: Sequence[int], outputs: Sequence[int],
                cv: Optional[float] = None) -> "Traffic":
        """Requests drawn from observed ``(prompt, output)`` pairs (a benchmark's
        dataset), uniformly with replacement; ``prefill`` and ``decode`` are
        their empirical laws (the bounds read those)."""
        p = tuple(int(x) for x in prompts)
        d = tuple(int(x) for x in outputs)
        if len(p) != len(d):
            raise ValueError(f"prompts and outputs must pair up; got {len(p)} prompts and "
                             f"{len(d)} outputs")
        return cls(Empirical(np.array(p, dtype=np.int64)),
                   Empirical(np.array(d, dtype=np.int64)), cv, pairs=(p, d))

    @classmethod
    def mix(cls, classes: Mapping[Hashable, Tuple[float, SizeLike, SizeLike]],
            cv: Optional[float] = None) -> "Traffic":
        """Traffic of several request classes: ``{name: (share, prefill, decode)}``;
        shares are weights (> 0, normalised), each class has its own size laws.
        Each request's class is drawn independently with these chances."""
        if not isinstance(classes, Mapping) or not classes:
            raise ValueError(f"classes must be a non-empty dict name -> (share, prefill, "
                             f"decode), got {classes!r}")
        parts: List[TrafficClass] = []
        for name, spec in classes.items():
            try:
                share, prefill, decode = spec
            except (TypeError, ValueError):
                raise ValueError(f"classes[{name!r}] must be (share, prefill, decode), "
                                 f"got {spec!r}") from None
            validation.positive_number(f"classes[{name!r}] share", share)
            parts.append(TrafficClass(name, float(share), as_law(f"classes[{name!r}] prefill",
                                                                 prefill),
                                      as_law(f"classes[{name!r}] decode", decode)))
        total = sum(c.share for c in parts)
        parts = [TrafficClass(c.name, c.share / total, c.prefill, c.decode) for c in parts]
        return cls(Mixture([(c.share, c.prefill) for c in parts]),
                   Mixture([(c.share, c.decode) for c in parts]), cv, tuple(parts))

    def class_traffic(self) -> List[Tuple[Hashable, float, "Traffic"]]:
        """``(name, share, traffic of that class alone)`` per class (one class
        named ``None`` of share 1 without classes)."""
        if self.classes is None:
            return [(None, 1.0, self)]
        return [(c.name, c.share, Traffic(c.prefill, c.decode, self.cv))
                for c in self.classes]

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
        if self.groups is not None:
            return f"{law}, {self.groups.describe()}, decode {self.decode_law!r}"
        if self.pairs is not None:
            return (f"{law}, {len(self.pairs[0]):,} (prompt, output) pairs sampled: prefill "
                    f"mean {self.mean_prefill:.1f}, decode mean {self.mean_decode:.1f}")
        if self.classes is not None:
            return law + ", " + "; ".join(
                f"class {c.name!r} {c.share:.3g}: prefill {c.prefill!r}, decode {c.decode!r}"
                for c in self.classes)
        return f"{law}, prefill {self.prefill_law!r}, decode {self.decode_law!r}"


def _streams(seed: int, replication: int) -> List[np.random.SeedSequence]:
    # six children: gaps, prompts, outputs, router, classes, prefix groups
    # (spawn keys are positional, so the first four are those of single-class
    # traffic, and the first five those of before the groups)
    return np.random.SeedSequence([seed, replication]).spawn(6)


def request_classes(traffic: Traffic, n: int, seed: int, replication: int
                    ) -> Optional[List[Hashable]]:
    """Replication ``replication``'s ``n`` request classes (None without
    classes), from their own stream of ``(seed, replication)``."""
    if traffic.classes is None:
        return None
    rng = np.random.default_rng(_streams(seed, replication)[4])
    pick = rng.choice(len(traffic.classes), size=n, p=[c.share for c in traffic.classes])
    return [traffic.classes[i].name for i in pick.tolist()]


def prompt_ids(traffic: Traffic, prompts: np.ndarray, seed: int, replication: int
               ) -> Optional[List[Tuple[int, ...]]]:
    """Replication ``replication``'s content ids, one tuple per request of
    prompt sizes ``prompts`` (None without prefix groups), its groups drawn
    from their own stream of ``(seed, replication)``."""
    if traffic.groups is None:
        return None
    return traffic.groups.ids(np.random.default_rng(_streams(seed, replication)[5]), prompts)


def arrivals(traffic: Traffic, n: int, seed: int, replication: int
             ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Replication ``replication``'s ``n`` requests: unit-rate arrival times,
    prompt sizes, output sizes, and a seed for a router.  Seeded by
    ``(seed, replication)`` only, never by the rate (common random numbers).
    With classes, each request's sizes come from its class's laws
    (:func:`request_classes`)."""
    streams = _streams(seed, replication)
    ra, rp, rd = (np.random.default_rng(s) for s in streams[:3])
    if traffic.cv is None:
        gaps = ra.exponential(1.0, n)
    else:
        shape = 1.0 / (traffic.cv * traffic.cv)
        gaps = ra.gamma(shape, 1.0 / shape, n)
    if traffic.pairs is not None:
        pick = rp.integers(0, len(traffic.pairs[0]), n)
        prompts = np.array(traffic.pairs[0], dtype=np.int64)[pick]
        outputs = np.maximum(np.array(traffic.pairs[1], dtype=np.int64)[pick], 1)
    elif traffic.classes is None:
        prompts = traffic.prefill_law.sample(rp, n)
        outputs = decode_sizes(traffic.decode_law, rd, n)
    else:
        names = request_classes(traffic, n, seed, replication) or []
        prompts = np.empty(n, dtype=np.int64)
        outputs = np.empty(n, dtype=np.int64)
        for c in traffic.classes:
            where = np.flatnonzero(np.array([x == c.name for x in names], dtype=bool))
            prompts[where] = c.prefill.sample(rp, len(where))
            outputs[where] = decode_sizes(c.decode, rd, len(where))
    router_seed = int(streams[3].generate_state(1)[0])
    return np.cumsum(gaps), prompts, outputs, router_seed


def arrival_cv(text: str) -> Optional[float]:
    """:class:`Traffic`'s ``cv`` from an arrival law's text
    (:func:`~llmqueue.models.arrivals.parse_arrival`): ``poisson`` gives ``None``,
    ``gamma:CV`` gives CV; ``renewal`` is refused (a plan replicates random
    arrivals)."""
    kind, cv = parse_arrival(text)
    if kind == "renewal":
        raise ValueError(f"arrival must be poisson or gamma:CV for plan (a renewal stream has "
                         f"no randomness to replicate), got {text!r}")
    return cv
