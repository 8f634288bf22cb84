"""A whole run's iterations reduced so that any efficiency prices the run in
O(log n): the makespan of an offline batch for a calibration's every trial.

Every term of the roofline's iteration time
(:meth:`~llmqueue.hardware.roofline.Roofline.iteration_times`) is either linear
in the iteration's counts (summed once) or ``max(a*x_i, b*y_i)`` with ``a``,
``b`` set by the efficiency and ``x_i``, ``y_i`` by the iteration.  Over a run,
``sum_i max(a*x_i, b*y_i) = a * (sum of x_i where x_i/y_i >= b/a) + b * (sum of
y_i elsewhere)``: with the iterations sorted by ``x_i/y_i`` and the prefix sums
kept (:class:`MaxSum`), one binary search answers it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class Iterations(NamedTuple):
    """Many iterations at once, for :meth:`Roofline.iteration_times`: each field an
    integer numpy array (one entry per iteration) or a number shared by all;
    the context fields are :class:`~llmqueue.models.context.BatchContext`'s."""

    decode: Any
    prefill: Any
    chunks: Any
    decode_ctx: Any
    chunk_ctx: Any
    chunk_sq: Any
    chunk_cross: Any


class MaxSum:
    """``sum_i max(a*x_i, b*y_i)`` over fixed arrays ``x``, ``y`` >= 0, for any
    ``a``, ``b`` >= 0 (:meth:`total`)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(y > 0, x / np.where(y > 0, y, 1.0), np.where(x > 0, np.inf, 0.0))
        order = np.argsort(ratio, kind="stable")
        self.ratio = ratio[order]
        self.x = np.concatenate(([0.0], np.cumsum(x[order])))
        self.y = np.concatenate(([0.0], np.cumsum(y[order])))

    def total(self, a: float, b: float) -> float:
        """``sum_i max(a*x_i, b*y_i)``."""
        if a <= 0:
            return b * float(self.y[-1])
        k = int(np.searchsorted(self.ratio, b / a, side="left"))
        return a * float(self.x[-1] - self.x[k]) + b * float(self.y[k])


class RunTotals(NamedTuple):
    """A run's iterations as :meth:`Roofline.run_seconds` reads them:
    the count, the sums of sequences and tokens, and a :class:`MaxSum` for
    each max of the roofline (the GEMMs against the weights, prefill and
    decode attention's FLOPs against their KV reads)."""

    iterations: int
    sequences: float
    tokens: float
    lin: MaxSum
    prefill_attention: MaxSum
    decode_attention: MaxSum

    @classmethod
    def of(cls, work: Iterations, head_per_gemm: float, tile: int) -> "RunTotals":
        """Reduce ``work`` for a roofline whose LM-head time per sequence is
        ``head_per_gemm`` times its GEMM time per padded token, at token
        ``tile``: :meth:`Roofline.run_totals` gives both."""
        decode, prefill, chunks, decode_ctx, chunk_ctx, chunk_sq, chunk_cross = (
            np.asarray(a, dtype=np.int64) for a in np.broadcast_arrays(*work))
        tokens = decode + prefill
        seqs = chunks + decode
        padded = tile * -(-tokens // tile)
        ones = np.ones(tokens.size)
        return cls(int(tokens.size), float(seqs.sum()), float(tokens.sum()),
                   MaxSum(padded + head_per_gemm * seqs, ones),
                   MaxSum(chunk_cross + (chunk_sq + prefill) / 2, chunk_ctx + prefill),
                   MaxSum(decode_ctx, decode_ctx + decode))
