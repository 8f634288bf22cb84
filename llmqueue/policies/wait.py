"""WAIT and Nested WAIT (docs/model.md §6.5): fixed stage quotas that keep the KV cache
at its fixed point, so memory never overflows.

At each decision point (an iteration boundary, or an arrival while idle),
with ``U_j`` the *unstarted* type-``j`` residents in the view's order (under
memory: preempted ones first, then by admission) and ``S`` the *started*
ones (those holding KV, :func:`~llmqueue.policies.view.holds_kv`):

* the set is *ready* when ``|U_j| >= n_j`` for every configured type
  (``gate="all"``, the paper's code) or for at least one (``gate="any"``);
* ready: one decode for every resident of ``S`` plus the first ``n_j`` of
  each (ready) ``U_j`` as whole prompts;
* not ready: :data:`~llmqueue.policies.view.IDLE` (``idle="strict"``, the
  paper's code: the GPU waits for the next arrival), or the decodes of ``S``
  alone, IDLE when ``S`` is empty (``idle="decode"``);
* **drain**: when the view is draining (no resident can join before this
  batch: the arrivals are over, or every slot is taken,
  :func:`~llmqueue.policies.view.is_draining`), a type that is not ready
  counts as ready with ``n_j := |U_j|``, so a run never hangs.

**Nested WAIT** (``lengths`` and ``stages``): unknown output lengths with a
known law on ``l_1 < ... < l_K``.  Segment ``k`` covers decode positions
``(l_{k-1}, l_k]`` (segment 1 includes the prefill).  New starts follow the
WAIT rule with ``n = stages[0]`` (one type).  A started request that has
decoded exactly ``l_{k-1}`` tokens (``k >= 2``) without finishing *pauses*: it
keeps its KV and gets no token until ``stages[k-1]`` requests are paused at
that boundary; the first ``stages[k-1]`` of them (view order) then advance
together.  Under drain every paused request advances.  The decision reads
only the tokens decoded so far, never the output length.  A request that
outlives ``l_K`` decodes on without pausing.  Quotas come from
:func:`llmqueue.theory.wait.nested_wait_quotas`.

Decisions where docs/model.md §6.5 is silent:

* WAIT ignores the token budget (``budgeted = False``): prompts are whole and
  the engine gates WAIT's batches with an unlimited budget, whatever
  ``bmax`` is; ``chunked`` is accepted (the registry passes it) and has no
  effect;
* WAIT needs a KV cache (``needs_kv = True``): the engine refuses it without
  one (its quotas are memory quotas, and only engines with memory idle on
  purpose);
* a resident whose type has no quota is a ``ValueError`` naming ``n``;
* an unstarted resident with no prefill left (``vp = 0``, or a prompt that
  arrived prefilled, ``Engine.call(prefilled=True)``) starts with its first
  decode, counted as one of its type's ``n_j``; a group starts first come,
  first served (``starts_fcfs``): the gate walks its members by order key and
  the first that fails its memory check stops the rest (docs/model.md §6.3 step 3);
* a preemption under WAIT is the quotas' fault (docs/model.md §6.5): the run reports
  it as ``threshold_error``.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple, Union

from llmqueue.common import validation
from llmqueue.models.latency import LatencyModel
from llmqueue.policies.builtin import Policy, register_policy
from llmqueue.policies.view import IDLE, Plan, Request, View, holds_kv, is_draining

GATES = ("all", "any")
IDLES = ("strict", "decode")
Classify = Callable[[Request], Hashable]


def by_size(r: Request) -> Tuple[int, int]:
    """WAIT's default type of a request: its sizes ``(vp, vd)`` (known lengths)."""
    return (r.vp, r.vd)


