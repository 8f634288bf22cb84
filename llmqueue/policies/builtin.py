"""Scheduling policies (docs/model.md §3): pure rules from residents and a budget to a batch.

Each policy is a callable ``policy(view, budget) -> Plan``.  The four paper
policies walk the residents in admission order:

* ``sarathi``: decodes first, then prefill chunks fill what is left;
* ``orca``: prefill chunks first, then decodes fill what is left;
* ``vllm``: prefill chunks only while any resident has prefill left, else decodes;
* ``fastertransformer``: decodes only while any resident is decoding, else prefill.

With ``chunked=False`` a prompt enters a batch only whole, and the first prompt
that does not fit stops the walk (head-of-line blocking).

A policy is *stationary* when its plan repeats as long as no resident changes
phase and every chunk still fits what its resident has left; the engine may
then run several identical iterations as one.  User policies are assumed not to
be, unless they say so.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

from llmqueue.common import validation
from llmqueue.common.units import ceil_div
from llmqueue.models.latency import LatencyModel, Staircase, tokens_time
from llmqueue.policies.view import Plan, Request, SimpleView, View, population

PlanFunction = Callable[[View, int], Plan]


def take_decodes(decoding: Sequence[Request], budget: int) -> Sequence[Request]:
    """The first ``budget`` decoders in admission order (all of them if they fit)."""
    return decoding if len(decoding) <= budget else decoding[:max(budget, 0)]


def take_prefill(prefilling: Sequence[Request], budget: int, chunked: bool,
                 cap: Optional[int] = None) -> List[Tuple[Request, int]]:
    """Prefill chunks in admission order within ``budget`` (and ``cap`` prefill tokens).

    Chunked, the last prompt served gets what is left of the budget; whole, the
    walk stops at the first prompt that does not fit.
    """
    left = budget if cap is None else min(budget, cap)
    chunks: List[Tuple[Request, int]] = []
    for r in prefilling:
        if left <= 0:
            break
        need = r.prefill_left
        if need <= left:
            chunks.append((r, need))
            left -= need
        else:
            if chunked:
                chunks.append((r, left))
            break
    return chunks


def _used(chunks: Sequence[Tuple[Request, int]]) -> int:
    return sum(tokens for _, tokens in chunks)


class Policy:
    """Base class of scheduling policies.

    Subclasses implement :meth:`plan`.  ``chunked`` says whether prompts may be
    split across iterations; ``stationary`` allows the engine's skip-ahead.
    """

    name: str = "policy"
    stationary: bool = False
    mixed: bool = True
    work_conserving: bool = False
    #: Whether its batches put prefill chunks before decodes (``orca``): with a
    #: KV cache the engine's gate then charges the budget in that order.
    prefill_first: bool = False
    #: Whether the engine charges its batches against ``bmax`` (WAIT does not:
    #: its batches are gated with an unlimited budget, docs/model.md §6.5).
    budgeted: bool = True
    #: Whether it runs only on an engine with a KV cache (WAIT's quotas are memory's).
    needs_kv: bool = False
    #: Whether its new starts go first come, first served (WAIT's groups): with a
    #: KV cache the gate then walks them by order key, not decodes before prompts.
    starts_fcfs: bool = False

    def __init__(self, chunked: bool = True) -> None:
        if not isinstance(chunked, bool):
            raise ValueError(f"chunked must be true or false, got {chunked!r}")
        self.chunked = chunked

    def plan(self, view: View, budget: int) -> Plan:
        """The batch for one iteration."""
        raise NotImplementedError

    def __call__(self, view: View, budget: int) -> Plan:
        return self.plan(view, budget)

    def for_engine(self, latency: LatencyModel, kmax: Optional[int]) -> "Policy":
        """The policy an engine with this latency model and slot limit runs
        (most policies ignore both)."""
        return self

    def check_kv(self, kv: object) -> None:
        """Refuse an engine without a KV cache (``kv`` is ``None``) if this policy
        needs one (:attr:`needs_kv`): what an engine and ``llmqueue capacity`` check."""
        if self.needs_kv and kv is None:
            raise ValueError(f"scheduler {self.name!r} needs a KV cache: kv=KV(...) in "
                             "Python, kv=TOKENS on the command line (its quotas are memory "
                             "quotas)")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(chunked={self.chunked})"


class Sarathi(Policy):
    """Decodes first, then prefill chunks fill the rest (Sarathi-Serve).

    ``chunk`` optionally caps the prefill tokens of one iteration below the
    budget (docs/model.md §9.6: the chunk bounds prefill only; decodes ride along).
    """

    name = "sarathi"
    stationary = True
    work_conserving = True

    def __init__(self, chunked: bool = True, chunk: Optional[int] = None) -> None:
        super().__init__(chunked)
        self.chunk = validation.optional_positive_int("chunk", chunk)
        # a cap below the budget leaves budget unused on purpose
        self.work_conserving = chunk is None

    def plan(self, view: View, budget: int) -> Plan:
        decode = take_decodes(view.decoding, budget)
        return Plan(decode, take_prefill(view.prefilling, budget - len(decode),
                                         self.chunked, self.chunk))


class Orca(Policy):
    """Prefill chunks first, then decodes fill the rest (Orca)."""

    name = "orca"
    stationary = True
    work_conserving = True
    prefill_first = True

    def plan(self, view: View, budget: int) -> Plan:
        prefill = take_prefill(view.prefilling, budget, self.chunked)
        return Plan(take_decodes(view.decoding, budget - _used(prefill)), prefill)


class OnePhase(Policy):
    """Base of the non-mixed policies: each batch is all prefill or all decode.
    ``prefill_first`` says which phase runs while residents of both exist."""

    stationary = True
    mixed = False
    prefill_first: bool = True

    def plan(self, view: View, budget: int) -> Plan:
        prefill = bool(view.prefilling) if self.prefill_first else not view.decoding
        if prefill:
            return Plan((), take_prefill(view.prefilling, budget, self.chunked))
        return Plan(take_decodes(view.decoding, budget), ())


class VLLM(OnePhase):
    """Prefill only while any resident has prefill left, else decodes (vanilla vLLM)."""

    name = "vllm"
    prefill_first = True


class FasterTransformer(OnePhase):
    """Decodes only while any resident is decoding, else prefill (FasterTransformer)."""

    name = "fastertransformer"
    prefill_first = False


class StepFill(Policy):
    """Decodes first, then prefill: while every slot is taken (``kmax``
    residents), only up to the end of the latency step the decodes already pay
    for; otherwise, like Sarathi, up to the budget.

    With the pool full no further request can be admitted, so prefill beyond
    the decodes' step cannot add a decoder: it only lengthens the iteration for
    every decoder, which does not pay (docs/model.md §9.5).  At point C with bmax = 1024
    this rule keeps the stable 29 + 99 shape that Sarathi-1024 abandons; with
    free slots (or no kmax) it is Sarathi.  Under :class:`ClassPriority` the
    rule applies to each class's share in turn (the pool is the whole engine's).
    """

    name = "step-fill"
    stationary = True

    def __init__(self, chunked: bool = True, latency: Optional[LatencyModel] = None,
                 kmax: Optional[int] = None) -> None:
        super().__init__(chunked)
        self.latency: LatencyModel = latency if latency is not None else Staircase()
        self.kmax = validation.optional_positive_int("kmax", kmax)
        self._ends: Dict[Tuple[int, int], int] = {}

    def for_engine(self, latency: LatencyModel, kmax: Optional[int]) -> "StepFill":
        """This rule with the engine's own latency model and slot limit."""
        if (latency, kmax) == (self.latency, self.kmax):
            return self
        return StepFill(self.chunked, latency, kmax)

    def step_end(self, decode: int, budget: int) -> int:
        """Largest batch total <= ``budget`` that takes no longer than ``decode`` tokens."""
        key = (decode, budget)
        end = self._ends.get(key)
        if end is None:
            model = self.latency
            if isinstance(model, Staircase):
                end = min(budget, model.b0 * ceil_div(decode, model.b0))
            else:
                end = _last_within(lambda b: tokens_time(model, b), decode, budget)
            self._ends[key] = end
        return end

    def plan(self, view: View, budget: int) -> Plan:
        decode = take_decodes(view.decoding, budget)
        room = budget - len(decode)
        if decode and self.kmax is not None and population(view) >= self.kmax:
            room = self.step_end(len(decode), budget) - len(decode)
        return Plan(decode, take_prefill(view.prefilling, room, self.chunked))


