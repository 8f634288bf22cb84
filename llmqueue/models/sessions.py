"""Multi-turn sessions (docs/model.md §8.5): scripts of closed-loop conversations.

A session arrives (Poisson at ``rate`` sessions per second), picks a prefix
group ``g`` of Zipf popularity, and plays its turns one after the other:
turn 1's prompt is the group's system prompt of ``S`` tokens plus a message;
turn ``k + 1`` comes ``think`` seconds (exponential) after turn ``k``
*finishes*, and its prompt is turn ``k``'s prompt, turn ``k``'s output and a
new message.  When a turn arrives depends on the engine, so a session is a
script (:class:`Session`: its start, its group and its :class:`Turn` s, drawn
in advance from the seed, independent of any run) that a feeding process
plays (:func:`llmqueue.engine.sessions.feed_sessions`).

Ids follow the session's transcript (system prompt, message 1, output 1,
message 2, ...) by position: block ``j`` covers tokens ``[jH, (j+1)H)``; a
block wholly inside the system prompt carries its group's id (shared by
every session of the group, :class:`~llmqueue.models.prefixes.BlockIds`), any
other block an id of this session alone.  Turn ``k`` of prompt ``vp_k`` and
output ``vd_k`` has ``blocks`` = the ids of blocks ``j < floor(vp_k / H)`` and
``out_blocks`` = those with ``vp_k < (j+1)H <= vp_k + vd_k``; turn ``k + 1``'s
``blocks`` begin with both.
"""

from __future__ import annotations

import copy
import itertools
from typing import Callable, Iterator, NamedTuple, Optional, Tuple

import numpy as np

from llmqueue.common import validation
from llmqueue.common.units import MAX_SECONDS
from llmqueue.models.arrivals import BLOCK, Poisson
from llmqueue.models.prefixes import (HASH_BLOCK, BlockIds, group_picks, hash_block_size,
                                      zipf_popularity)
from llmqueue.models.sizes import SizeLike, as_law, decode_mean, decode_variance


class Turn(NamedTuple):
    """One turn of a session: a request's sizes and ids, and when it comes."""

    prefill: int
    """Prompt tokens: the whole transcript so far plus the new message."""
    decode: int
    """Decode tokens (>= 1)."""
    blocks: Optional[Tuple[int, ...]]
    """Ids of the prompt's full hash blocks (``None``: :meth:`Sessions.without_ids`)."""
    out_blocks: Optional[Tuple[int, ...]]
    """Ids of the blocks its decode tokens complete (``None`` as ``blocks``)."""
    think: float
    """Seconds after the previous turn finishes (0 for the first turn)."""


class Session(NamedTuple):
    """A session's script."""

    sid: int
    """Its number, from 0 in start order."""
    start: float
    """When its first turn arrives (s)."""
    group: int
    """Its prefix group, from 0 (the most popular)."""
    turns: Tuple[Turn, ...]
    """Its turns in order."""


def _stream(sample: Callable[[int], np.ndarray]) -> Iterator[int]:
    """Endless draws of ``sample``, taken ``BLOCK`` at a time."""
    while True:
        yield from sample(BLOCK).tolist()