def _quota(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer quota >= 1; got {value!r}")
    return value


def _quotas(n: object) -> Optional[Dict[Hashable, int]]:
    if n is None or isinstance(n, int):
        return None if n is None else {None: _quota("n", n)}
    if not isinstance(n, Mapping) or not n:
        raise ValueError(f"n must be an integer >= 1 or a non-empty mapping "
                         f"{{type: quota}}; got {n!r}")
    return {key: _quota(f"n[{key!r}]", value) for key, value in n.items()}


def _stages(lengths: object, stages: object) -> Tuple[List[int], List[int]]:
    if not isinstance(lengths, (list, tuple)) or not isinstance(stages, (list, tuple)):
        raise ValueError("Nested WAIT needs lengths (l_1 < ... < l_K) and stages (one "
                         f"quota per segment) as lists; got lengths={lengths!r}, "
                         f"stages={stages!r}")
    ls = [validation.positive_int("lengths", x) for x in lengths]
    ns = [_quota("stages", x) for x in stages]
    if not ls or any(b <= a for a, b in zip(ls, ls[1:])):
        raise ValueError(f"lengths must be increasing integers >= 1; got {ls!r}")
    if len(ns) != len(ls):
        raise ValueError(f"stages must give one quota per length ({len(ls)}); got {len(ns)}")
    return ls, ns


class Wait(Policy):
    """WAIT: start whole prompts in groups of fixed quotas (docs/model.md §6.5).

    ``n`` is one quota (all residents one type) or ``{type: n_j}`` with types
    from ``classify(request)`` (default :func:`by_size`, ``(vp, vd)``);
    ``gate`` is ``"all"`` or ``"any"``, ``idle`` is ``"strict"`` or
    ``"decode"``.  Nested WAIT: give ``lengths`` (``l_1 < ... < l_K``) and
    ``stages`` (``n^(1..K)``) instead of ``n``.  Needs a KV cache; ignores
    ``bmax``.  Without a quota (``Wait()``, as ``make_policy("wait")`` builds
    it) it only describes itself: an engine refuses it.

    Examples:
        Quota 2, four 10 + 2 token requests 0.01 s apart: nothing starts until
        two are waiting, then the prompts start two by two (the second pair with
        the first pair's first decodes).

        >>> import llmqueue as q
        >>> run = q.simulate(q.renewal(0.01, 10, 2, count=4), Wait(n=2),
        ...                  kv=q.KV(capacity_tokens=1000), batches=True)
        >>> [(b.prefill_tokens, b.decode_tokens) for b in run.batch_log]
        [(20, 0), (20, 2), (0, 4), (0, 2)]
        >>> Wait(n=2)
        Wait(n=2, gate='all', idle='strict')
    """

    name = "wait"
    stationary = False
    budgeted = False
    needs_kv = True
    starts_fcfs = True

    def __init__(self, n: Union[int, Mapping[Hashable, int], None] = None, *,
                 classify: Optional[Classify] = None, gate: str = "all", idle: str = "strict",
                 lengths: Optional[Sequence[int]] = None,
                 stages: Optional[Sequence[int]] = None, chunked: bool = False) -> None:
        super().__init__(chunked)
        self.chunked = False  # whole prompts, always
        self.gate = validation.choice("gate", gate, GATES)
        self.idle = validation.choice("idle", idle, IDLES)
        self.lengths: Optional[List[int]] = None
        self.stages: Optional[List[int]] = None
        if lengths is not None or stages is not None:
            if n is not None or classify is not None:
                raise ValueError("Nested WAIT takes its quotas from stages (one type): give "
                                 f"n=None and classify=None; got n={n!r}")
            self.lengths, self.stages = _stages(lengths, stages)
            n = self.stages[0]
        self.quotas = _quotas(n)
        if classify is not None and not callable(classify):
            raise ValueError(f"classify must be a function of a request; got {classify!r}")
        if classify is not None and (self.quotas is None or None in self.quotas):
            raise ValueError("classify needs n as a mapping {type: quota}; got "
                             f"n={n!r}")
        self.classify: Classify = classify if classify is not None else by_size
        self._pause = {x: k for k, x in enumerate(self.lengths or [], start=1)
                       if k < len(self.lengths or [])}

    def __repr__(self) -> str:
        if self.stages is not None:
            return f"Wait(lengths={self.lengths}, stages={self.stages}, idle={self.idle!r})"
        n = None if self.quotas is None else self.quotas.get(None, self.quotas)
        return f"Wait(n={n!r}, gate={self.gate!r}, idle={self.idle!r})"

    def for_engine(self, latency: LatencyModel, kmax: Optional[int]) -> "Wait":
        """This policy, once it has its quotas (an engine cannot run ``Wait()``)."""
        self._require()
        return self

    def _require(self) -> None:
        if self.quotas is None:
            raise ValueError("scheduler 'wait' needs its quota n: Wait(n=N) or "
                             "Wait(n={type: N}) in Python; wait_n=N on the command line "
                             "(or fixed vp and vd with kv set, to compute it)")

    # -- the rule ----------------------------------------------------------
    def plan(self, view: View, budget: int) -> Plan:
        """The batch for one decision point, or :data:`IDLE` (``budget`` is ignored)."""
        self._require()
        draining = is_draining(view)
        decoding, prefilling = view.decoding, view.prefilling
        # started residents come first in both lists; the decoders' list ends
        # with the unstarted ones (vp = 0, arrived prefilled, or preempted with
        # nothing to prefill)
        cut = len(decoding)
        while cut and not holds_kv(decoding[cut - 1]):
            cut -= 1
        first = 0
        while first < len(prefilling) and holds_kv(prefilling[first]):
            first += 1
        starts = self._starts(decoding[cut:], prefilling[first:], draining)
        if starts is None:  # not ready
            if self.idle == "strict":
                return IDLE
            starts = []
        running: Sequence[Request]
        if self.lengths is not None:
            running = self._advancing(decoding[:cut], draining)
        else:
            running = decoding if cut == len(decoding) else decoding[:cut]
        # a started prompt cannot be part-done with whole prompts; if one is, it finishes
        prefill = [(r, r.prefill_left) for r in prefilling[:first]]
        prefill.extend((r, r.prefill_left) for r in starts if r.prefill_left > 0)
        fresh = [r for r in starts if r.prefill_left == 0]
        decode = [*running, *fresh] if fresh else running
        if not decode and not prefill:
            return IDLE  # nothing started may move and nothing may start
        return Plan(decode, prefill)

    def _starts(self, decoders: Sequence[Request], prompts: Sequence[Request],
                draining: bool) -> Optional[List[Request]]:
        """The unstarted residents to start now as whole prompts (FCFS within
        each type), or ``None`` when the set is not ready."""
        quotas = self.quotas
        assert quotas is not None
        single = None in quotas
        taken: Dict[Hashable, List[Request]] = {key: [] for key in quotas}
        short = len(quotas)  # types with fewer than n_j found so far
        for r in _merged(decoders, prompts):
            key = None if single else self.classify(r)
            group = taken.get(key)
            if group is None:
                raise ValueError(f"request {r.rid} is of type {key!r}, which has no quota "
                                 f"in n; allowed types: {', '.join(map(repr, quotas))}")
            if len(group) < quotas[key]:
                group.append(r)
                if len(group) == quotas[key]:
                    short -= 1
                    if not short:
                        break
        full = [key for key in quotas if len(taken[key]) == quotas[key]]
        if draining:  # a type that is not ready starts all it has
            chosen = list(taken)
        elif len(full) == len(quotas) or (self.gate == "any" and full):
            chosen = full
        else:
            return None
        picked = [r for key in chosen for r in taken[key]]
        if len(chosen) > 1:
            picked.sort(key=_order)
        return picked

    def _advancing(self, started: Sequence[Request], draining: bool) -> List[Request]:
        """Nested WAIT: the started decoders that get a token, those inside a
        segment and the groups that advance past a boundary together."""
        stages, pause = self.stages, self._pause
        assert stages is not None
        moving: List[Request] = []
        paused: Dict[int, List[Request]] = {}
        for r in started:
            k = pause.get(r.vd - r.decode_left)  # decoded l_k: would enter segment k + 1
            if k is None:
                moving.append(r)
            else:
                paused.setdefault(k, []).append(r)
        for k, group in paused.items():
            quota = stages[k]
            if draining:
                moving.extend(group)
            elif len(group) >= quota:
                moving.extend(group[:quota])
        if paused:
            moving.sort(key=_order)
        return moving


def _order(r: Request) -> int:
    return r.seq


def _merged(decoders: Sequence[Request], prompts: Sequence[Request]) -> Sequence[Request]:
    """Unstarted residents in one line, by their order key (both lists are sorted)."""
    if not decoders:
        return prompts
    if not prompts:
        return decoders
    return sorted([*decoders, *prompts], key=_order)


register_policy(Wait.name, Wait)
