"""The workload keys of single-engine experiments: ``vp``/``vd`` as
size laws, ``arrival=renewal|poisson|gamma:CV`` and ``initial=N``, and the
workload they give.

A size parameter keeps a plain integer as an ``int`` (so runs at fixed sizes,
their seeds and their numbers are those of before) and any other law as its
checked text (``uniform:10:20``), which sweeps hash and read again;
:func:`size_law` turns either into a :class:`~llmqueue.models.sizes.SizeLaw`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from llmqueue.common import validation
from llmqueue.common.params import Param
from llmqueue.models.arrivals import ARRIVAL_FORMS, Renewal, arrival_law, parse_arrival
from llmqueue.models.sizes import SIZE_FORMS, Fixed, SizeLaw, decode_mean, parse_size
from llmqueue.models.prefixes import MAX_GROUPS, PrefixGroups
from llmqueue.models.sessions import Sessions
from llmqueue.models.workload import Workload, compose, poisson, renewal
from llmqueue.theory.prefix import group_mean_hit

SizeValue = Union[int, str]
"""A size parameter's value: a fixed size, or a size law's text."""


def read_size(name: str, text: str) -> SizeValue:
    """A size parameter from text: a plain integer as ``int``, any other law
    (``uniform:LO:HI``, ...) as its text once it parses (a one-line ValueError otherwise)."""
    law = parse_size(name, text)
    return law.value if isinstance(law, Fixed) else str(text).strip()


def size_law(name: str, value: Union[SizeValue, SizeLaw]) -> SizeLaw:
    """The size law of a size parameter's value (an integer is a fixed size)."""
    return value if isinstance(value, SizeLaw) else parse_size(name, value)


def mean_sizes(p: Mapping[str, Any]) -> Tuple[float, float]:
    """The mean prompt and output sizes of ``p["vp"]`` and ``p["vd"]`` (tokens;
    output draws of 0 count as 1), for capacity figures.  Fixed sizes are
    themselves (integers; an output of 0 tokens is an error).  With prefix
    groups a prompt is the group's shared tokens and then ``vp``; sessions
    give their mean turn."""
    if p.get("sessions") is not None:
        work = sessions_of(p, 0)
        if work.mean_prefill is None or work.mean_decode is None:
            raise ValueError("the sessions' laws do not give their mean turn")
        return work.mean_prefill, work.mean_decode
    prefill, decode = size_law("vp", p["vp"]), size_law("vd", p["vd"])
    if isinstance(decode, Fixed):
        validation.positive_int("vd", decode.value)
    mean = decode_mean(decode)
    if mean is None:
        raise ValueError(f"vd: {decode!r} does not say how often it draws 0")
    return ((prefill.value if isinstance(prefill, Fixed) else prefill.mean) + shared_of(p),
            decode.value if isinstance(decode, Fixed) else mean)


def shared_of(p: Mapping[str, Any]) -> int:
    """Tokens a prompt of ``p``'s prefix groups shares (0 without groups)."""
    return p.get("shared", 0) if p.get("prefix_groups") is not None else 0


def group_hit(p: Mapping[str, Any]) -> Optional[float]:
    """The mean hit per request of ``p``'s prefix groups once every group's
    prefix is cached (an unlimited cache, docs/model.md §8.4): the group's whole hash
    blocks, ``floor(S / H) H``, less a block for a prompt with no tokens of
    its own whose shared part ends on a block's edge (a hit stops one token
    short of the prompt); ``None`` without groups or prefix caching."""
    if p.get("prefix_groups") is None or not p.get("prefix") or p.get("sessions") is not None:
        return None
    return group_mean_hit(p.get("shared", 0), hash_block_of(p), size_law("vp", p["vp"]))


def size_param(default: int, help: str) -> Param:
    """A ``vp``/``vd`` parameter taking a size law's text (``N`` keeps the
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
    if isinstance(vp, int) and isinstance(vd, int) and not initial and kind != "gamma" \
            and p.get("prefix_groups") is None:
        return renewal(every, vp, vd) if kind == "renewal" else \
            poisson(per_second, vp, vd, seed=seed)
    law = Renewal(every) if kind == "renewal" else arrival_law(arrival, per_second)
    if p.get("prefix_groups") is not None:
        groups = PrefixGroups(p["prefix_groups"], p["zipf"], p["shared"], size_law("vp", vp),
                              size_law("vd", vd), arrivals=law, seed=seed, initial=initial,
                              hash_block=hash_block_of(p))
        return groups if p.get("prefix") else groups.without_ids()
    return compose(law, size_law("vp", vp), size_law("vd", vd), seed=seed, initial=initial)


def sessions_of(p: Mapping[str, Any], seed: int) -> Sessions:
    """The sessions ``p["sessions"]`` asks for (per second, endless: a run
    needs a horizon), each turn's output by ``p["vd"]``, with prefix ids only
    when ``p["prefix"]`` is on (an engine without a prefix cache refuses them)."""
    work = Sessions(p["sessions"], None, size_law("turns", p["turns"]), p["think"],
                    size_law("message", p["message"]), size_law("vd", p["vd"]),
                    system=p["system"], groups=p.get("prefix_groups") or 1, zipf=p["zipf"],
                    seed=seed, hash_block=hash_block_of(p))
    return work if p.get("prefix") else work.without_ids()


def hash_block_of(p: Mapping[str, Any]) -> int:
    """``H``: ``p["hash_block"]``, else the KV block size (docs/model.md §8.2's default)."""
    return p.get("hash_block") or p.get("kv_block") or 1


#: The prefix-caching workloads of ``run single`` (quiet at their defaults:
#: runs without them keep their seeds and numbers).
PREFIX_PARAMS: Dict[str, Param] = {name: replace(param, quiet_default=True) for name, param in {
    "prefix_groups": Param("int-or-none", None, "prefix groups G: each request's prompt is its "
                           "group's shared tokens, then vp tokens of its own (none: no groups)",
                           low=1, high=MAX_GROUPS),
    "zipf": Param("float", 1.0, "Zipf exponent s of the groups' popularity (p_g ~ g^-s)",
                  low=0.0),
    "shared": Param("int", 0, "tokens each group's prompts share (prefix_groups)", low=0),
    "sessions": Param("float-or-none", None, "multi-turn sessions per second (closed loops: "
                      "each turn's prompt is the transcript so far and a new message; the "
                      "rate and gap then do not apply)", low=0.0),
    "turns": size_param(5, "turns per session (sessions)"),
    "think": Param("float", 10.0, "mean think time between a turn's end and the next turn, "
                   "seconds (sessions)", low=0.0),
    "message": size_param(64, "tokens of each turn's new message (sessions)"),
    "system": Param("int", 0, "system-prompt tokens every session of a group opens with "
                    "(sessions)", low=0),
    "hash_block": Param("int-or-none", None, "tokens per prefix id, a multiple of kv_block "
                        "(none: kv_block; a Mooncake trace's own 512)", low=1),
}.items()}