class Sessions:
    """Multi-turn sessions (docs/model.md §8.5): iterate it for the :class:`Session`
    scripts, afresh (and the same) each time.

    ``rate`` sessions per second arrive Poisson, ``sessions`` of them
    (``None``: endless, for a run with a horizon); each has ``turns`` turns (a
    size law or a fixed number; a draw of 0 gives 1), messages of ``message``
    tokens and outputs of ``decode`` tokens (a draw of 0 gives 1), and thinks
    an exponential time of mean ``think`` seconds between a turn's finish and
    the next turn.  ``system`` tokens of system prompt, shared by the
    sessions of one of ``groups`` groups of Zipf popularity ``zipf``, open
    every transcript.  Ids are cut per ``hash_block`` tokens (16 by default,
    as :class:`~llmqueue.models.prefixes.PrefixGroups`).

    Same seed, same scripts: ``numpy.random.SeedSequence(seed)`` gives the
    start times, groups, turn counts, messages, outputs and think times six
    independent streams, and the first ``n`` sessions are the same whatever
    ``sessions`` is.

    ``count`` is the number of sessions and ``rate`` sessions per second (as
    given); ``mean_turns``, ``request_rate`` (``rate * mean_turns``),
    ``mean_prefill`` and ``mean_decode`` (per turn, over all turns) are the
    scripts' long-run figures where the laws give them (``None`` otherwise):
    with ``T`` turns, ``mean_prefill = S + E[m] E[T(T+1)] / (2 E[T]) + E[d]
    E[T(T-1)] / (2 E[T])``.

    Examples:
        One session of three turns, messages of 20 tokens, outputs of 24, a
        system prompt of 32 tokens, ids per 16 tokens: the system prompt's
        two blocks carry the group's ids 0 and 1, the transcript's later
        blocks 2, 3, ...; turn 2's prompt (96 tokens: 52 + 24 + 20) repeats
        turn 1's prompt and output ids.

        >>> s = Sessions(rate=1.0, sessions=1, turns=3, think=5.0, message=20, decode=24,
        ...              system=32, seed=3)
        >>> for t in next(iter(s)).turns:
        ...     print(t.prefill, t.decode, t.blocks, t.out_blocks)
        52 24 (0, 1, 2) (3,)
        96 24 (0, 1, 2, 3, 4, 5) (6,)
        140 24 (0, 1, 2, 3, 4, 5, 6, 7) (8, 9)
        >>> s.mean_prefill, s.request_rate
        (96.0, 3.0)
    """

    def __init__(self, rate: float, sessions: Optional[int] = None, turns: SizeLike = 1,
                 think: float = 0.0, message: SizeLike = 1, decode: SizeLike = 1, *,
                 system: int = 0, groups: int = 1, zipf: float = 1.0, seed: int = 0,
                 hash_block: int = HASH_BLOCK) -> None:
        self.rate = validation.arrival_rate("rate", rate)
        """Sessions per second."""
        self.count = None if sessions is None else validation.positive_int("sessions", sessions)
        """Sessions (``None``: endless)."""
        self.turns = as_law("turns", turns)
        """Law of turns per session (a draw of 0 gives 1)."""
        if not validation.is_number(think) or not 0 <= think <= MAX_SECONDS:
            raise ValueError(f"think must be a mean time in seconds from 0 to {MAX_SECONDS:g}, "
                             f"got {validation.shown(think)}")
        self.think = float(think)
        """Mean think time (s)."""
        self.message = as_law("message", message)
        """Law of each turn's new message (tokens)."""
        self.decode = as_law("decode", decode)
        """Law of each turn's output (tokens; a draw of 0 gives 1)."""
        self.system = validation.token_count("system", system)
        """System prompt tokens of every group."""
        self.zipf = validation.nonnegative_number("zipf", zipf)
        """Zipf exponent ``s`` of the groups' popularity."""
        self.popularity = zipf_popularity(groups, zipf)
        """``p_g`` of groups ``1..G``."""
        self.groups = groups
        """Prefix groups ``G`` (each with its own system prompt)."""
        self.seed = validation.seed("seed", seed)
        """The seed of every draw."""
        self.hash_block = hash_block_size(hash_block)
        """Tokens per id (``H``)."""
        self.ids = True
        """Whether turns carry content ids (:meth:`without_ids`)."""
        self.mean_turns = decode_mean(self.turns)  # E[max(T, 1)], as decode sizes
        """Turns per session where known."""
        self.mean_decode = decode_mean(self.decode)
        """Decode tokens per turn where known."""
        self.request_rate = None if self.mean_turns is None else self.rate * self.mean_turns
        """Turns (requests) per second in the long run, where known."""
        self.mean_prefill = self._mean_prefill()
        """Prompt tokens per turn (over all turns) where known."""
        self.description = (
            f"sessions at {self.rate:g}/s" + (f", {self.count} sessions" if self.count else "")
            + f", turns {self.turns!r}, think {self.think:g} s, message {self.message!r}, "
            f"decode {self.decode!r}, system={self.system} G={groups} zipf={self.zipf:g} "
            f"(H={self.hash_block}), seed={seed}")
        """One line saying what the sessions are."""

    def _mean_prefill(self) -> Optional[float]:
        if self.mean_turns is None or self.mean_decode is None:
            return None
        try:
            second = decode_variance(self.turns) + self.mean_turns ** 2  # E[T^2]
        except (ValueError, NotImplementedError):
            return None
        t = self.mean_turns
        return (self.system + self.message.mean * (second + t) / (2 * t)
                + self.mean_decode * (second - t) / (2 * t))

    def __repr__(self) -> str:
        return f"Sessions({self.description})"

    def without_ids(self) -> "Sessions":
        """The same sessions with no content ids (for an engine without a
        prefix cache, which refuses ids): every turn's sizes and times stay."""
        plain = copy.copy(self)
        plain.ids = False
        plain.description = self.description + ", without prefix ids"
        return plain

    def __iter__(self) -> Iterator[Session]:
        streams = [np.random.default_rng(s)
                   for s in np.random.SeedSequence(self.seed).spawn(6)]
        starts = Poisson(self.rate).times(streams[0])
        picks = group_picks(streams[1], self.popularity)
        counts = _stream(lambda n: np.maximum(self.turns.sample(streams[2], n), 1))
        messages = _stream(lambda n: self.message.sample(streams[3], n))
        outputs = _stream(lambda n: np.maximum(self.decode.sample(streams[4], n), 1))
        thinks = _stream(lambda n: streams[5].exponential(self.think, n))
        h = self.hash_block
        ids = BlockIds(self.groups, self.system // h)
        sids = itertools.count() if self.count is None else range(self.count)
        for sid, start, group, count in zip(sids, starts, picks, counts):
            sizes = [(next(messages), next(outputs), next(thinks)) for _ in range(count)]
            prompts = list(itertools.accumulate(
                (m + (sizes[k - 1][1] if k else self.system) for k, (m, _, _) in
                 enumerate(sizes))))
            last = prompts[-1] + sizes[-1][1]  # the whole transcript
            transcript = ids.blocks(group, last // h)
            yield Session(sid, start, group, tuple(
                Turn(vp, vd, transcript[:vp // h] if self.ids else None,
                     transcript[vp // h:(vp + vd) // h] if self.ids else None, think if k else 0.0)
                for k, (vp, (_, vd, think)) in enumerate(zip(prompts, sizes))))
