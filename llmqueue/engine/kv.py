"""The KV-cache memory of one engine (docs/model.md §6.1-6.2): its size, its block size,
and the rules the engine follows when memory runs short.

``KV(capacity_tokens=M)`` or ``KV(num_blocks=N, block_size=B)``: the cache
holds ``N`` blocks of ``B`` tokens (given ``M``, ``N = M // B``).  A request
holding ``x`` tokens occupies ``ceil(x / B)`` blocks; every check is in blocks.

What a *started* resident (one that holds KV) occupies depends on the
admission mode, and is a function of its state alone, so the engine never
stores it (:meth:`KV.held_tokens`):

* ``lazy``: its KV, ``x = vp + vd - prefill_left - decode_left`` tokens;
* ``prompt``: its KV plus the rest of its current prompt, reserved at its
  first start: ``vp + vd - decode_left``;
* ``peak``: its peak ``vp + vd``, reserved at its first start, or the
  configured cap ``max_tokens`` (Vidur's ``max_tokens``) for every request.

``vp + vd - prefill_left - decode_left`` is the KV under both restart modes:
after a preemption the work left is ``vp + d`` prefill and ``vd - d`` decode
tokens (``keep``) or ``vp`` and ``vd`` (``scratch``), which adds up to
``vp + vd`` either way, so a preempted request holds 0.

``preemption="swap"`` moves a victim's KV to a CPU pool of ``swap_tokens``
instead of dropping it (:mod:`~llmqueue.engine.kv_swap` has the rules and
the decisions taken there).  ``max_tokens`` (``peak`` only) reserves ``T``
tokens' worth of blocks at every start instead of ``vp + vd``; a request with
``vp + vd > T`` could not be served under that reservation: it is a never-fit
request, ignored with the warning of docs/model.md §6.1.  ``T`` must fit the cache
(``ceil(T / B) <= N - reserve``), else nothing could ever start: refused.

Decisions where docs/model.md §6 is silent (the engine side lives in ``gate``,
``kv_residents``, ``kv_scheduler`` and ``kv_recorder``):

* the policy proposes with no budget (``UNLIMITED``) and the gate charges
  ``bmax``; a proposal is read as its decodes, then its prefill chunks, or
  the other way round when the policy says ``prefill_first`` (``orca``); a
  chunk bigger than the budget left is cut to it when prompts may be chunked,
  a whole prompt is skipped in pass 1 and stops pass 2; once the budget is
  spent, later pass-1 items are dropped without preempting anybody;
* builtin (FCFS) policies are shown the unstarted prefillers only as far as
  ``min(bmax, B * free)`` tokens of prompt (at least one): they could start no
  further one, and a choice stays O(batch) however long the line;
* a victim keeps its kmax slot: releasing it and taking it back at once from
  the front of the wait line is the same; its admission time, first prefill
  end and first token stay those of its first incarnation; one step's
  victims are ordered by (re)start, oldest first; every gate call is a step,
  a re-proposal at the same instant included;
* the fallback of docs/model.md §6.3 step 5 is, for any policy, its proposal on
  the started residents alone (for ``vllm`` that is their decodes, as §6.3 says);
* a request with ``vp = 0`` starts with its first decode (one block);
* ``prompt`` mode reserves the current prompt, the recomputed one (``vp + d``
  under ``keep``) after a preemption;
* a never-fit arrival warns once per run (later ones are counted); it counts
  as an arrival, never as pending or backlog, and is in the request log;
* a run of iterations that only recompute, for longer than eight times the
  residents' tokens, is a livelock and raises ``Stalled`` (``vllm`` with
  ``lazy`` admission); so does a recomputed whole prompt that outgrows
  ``bmax`` (``chunked=False`` with ``keep``): neither ever hangs;
* recomputed tokens are counted when processed: positions at or below the
  most KV the request ever held; ``recompute_fraction`` divides them by all
  tokens processed in the observed span;
* ``kv_mean`` and ``kv_max`` are the KV tokens actually held; ``kv_utilization``
  is the time-average of the blocks in use (reservations included) over ``N``;
* memory area: Σ over the iterations while resident of the KV after that
  iteration's allocation (0 while unstarted), so an unpreempted whole-prompt
  request holds exactly ``g``;
* preemptions count at the batch choice; ``iterations_with_preemption`` is the
  share of iterations whose choice preempted;
* skip-ahead stays on where memory cannot change the iterations (see
  ``kv_scheduler``); ``check_invariants`` steps every iteration;
* WAIT (``policies.wait``, docs/model.md §6.5) ignores ``bmax``: a policy that says so
  (``budgeted = False``) is gated with an unlimited budget and whole prompts;
  it needs a KV cache (``needs_kv``: an engine without one refuses it); its
  plans are not re-checked every iteration (they hold every decoder), and a
  run reports its preemptions as ``threshold_error``;
* a policy may return ``IDLE`` only to wait for residents: the view says when
  none can join before the batch runs (``draining``: the workload's arrivals
  are over, which ``feed`` tells the engine, or every kmax slot is taken), and
  WAIT then starts what it has, so a finite run never hangs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from llmqueue.common import validation
from llmqueue.common.units import MAX_SECONDS, ceil_div
from llmqueue.policies.view import UNSTARTED, Request, processed

ADMISSIONS = ("lazy", "prompt", "peak")
PREEMPTIONS = ("recompute", "swap", "none")
RESTARTS = ("keep", "scratch")
#: The watermark each admission mode uses when none is given (docs/model.md §6.2).
DEFAULT_WATERMARK = {"lazy": 0.0, "prompt": 0.01, "peak": 0.0}
#: Largest block size, in tokens (2**20): the engine keeps a counter per token
#: position of a block (vLLM's blocks hold 16 tokens, its largest 256).
MAX_BLOCK_SIZE = 2**20


@dataclass(frozen=True)
class KV:
    """A KV cache and its policy: size, block size, admission, preemption.

    Give exactly one of ``capacity_tokens`` (``M``) or ``num_blocks`` (``N``).
    ``admission`` is ``lazy`` (blocks for the tokens scheduled, vLLM v1),
    ``prompt`` (the whole prompt at the first start, vLLM v0) or ``peak``
    (``vp + vd`` at the first start: never preempts).  ``preemption`` is
    ``recompute`` (the victim loses its KV and starts again, ``restart`` =
    ``keep`` its decoded tokens as prompt, or ``scratch``), ``swap`` (its KV
    moves to a CPU pool of ``swap_tokens`` tokens, each token moved adding
    ``swap_seconds_per_token`` to the iteration; recompute when the pool is
    full) or ``none`` (an overflow raises).  ``watermark`` is the share of
    the blocks a new start must leave free (default 0.01 for ``prompt``,
    else 0).  ``max_tokens`` (``peak`` only) is the reservation per request.

    Examples:
        The cache holds ``M // B`` whole blocks: 1000 // 16 = 62, i.e. 992 tokens.

        >>> kv = KV(capacity_tokens=1000, block_size=16)
        >>> kv.blocks, kv.tokens
        (62, 992)
    """

    capacity_tokens: Optional[int] = None
    """Cache size in tokens, ``M`` (rounded down to whole blocks)."""
    num_blocks: Optional[int] = None
    """Cache size in blocks, ``N``."""
    block_size: int = 1
    """Tokens per block, ``B`` (16 for vLLM fidelity)."""
    admission: str = "lazy"
    """When blocks are taken: ``lazy``, ``prompt`` or ``peak``."""
    preemption: str = "recompute"
    """What an overflow does: ``recompute``, ``swap`` or ``none`` (raise)."""
    restart: str = "keep"
    """A recomputed victim's new work: ``keep`` (prompt + decoded) or ``scratch``."""
    watermark: Optional[float] = None
    """Share of the blocks a new start leaves free (``None``: the mode's default)."""
    swap_tokens: Optional[int] = None
    """The CPU swap pool in tokens (``preemption="swap"`` only; whole blocks)."""
    swap_seconds_per_token: float = 0.0
    """Seconds each KV token moved out to or back from the swap pool adds to
    the iteration in which it moves (``preemption="swap"`` only)."""
    max_tokens: Optional[int] = None
    """Tokens ``peak`` admission reserves per request (``None``: its ``vp + vd``)."""
    prefix: bool = False
    """Prefix caching (docs/model.md §8, :mod:`~llmqueue.engine.prefix_cache`): requests
    whose prompts start with the same content share its KV blocks."""

    def __post_init__(self) -> None:
        validation.positive_int("block_size", self.block_size, MAX_BLOCK_SIZE)
        if (self.capacity_tokens is None) == (self.num_blocks is None):
            raise ValueError("give exactly one of capacity_tokens or num_blocks (the cache "
                             f"size); got capacity_tokens={self.capacity_tokens!r}, "
                             f"num_blocks={self.num_blocks!r}")
        if self.capacity_tokens is not None:
            validation.positive_int("capacity_tokens", self.capacity_tokens)
            if self.capacity_tokens < self.block_size:
                raise ValueError(f"capacity_tokens (kv on the command line) must hold at "
                                 f"least one block of block_size={self.block_size} tokens "
                                 f"(kv_block); allowed: >= {self.block_size}; got "
                                 f"{self.capacity_tokens}")
        else:
            blocks = validation.positive_int("num_blocks", self.num_blocks)
            if blocks * self.block_size > validation.MAX_INT:
                raise ValueError(f"num_blocks x block_size (the cache's tokens) must be at most "
                                 f"{validation.MAX_INT_TEXT}; got {self.num_blocks:,} x "
                                 f"{self.block_size:,}")
        validation.choice("admission", self.admission, ADMISSIONS)
        validation.choice("preemption", self.preemption, PREEMPTIONS)
        validation.choice("restart", self.restart, RESTARTS)
        if not isinstance(self.prefix, bool):
            raise ValueError(f"prefix must be True or False; got {validation.shown(self.prefix)}")
        if self.prefix and self.preemption == "swap":
            raise ValueError("prefix=True needs preemption='recompute' or 'none' (a swapped "
                             "request's shared prefix blocks are not modelled); got "
                             "preemption='swap'")
        if self.watermark is not None:
            w = self.watermark
            if not validation.is_number(w) or not 0 <= w < 1:
                raise ValueError(f"watermark must be a number in [0, 1) or None; got "
                                 f"{validation.shown(w)}")

        # derived sizes, read on every batch choice: computed once
        blocks = (self.num_blocks if self.num_blocks is not None
                  else self.capacity_tokens // self.block_size)  # type: ignore[operator]
        share = DEFAULT_WATERMARK[self.admission] if self.watermark is None else self.watermark
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "tokens", blocks * self.block_size)
        object.__setattr__(self, "watermark_share", share)
        object.__setattr__(self, "reserve", math.floor(share * blocks))
        object.__setattr__(self, "fit_tokens", (blocks - self.reserve) * self.block_size)
        self._check_swap()
        object.__setattr__(self, "swap_blocks", (self.swap_tokens or 0) // self.block_size)
        if self.max_tokens is not None:
            validation.positive_int("max_tokens", self.max_tokens)
            if self.admission != "peak":
                raise ValueError(f"max_tokens is the reservation of admission='peak'; got "
                                 f"max_tokens={self.max_tokens} with admission="
                                 f"{self.admission!r}: allowed: admission='peak' or "
                                 "max_tokens=None")
            if self.max_tokens > self.fit_tokens:
                raise ValueError(f"max_tokens must fit the cache ({self.fit_tokens} tokens "
                                 f"usable), else no request could ever start; got "
                                 f"{self.max_tokens}")
            object.__setattr__(self, "fit_tokens", self.max_tokens)

    def _check_swap(self) -> None:
        cost = self.swap_seconds_per_token
        if not validation.is_number(cost) or cost < 0:
            raise ValueError(f"swap_seconds_per_token must be a number >= 0; got "
                             f"{validation.shown(cost)}")
        if self.preemption != "swap":
            if self.swap_tokens is not None or cost:
                raise ValueError(f"swap_tokens and swap_seconds_per_token need "
                                 f"preemption='swap'; got preemption={self.preemption!r}")
            return
        if self.swap_tokens is None:
            raise ValueError("preemption='swap' needs a swap pool: swap_tokens must be an "
                             "integer >= 1 (kv_swap on the command line); got None")
        validation.positive_int("swap_tokens", self.swap_tokens)
        if self.swap_tokens < self.block_size:
            raise ValueError(f"swap_tokens (kv_swap on the command line) must hold at least "
                             f"one block of block_size={self.block_size} tokens (kv_block); "
                             f"allowed: >= {self.block_size}; got {self.swap_tokens}")
        self._check_swap_cost()

    def _check_swap_cost(self) -> None:
        """One batch choice moves at most the cache out and back (each victim
        leaves the cache, each return must fit it), and no more than the pool
        holds: ``2 min(tokens, pool)`` tokens, which must cost at most
        ``MAX_SECONDS`` (the longest time a run holds)."""
        pool = self.swap_tokens // self.block_size * self.block_size  # type: ignore[operator]
        moved = 2 * min(self.tokens, pool)
        cost = self.swap_seconds_per_token
        if cost * moved > MAX_SECONDS:
            raise ValueError(f"swap_seconds_per_token (kv_swap_cost on the command line) must be "
                             f"at most {MAX_SECONDS / moved:.4g} s per token: one iteration may "
                             f"move {moved:,} tokens (the cache out and back, at most the pool "
                             f"each way), which must take at most {MAX_SECONDS:g} s, the "
                             f"longest time a run holds; got {cost!r}")

    #: ``N``, the blocks in the cache.
    blocks: int = field(init=False, repr=False, compare=False)
    #: ``N * B``, the tokens the cache holds.
    tokens: int = field(init=False, repr=False, compare=False)
    #: The watermark in force (the mode's default when none was given).
    watermark_share: float = field(init=False, repr=False, compare=False)
    #: ``floor(watermark * N)``: blocks a new start must leave free.
    reserve: int = field(init=False, repr=False, compare=False)
    #: The most tokens (``vp + vd``) a request may hold and ever fit: ``(N - reserve) * B``,
    #: or ``max_tokens`` when that caps the reservation.
    fit_tokens: int = field(init=False, repr=False, compare=False)
    #: ``swap_tokens // B``: blocks the swap pool holds (0 without swap).
    swap_blocks: int = field(init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        # the options added after the first release show only when set, so the
        # ``kv`` of a run's parameters reads as it did for runs without them
        text = (f"KV(capacity_tokens={self.capacity_tokens!r}, num_blocks={self.num_blocks!r}, "
                f"block_size={self.block_size!r}, admission={self.admission!r}, "
                f"preemption={self.preemption!r}, restart={self.restart!r}, "
                f"watermark={self.watermark!r}")
        if self.swap_tokens is not None:
            text += (f", swap_tokens={self.swap_tokens!r}, "
                     f"swap_seconds_per_token={self.swap_seconds_per_token!r}")
        if self.max_tokens is not None:
            text += f", max_tokens={self.max_tokens!r}"
        if self.prefix:
            text += ", prefix=True"
        return text + ")"

    def blocks_for(self, tokens: int) -> int:
        """Blocks that ``tokens`` tokens occupy, ``ceil(tokens / B)``."""
        return ceil_div(tokens, self.block_size)

    # -- requests --------------------------------------------------------
    def fits_ever(self, vp: int, vd: int) -> bool:
        """Whether a request of ``vp + vd`` tokens can ever finish here (docs/model.md §6.1):
        ``ceil((vp + vd) / B) <= N - reserve``, and ``vp + vd <= max_tokens``
        when that caps the reservation."""
        return vp + vd <= self.fit_tokens

    def held_tokens(self, r: Request) -> int:
        """Tokens' worth of blocks started resident ``r`` occupies in this mode
        (its KV, plus what the mode reserves ahead)."""
        if self.admission == "lazy":
            return r.vp + r.vd - r.prefill_left - r.decode_left
        if self.admission == "prompt":
            return r.vp + r.vd - r.decode_left
        return r.vp + r.vd if self.max_tokens is None else self.max_tokens

    def held_blocks(self, r: Request) -> int:
        """Blocks started resident ``r`` occupies."""
        return ceil_div(self.held_tokens(r), self.block_size)

    def need(self, r: Request, tokens: int, decode: bool, started: bool) -> int:
        """Blocks ``r`` must add to process ``tokens`` prefill tokens (or one
        decode token when ``decode``): what it will occupy after them, less
        what it occupies now (nothing if not ``started``).  With ``B`` tokens a
        block, ``x`` tokens occupy ``-(x // -B)`` blocks (:meth:`blocks_for`,
        inline: this runs for every item of every batch choice)."""
        b = self.block_size
        if self.admission == "lazy":
            if b == 1 and started:
                return tokens  # a token of KV per token processed
            x = r.vp + r.vd - r.prefill_left - r.end_mark + r.clock[0]
            if not started:  # it holds no block yet: blocks for its KV (0, or a prompt
                return -((x + tokens) // -b)  # that arrived prefilled) and the tokens
            return x // -b - (x + tokens) // -b
        if self.admission == "prompt":  # the current prompt is reserved at the start
            x = r.vp + r.vd - r.end_mark + r.clock[0]
            if started:
                return (x // -b - (x + 1) // -b) if decode else 0
            return -((x + 1 if decode else x) // -b)
        if started:  # peak: the whole reservation is taken at the start
            return 0
        return -((r.vp + r.vd if self.max_tokens is None else self.max_tokens) // -b)


def never_fit(kv: KV, r: Request) -> str:
    """The warning for ``r``, which can never fit ``kv`` (docs/model.md §6.1)."""
    cache = f"the KV cache ({kv.blocks} blocks of {kv.block_size} tokens, {kv.reserve} kept free)"
    if kv.max_tokens is not None and r.vp + r.vd > kv.max_tokens:
        cache = f"the reservation of max_tokens={kv.max_tokens} (admission='peak')"
    return (f"request {r.rid} ({r.vp} + {r.vd} tokens) can never fit {cache}: it is ignored; "
            "further ones are counted in the summary's 'ignored' without a warning")


def is_started(r: Request) -> bool:
    """Whether resident ``r`` holds KV (its order key is a start number)."""
    return r.seq < UNSTARTED


#: KV tokens ``r`` holds now (processed tokens of its current incarnation).
kv_tokens = processed