def _last_within(time: Callable[[int], float], start: int, stop: int) -> int:
    """Largest ``b`` in ``[start, stop]`` with ``time(b) <= time(start)``, for a
    non-decreasing ``time`` (galloping, then bisection)."""
    limit = time(start)
    low, step = start, 1
    while low + step <= stop and time(low + step) <= limit:
        low += step
        step *= 2
    high = min(low + step, stop + 1)  # time(high) > limit, or high is past stop
    while high - low > 1:
        middle = (low + high) // 2
        if time(middle) <= limit:
            low = middle
        else:
            high = middle
    return low


class WholePrefill(Policy):
    """One resident's whole remaining prefill alone while any has prefill left,
    else decodes (docs/model.md §9.6 baseline).

    The first prefilling resident in admission order runs its remaining prompt
    in one iteration, with no decode riding along; when no prompt is left, every
    resident decodes.  Under a token budget a prompt longer than the budget is
    cut at the budget (and, with ``chunked=False``, refused by the engine).
    """

    name = "whole-prefill"
    stationary = True
    mixed = False

    def plan(self, view: View, budget: int) -> Plan:
        if view.prefilling:
            first = view.prefilling[0]
            return Plan((), [(first, min(first.prefill_left, budget))] if budget > 0 else [])
        return Plan(take_decodes(view.decoding, budget), ())


