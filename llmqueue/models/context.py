"""The context of a batch: what a context-aware latency model sees beyond the
token counts (docs/model.md §7.2).

A batch of ``d`` decode tokens and ``p`` prefill tokens gains

* ``decode_ctx``: the sum, over the decoding requests, of the tokens already in
  each one's KV cache before this iteration (prompt plus decode tokens produced
  so far; the token this iteration produces is not counted);
* ``chunks``: the number of prefill chunks (one per request holding prefill
  tokens in this iteration);
* ``chunk_ctx``: the sum of the tokens cached before each chunk (``s_i``);
* ``chunk_sq``: ``sum n_i**2`` over the chunks' sizes ``n_i``;
* ``chunk_cross``: ``sum n_i * s_i``;
* ``waiting``: decoding residents left out of this batch (their KV stays
  resident; docs/model.md §9.6's notebook baseline charges them).

All are integers.  The engine keeps them incrementally for models that declare
``needs_context``; :meth:`BatchContext.of` builds one from explicit per-request
lists (for tests and ``llmqueue latency``).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Tuple

from llmqueue.common import validation


class BatchContext(NamedTuple):
    """A batch's cached-token context (docs/model.md §7.2); see the module docstring."""

    decode_ctx: int = 0
    chunks: int = 0
    chunk_ctx: int = 0
    chunk_sq: int = 0
    chunk_cross: int = 0
    waiting: int = 0

    @classmethod
    def of(cls, decode_contexts: Iterable[int] = (),
           chunks: Iterable[Tuple[int, int]] = (), waiting: int = 0) -> "BatchContext":
        """The context of a batch whose decoding requests hold ``decode_contexts``
        cached tokens each and whose prefill chunks are ``(n_i, s_i)`` pairs: ``n_i``
        tokens (>= 1) after ``s_i`` cached ones; ``waiting`` decoders sit it out."""
        decode_ctx = 0
        for i, x in enumerate(decode_contexts):
            decode_ctx += validation.token_count(f"decode_contexts[{i}]", x)
        count = ctx = sq = cross = 0
        for i, pair in enumerate(chunks):
            try:
                n, s = pair
            except (TypeError, ValueError):
                raise ValueError(f"chunks[{i}] must be a pair (n, s) of chunk tokens and "
                                 f"cached tokens, got {pair!r}") from None
            validation.token_count(f"chunks[{i}] n", n, minimum=1)
            validation.token_count(f"chunks[{i}] s", s)
            count, ctx, sq, cross = count + 1, ctx + s, sq + n * n, cross + n * s
        idle = validation.nonnegative_int("waiting", waiting)
        return cls(decode_ctx, count, ctx, sq, cross, idle)

    def after(self, j: int, decode: int, prefill: int) -> "BatchContext":
        """The context of the same batch (``decode`` decode and ``prefill``
        prefill tokens) ``j`` iterations later: each decoder holds one more token
        per iteration and each chunk's cached tokens grow by its size, so
        ``decode_ctx + j*decode``, ``chunk_ctx + j*prefill`` and
        ``chunk_cross + j*chunk_sq``."""
        return self._replace(decode_ctx=self.decode_ctx + j * decode,
                             chunk_ctx=self.chunk_ctx + j * prefill,
                             chunk_cross=self.chunk_cross + j * self.chunk_sq)
