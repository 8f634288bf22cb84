"""Batch shapes and what a latency model charges for them (docs/model.md §7.2, §7.6).

A *shape* is an iteration of ``d`` decodes and one prefill chunk of ``p``
tokens.  A model of the batch size alone prices it by its tokens; a context
model (the roofline: ``needs_context``) also by the tokens its requests hold,
which :func:`shape_time` takes as means (fractional contexts interpolated).

Theorem 2 reads a model of the batch size alone (``t_bmax``:
:func:`by_batch_size`).  Any other is read at a workload's mix and mean
contexts (:class:`MeanContext`, docs/model.md §7.6 and §7.10, E8.4: ``t_bmax`` becomes
``t_mix``, the full batch at the workload's mix), which makes every figure
of :mod:`~llmqueue.theory.capacity` that knows the workload's mean sizes
approximate but meaningful; priced as one prompt at context 0 instead, a
full batch of Llama-3-8B on an H100 takes 50.7 ms where the engine's take
about 82.4 ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, overload

from llmqueue.models.context import BatchContext
from llmqueue.models.latency import LatencyModel


def needs_context(latency: LatencyModel) -> bool:
    """Whether ``latency`` reads a :class:`BatchContext` (docs/model.md §7.2)."""
    return bool(getattr(latency, "needs_context", False))


def by_batch_size(latency: LatencyModel) -> bool:
    """Whether ``latency`` prices a batch by its tokens alone, so that Theorem 2
    reads it exactly: it says so with a ``tokens_time`` of its own (the
    staircase, linear, constant and interpolated models) and reads no context.
    Others depend on the split of prefill and decode tokens (docs/model.md §4's step
    model, a user's model of ``batch_time`` alone) or on the contexts (the
    roofline)."""
    return not needs_context(latency) and callable(getattr(latency, "tokens_time", None))


def shape_time(latency: LatencyModel, decode: int, prefill: int, decode_ctx: float = 0.0,
               chunk_ctx: float = 0.0) -> float:
    """Seconds of one iteration of ``decode`` decoding requests holding
    ``decode_ctx`` cached tokens **each** and one prefill chunk of ``prefill``
    tokens after ``chunk_ctx`` cached ones.

    Contexts may be fractional (workload means): the time is then interpolated
    linearly between the neighbouring whole contexts, separately in each (exact
    for the roofline, whose terms are sums of functions of one context each, on
    any linear piece).  Models without context see only the token counts.
    """
    requests = decode + (1 if prefill else 0)
    if not needs_context(latency):
        return latency.batch_time(decode, prefill, requests)
    total = decode * decode_ctx
    batch_time: Callable[..., float] = latency.batch_time

    def at(dc: int, s: int) -> float:
        chunk = BatchContext(0, 1, s, prefill * prefill, prefill * s) if prefill else \
            BatchContext()
        return batch_time(decode, prefill, requests, context=chunk._replace(decode_ctx=dc))
    d0, s0 = math.floor(total), math.floor(chunk_ctx)
    base = at(d0, s0)
    t = base
    if total > d0:
        t += (total - d0) * (at(d0 + 1, s0) - base)
    if prefill and chunk_ctx > s0:
        t += (chunk_ctx - s0) * (at(d0, s0 + 1) - base)
    return t


def mix_decode(tokens: int, mean_prefill: float, mean_decode: float,
               kmax: Optional[int] = None) -> int:
    """Decode tokens of a full batch of ``tokens`` tokens at the workload's own
    mix, ``round(tokens m_d / (m_p + m_d))``, at most ``kmax``.  When requests
    bring both prefill and decode work, at least one token of each kind (from
    1 to ``tokens - 1``): rounded to none, the shape would serve no request
    (``vd = 1`` after a prompt of 290 tokens gave 0 decodes of 128, and
    ``lambda_mix`` 0)."""
    d = round(tokens * mean_decode / (mean_prefill + mean_decode))
    if mean_prefill > 0 and mean_decode > 0 and tokens >= 2:
        d = min(max(d, 1), tokens - 1)
    return d if kmax is None else min(d, kmax)


#: The largest full batch :class:`MeanContext` prices as one shape (2**16
#: tokens, above any budget servers use: vLLM's are some 10^3 to 10^4).  Its
#: prefill is one chunk, whose attention grows as its square: priced so, a
#: larger budget would look slower than a smaller one (the roofline at point
#: C's mix: load 7.6 at ``bmax = 10^8``, 0.19 at ``10^5``), where an engine's
#: batch of that size holds many prompts' chunks and costs about as much
#: per token as a batch of this size.
MIX_TOKENS = 2**16


@dataclass(frozen=True)
class MeanContext:
    """A model that is not priced by its batch size alone (a context model,
    docs/model.md §7.2, or a model of the split) priced at a workload's mix and mean
    contexts, which makes it a model of the batch size alone that Theorem 2's
    figures (:mod:`llmqueue.theory.capacity`) can read, approximately
    (docs/model.md §7.6 and §7.10, E8.4).

    A batch of ``d`` decodes and ``p`` prefill tokens lasts :func:`shape_time`
    with each decode at a decoding request's mean context
    ``E[vp] + (E[vd] - 1)/2`` (its iterations run at ``vp .. vp + vd - 1``) and
    one prefill chunk at ``E[vp]/2``; a batch of ``b`` tokens
    (:meth:`tokens_time`) is the full batch at the workload's mix
    (:func:`mix_decode`), so ``t_bmax`` is E8.4's ``t_mix``.  With the
    roofline at ``(512, 256)`` on an H100: 82.4 ms where the context-free full
    batch takes 50.7 ms, and lambda* 32.35 req/s instead of 52.55.
    """

    latency: LatencyModel
    mean_prefill: float
    """Prefill tokens a request brings to process."""
    mean_decode: float
    mean_prompt: Optional[float] = None
    """Tokens a request's prompt holds, where they differ from ``mean_prefill``
    (requests that arrive prefilled: their prompts are context, not work)."""

    @property
    def decode_ctx(self) -> float:
        """Cached tokens of each decode (the mean over a request's decode iterations)."""
        return self._prompt + (self.mean_decode - 1) / 2

    @property
    def chunk_ctx(self) -> float:
        """Cached tokens before the prefill chunk (the mean over a prompt)."""
        return self._prompt / 2

    @property
    def _prompt(self) -> float:
        return self.mean_prefill if self.mean_prompt is None else self.mean_prompt

    def batch_time(self, decode: int, prefill: int, requests: int) -> float:
        """Seconds of ``decode`` decodes and one chunk of ``prefill`` tokens
        at the mean contexts (``requests`` is read as that)."""
        return shape_time(self.latency, decode, prefill, self.decode_ctx, self.chunk_ctx)

    def tokens_time(self, tokens: int) -> float:
        """Seconds of a full batch of ``tokens`` tokens at the workload's mix
        (whatever the slot limit, as Theorem 2: slots are bounded apart).  A
        batch of more than :data:`MIX_TOKENS` tokens costs per token what one
        of :data:`MIX_TOKENS` costs: it is that batch ``tokens / MIX_TOKENS``
        times over, never one prefill chunk of quadratic attention."""
        if tokens > MIX_TOKENS:
            return self.tokens_time(MIX_TOKENS) * (tokens / MIX_TOKENS)
        d = mix_decode(tokens, self.mean_prefill, self.mean_decode)
        return self.batch_time(d, tokens - d, d + 1)


@overload
def at_mean_context(latency: LatencyModel, mean_prefill: float,
                    mean_decode: float) -> LatencyModel: ...


@overload
def at_mean_context(latency: None, mean_prefill: float, mean_decode: float) -> None: ...


@overload
def at_mean_context(latency: Optional[LatencyModel], mean_prefill: float,
                    mean_decode: float) -> Optional[LatencyModel]: ...


def at_mean_context(latency: Optional[LatencyModel], mean_prefill: float,
                    mean_decode: float) -> Optional[LatencyModel]:
    """``latency`` as Theorem 2's figures read it: a model priced by its batch
    size alone (:func:`by_batch_size`; ``None``: the staircase) as it is, any
    other at the workload's mix and mean contexts (:class:`MeanContext`; for a
    model of the split without contexts, such as docs/model.md §4's step model, only
    the mix matters: its full batch of 512 tokens at 129 + 112 is 238
    decodes, 0.8 ms each, where priced as one prompt it takes 20 ms)."""
    if latency is None or by_batch_size(latency):
        return latency
    return MeanContext(latency, float(mean_prefill), float(mean_decode))