class FunctionPolicy(Policy):
    """A user's plain function ``f(view, budget) -> Plan`` as a policy."""

    def __init__(self, function: PlanFunction, chunked: bool = True,
                 stationary: bool = False) -> None:
        super().__init__(chunked)
        self.function = function
        self.name = getattr(function, "__name__", "custom")
        self.stationary = stationary

    def plan(self, view: View, budget: int) -> Plan:
        """The function's plan; an exception it raises becomes a ``ValueError``
        naming the policy (the original stays chained for a traceback)."""
        try:
            return self.function(view, budget)
        except (Exception, SystemExit) as exc:
            raise ValueError(f"scheduler {self.name!r} raised {_raised(exc)}") from exc


def _raised(exc: BaseException) -> str:
    """What a user's code raised, on one line: ``KeyError: 'x'``, or for a call
    of ``sys.exit``, ``SystemExit: it called sys.exit(0)``."""
    text = f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else str(exc)
    return f"{type(exc).__name__}: {' '.join(text.split())}"


class ClassPriority(Policy):
    """Rank residents by class: the inner policy spends the budget on the
    highest-ranked class first, then what is left on the next, and so on.
    Classes missing from ``ranking`` come last, together."""

    def __init__(self, inner: Policy, ranking: Sequence[Hashable]) -> None:
        super().__init__(inner.chunked)
        self.inner = inner
        self.ranking = list(ranking)
        self.name = f"{inner.name}+priority"
        self.stationary = inner.stationary
        self.work_conserving = inner.work_conserving
        self.prefill_first = inner.prefill_first

    def for_engine(self, latency: LatencyModel, kmax: Optional[int]) -> "ClassPriority":
        """The wrapper around the inner policy as the engine runs it."""
        inner = self.inner.for_engine(latency, kmax)
        return self if inner is self.inner else ClassPriority(inner, self.ranking)

    def _rank(self, klass: Hashable) -> int:
        try:
            return self.ranking.index(klass)
        except ValueError:
            return len(self.ranking)

    def plan(self, view: View, budget: int) -> Plan:
        whole = population(view)
        groups: Dict[int, SimpleView] = {}
        for attr in ("decoding", "prefilling"):
            for r in getattr(view, attr):
                group = groups.setdefault(self._rank(r.klass), SimpleView([], [], whole))
                getattr(group, attr).append(r)
        share = getattr(view, "part", None)  # an engine's view: its shares keep the time, the
        decode: List[Request] = []  # waiting line and the memory (EngineView.part)
        prefill: List[Tuple[Request, int]] = []
        for rank in sorted(groups):
            if budget <= 0:
                break
            group = groups[rank]
            part = self.inner(group if share is None else
                              share(group.decoding, group.prefilling, whole), budget)
            decode.extend(part.decode)
            prefill.extend(part.prefill)
            budget -= part.tokens
        return Plan(decode, prefill)


BUILTIN: Dict[str, type] = {cls.name: cls for cls in (Sarathi, Orca, VLLM, FasterTransformer,
                                                     StepFill)}
_REGISTRY: Dict[str, Callable[..., Policy]] = dict(BUILTIN)
_REGISTRY[WholePrefill.name] = WholePrefill


def register_policy(name: str, factory: Callable[..., Policy]) -> None:
    """Make ``factory(chunked=...)`` available under ``name`` (API and CLI)."""
    _REGISTRY[name] = factory


def policy_names() -> List[str]:
    """Names of the registered policies."""
    return list(_REGISTRY)


def make_policy(spec: object, chunked: bool = True, **params: object) -> Policy:
    """Turn a name, a ``module:attribute`` path, a :class:`Policy` or a plain
    function into a policy."""
    if isinstance(spec, Policy):
        return spec
    if isinstance(spec, str):
        if spec in _REGISTRY:
            return _REGISTRY[spec](chunked=chunked, **params)
        if ":" in spec:
            return make_policy(_import(spec), chunked, **params)
        raise ValueError(f"scheduler must be one of {', '.join(_REGISTRY)} "
                         f"or module:attribute; got {spec!r}")
    if isinstance(spec, type) and issubclass(spec, Policy):
        return spec(chunked=chunked, **params)
    if callable(spec):
        return FunctionPolicy(spec, chunked=chunked)
    raise ValueError(f"scheduler must be a policy name, a Policy or a function; got {spec!r}")


def _import(path: str) -> object:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # the user's module: a syntax error, its import
        raise ValueError(f"scheduler {path!r} cannot be imported: "  # raised or exited
                         f"{_raised(exc)}") from None
    if not hasattr(module, attr):
        raise ValueError(f"scheduler {path!r} cannot be imported: module {module_name!r} has "
                         f"no attribute {attr!r}")
    return getattr(module, attr)
