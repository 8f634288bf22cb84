"""The roofline latency model of docs/model.md §7.3: one iteration's time from the GPU,
the model shape, tensor parallelism and the batch's context.

Per iteration and GPU, with ``T = p + d`` tokens, ``S = chunks + d`` sequences
that get logits and ``T^ = tile*ceil(T/tile)``::

    t_lin = max((2*T^*P_L + 2*S*P_head) / (tp*F*mfu), w_bytes*(P_L + P_head) / (tp*B*mbu))
    t_ap  = max(4*n_q*d_h*L*(chunk_cross + (chunk_sq + p)/2) / (tp*F*mfu_attn),
                kappa*(chunk_ctx + p) / (tp*B*mbu))
    t_ad  = max(4*n_q*d_h*L*decode_ctx / (tp*F*mfu), kappa*(decode_ctx + d) / (tp*B*mbu_attn))
    t_el  = L*T*(4*h + g*f/tp)*act_bytes / (B*eta_el)           (0 when eta_el is None)
    t_tp  = 2*L*(alpha + 2*(tp-1)/tp*T*h*act_bytes / (link*eta_link))   (0 at tp = 1)
    t     = t_step + t_req*S + L*tau_layer + t_lin + t_ap + t_ad + t_el + t_tp

:meth:`Roofline.breakdown` returns every term and which of ``t_lin``, ``t_ap``,
``t_ad`` is compute- or memory-bound; :meth:`Roofline.to_staircase` fits the
paper's staircase to it.  :func:`llmqueue.hardware.fit.fit_roofline` fits its
efficiencies to measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from llmqueue.common import validation
from llmqueue.common.units import MAX_SECONDS
from llmqueue.hardware.efficiency import Efficiency
from llmqueue.hardware.efficiency import efficiency as find_efficiency
from llmqueue.hardware.memory import kv_capacity
from llmqueue.hardware.precision import BF16, Precision
from llmqueue.hardware.precision import precision as find_precision
from llmqueue.hardware.run_time import Iterations, RunTotals
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.hardware.specs import model as find_model
from llmqueue.models.context import BatchContext
from llmqueue.models.latency import Staircase
from llmqueue.theory.capacity import SEARCH_LIMIT
from llmqueue.theory.fit import fit_staircase

#: Runs of at least this many iterations are priced with numpy (:meth:`Roofline.batch_times`).
VECTOR = 32
#: The terms of :class:`Breakdown`, in the order of docs/model.md §7.3's sum.
TERMS = ("t_step", "t_req", "t_layer", "t_lin", "t_ap", "t_ad", "t_el", "t_tp")


@dataclass(frozen=True)
class Breakdown:
    """One iteration's time and its terms (seconds).

    ``t_req`` is ``t_req*S`` and ``t_layer`` is ``L*tau_layer``; ``bound`` says for
    ``t_lin``, ``t_ap`` and ``t_ad`` whether the compute or the memory side of the
    max is larger (``"compute"``, ``"memory"``, or None when both are 0);
    ``compute``/``memory`` hold both sides.  ``tokens`` is T, ``padded`` T^ and
    ``sequences`` S.
    """

    seconds: float
    terms: Dict[str, float]
    bound: Dict[str, Optional[str]]
    compute: Dict[str, float]
    memory: Dict[str, float]
    tokens: int
    padded: int
    sequences: int
    context: BatchContext = field(default_factory=BatchContext)

    def as_dict(self) -> Dict[str, object]:
        """Everything, for ``--json``."""
        return {"seconds": self.seconds, **self.terms, "bound": dict(self.bound),
                "compute": dict(self.compute), "memory": dict(self.memory),
                "tokens": self.tokens, "padded_tokens": self.padded,
                "sequences": self.sequences, "batch_context": self.context._asdict()}


@dataclass(frozen=True)
class StaircaseApprox:
    """:meth:`Roofline.to_staircase`'s result: the chosen staircase, its RMSE and
    R^2 over b = 1..bmax, and the RMSE of every step width tried (seconds)."""

    model: Staircase
    rmse: float
    r2: float
    rmse_by_b0: Dict[int, float]


def assumed_context(decode: int, prefill: int, requests: int) -> BatchContext:
    """The context :meth:`Roofline.batch_time` assumes when it is given none: every
    cached-token count 0, ``chunks = requests - decode`` (one request per decode
    token; at least 1 and at most ``prefill`` when there is prefill, 0 without),
    and the prefill split as evenly as whole tokens allow (the smallest
    ``chunk_sq``)."""
    if prefill == 0:
        return BatchContext()
    chunks = min(prefill, max(1, requests - decode))
    q, r = divmod(prefill, chunks)
    return BatchContext(0, chunks, 0, (chunks - r) * q * q + r * (q + 1) ** 2, 0)


class Roofline:
    """docs/model.md §7.3's roofline batch-time model of ``model`` on ``tp`` GPUs ``gpu``.

    ``gpu`` and ``model`` are names or records; ``efficiency`` a preset name
    (``"default"``, ``"ideal"``) or an :class:`Efficiency`; ``precision`` a format
    name (``"bf16"``, ``"fp8"``: :meth:`Precision.of` it) or a :class:`Precision`
    naming each part's.  Each part is priced at its own format: the layer GEMMs
    at the weights' FLOP/s and their bytes at the weights' size, the LM head at
    the head's, attention's FLOPs at the attention's rate, KV reads at the KV
    element's size, element-wise traffic and all-reduces at the activations'.
    ``kv_fraction`` and ``kv_of`` state the KV share of memory as
    :func:`~llmqueue.hardware.memory.kv_capacity` takes it.  Raises at
    construction when ``heads`` or ``kv_heads`` is not divisible by ``tp``, a
    part asks the GPU for a format it lacks (FP8 on an A100), or the model
    leaves no KV memory (``kv_capacity`` <= 0, docs/model.md §7.4).
    """

    #: The engine passes a :class:`BatchContext` to this model.
    needs_context = True

    def __init__(self, gpu: Union[str, GPU], model: Union[str, ModelShape], tp: int = 1,
                 efficiency: Union[str, Efficiency] = "default",
                 precision: Union[str, Precision, None] = "bf16", *,
                 kv_fraction: Optional[float] = None, kv_of: str = "total") -> None:
        self.gpu, self.model = find_gpu(gpu), find_model(model)
        self.tp = validation.positive_int("tp", tp)
        self.efficiency = find_efficiency(efficiency)
        #: The number format of each part (:class:`~llmqueue.hardware.precision.Precision`).
        self.precision = find_precision(precision)
        g, e, prec = self.gpu, self.efficiency, self.precision
        m = prec.model(self.model)  # element sizes at the precision's formats
        assert m.kv_heads is not None and m.head_dim is not None  # by ModelShape.__post_init__
        for name, heads in (("heads", m.heads), ("kv_heads", m.kv_heads)):
            if heads % tp:
                raise ValueError(f"tp must divide {m.name}'s {name}={heads}; got tp={tp} "
                                 f"({heads} / {tp} = {heads / tp:g})")
        self._share = (kv_fraction, kv_of)
        #: KV-cache capacity in tokens (docs/model.md §7.4; ``kv_fraction`` of ``kv_of`` memory).
        self.kv_capacity = kv_capacity(g, self.model, tp, fraction=kv_fraction, of=kv_of,
                                       precision=prec)
        flops, hbm = tp * prec.flops(g, "weights"), tp * g.hbm
        head_flops, attn_flops = tp * prec.flops(g, "head"), tp * prec.flops(g, "attention")
        attn = 4 * m.heads * m.head_dim * m.layers
        kappa = m.kv_bytes_per_token()
        head_bytes = prec.element_bytes(self.model, "head")
        weights = m.weight_bytes * (m.layer_params() + m.head_params()) \
            if head_bytes == m.weight_bytes else \
            m.weight_bytes * m.layer_params() + head_bytes * m.head_params()
        self._gemm = 2 * m.layer_params() / (flops * e.mfu)            # per padded token
        self._head = 2 * m.head_params() / (head_flops * e.mfu)        # per sequence
        self._weights = weights / (hbm * e.mbu)
        self._ap_flops = attn / (attn_flops * e.mfu_attn)
        self._ap_bytes = kappa / (hbm * e.mbu)
        self._ad_flops = attn / (attn_flops * e.mfu)
        self._ad_bytes = kappa / (hbm * e.mbu_attn)
        g_el = m.ffn_matrices
        self._el = 0.0 if e.eta_el is None else \
            m.layers * (4 * m.hidden + g_el * m.ffn / tp) * m.act_bytes / (g.hbm * e.eta_el)
        self._tp_fixed = 2 * m.layers * e.alpha if tp > 1 else 0.0
        self._tp_token = (2 * m.layers * 2 * (tp - 1) / tp * m.hidden * m.act_bytes
                          / (g.link * e.eta_link)) if tp > 1 else 0.0
        self._layer = m.layers * e.tau_layer
        self._check_times()

    def with_efficiency(self, efficiency: Union[str, Efficiency]) -> "Roofline":
        """This roofline (GPU, model, tp, precision, KV share) at another efficiency."""
        return Roofline(self.gpu, self.model, self.tp, efficiency, self.precision,
                        kv_fraction=self._share[0], kv_of=self._share[1])

    def _check_times(self) -> None:
        """Refuse hardware too slow for ``model``: the GPU figure whose share of
        one token's iteration (a tile of the GEMMs, the weights read, one
        all-reduce) exceeds the longest time a run holds (``inf`` included)."""
        tile, g, e = self.efficiency.tile, self.gpu, self.efficiency
        shares = {"flops": (self._gemm * tile + self._head + self._ap_flops + self._ad_flops,
                            "mfu, mfu_attn"),
                  "hbm": (self._weights + self._el + self._ap_bytes + self._ad_bytes,
                          "mbu, mbu_attn, eta_el"),
                  "link": (self._tp_token * tile, "eta_link")}
        for figure, (seconds, efficiencies) in shares.items():
            if not seconds <= MAX_SECONDS:
                raise ValueError(
                    f"GPU {g.name} {figure}={getattr(g, figure):g} is too slow for "
                    f"{self.model.name} on tp={self.tp} at efficiency {e.name or e}: one token's "
                    f"iteration would take {seconds:.3g} s on it; allowed: at most "
                    f"{MAX_SECONDS:g} s, the longest time a run holds (a larger {figure}, or "
                    f"larger {efficiencies})")

    def __repr__(self) -> str:
        eff = self.efficiency.name or self.efficiency
        prec = "" if self.precision == BF16 else \
            f", precision={self.precision.name or self.precision!r}"
        return (f"Roofline(gpu={self.gpu.name!r}, model={self.model.name!r}, tp={self.tp}, "
                f"efficiency={eff!r}{prec})")

    def _context(self, decode: int, prefill: int, requests: int,
                 context: Optional[BatchContext]) -> BatchContext:
        if type(context) is BatchContext and type(decode) is int and type(prefill) is int \
                and type(requests) is int and decode >= 0 and prefill >= 0 and requests >= 0 \
                and decode + prefill > 0:  # the engine's batches: checked fast
            dc, chunks, cached, sq, cross = context[:5]
            if type(dc) is int and type(chunks) is int and type(cached) is int \
                    and type(sq) is int and type(cross) is int and dc >= 0 and cached >= 0 \
                    and sq >= 0 and cross >= 0 \
                    and (chunks == 0 if prefill == 0 else 1 <= chunks <= prefill):
                return context
        validation.token_count("decode", decode)
        validation.token_count("prefill", prefill)
        validation.token_count("requests", requests)
        if decode + prefill == 0:
            raise ValueError("decode + prefill must be >= 1 token (an iteration does work); "
                             "got 0")
        if context is None:
            return assumed_context(decode, prefill, requests)
        if not isinstance(context, BatchContext):
            context = BatchContext(*context)
        for name, value in zip(BatchContext._fields, context):
            validation.token_count(f"context.{name}", value)
        if not (context.chunks == 0 if prefill == 0 else 1 <= context.chunks <= prefill):
            raise ValueError(f"context.chunks must be 0 without prefill and from 1 to prefill "
                             f"tokens with it; got chunks={context.chunks}, prefill={prefill}")
        return context

    def _sides(self, decode: int, prefill: int, c: BatchContext
               ) -> Tuple[Tuple[float, float], Tuple[float, float], Tuple[float, float],
                          float, float, int, int]:
        tokens = decode + prefill
        seqs = c.chunks + decode
        tile = self.efficiency.tile
        padded = tile * -(-tokens // tile)
        lin = (self._gemm * padded + self._head * seqs, self._weights)
        ap = (self._ap_flops * (c.chunk_cross + (c.chunk_sq + prefill) / 2),
              self._ap_bytes * (c.chunk_ctx + prefill))
        ad = (self._ad_flops * c.decode_ctx, self._ad_bytes * (c.decode_ctx + decode))
        el = self._el * tokens
        tp = self._tp_fixed + self._tp_token * tokens
        return lin, ap, ad, el, tp, padded, seqs

    def batch_time(self, decode: int, prefill: int, requests: int,
                   context: Optional[BatchContext] = None) -> float:
        """Seconds one iteration of ``decode`` decode and ``prefill`` prefill tokens
        from ``requests`` requests lasts.  Without a ``context``, the one of
        :func:`assumed_context` (cached tokens 0, one chunk per prefill request)."""
        c = self._context(decode, prefill, requests, context)
        lin, ap, ad, el, tp, _, seqs = self._sides(decode, prefill, c)
        e = self.efficiency
        return e.t_step + e.t_req * seqs + self._layer + max(lin) + max(ap) + max(ad) + el + tp

    def tokens_time(self, tokens: int) -> float:
        """Seconds of one prefill chunk of ``tokens`` tokens at context 0: how
        :func:`llmqueue.models.latency.tokens_time` prices a full budget (the
        same as ``batch_time(0, tokens, 1)``, without re-checking the context)."""
        validation.token_count("tokens", tokens, minimum=1)
        return self.batch_time(0, tokens, 1, BatchContext(0, 1, 0, tokens * tokens, 0))

    def tokens_times(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`tokens_time` of every size in ``tokens`` (whole numbers >= 1) at
        once, with the same operations in the same order (so the same floats):
        the capacity search over every batch size up to ``bmax``."""
        b = np.asarray(tokens, dtype=np.int64)
        return self.iteration_times(Iterations(0, b, 1, 0, 0, b * b, 0))

    def iteration_times(self, work: Iterations) -> np.ndarray:
        """Seconds of every iteration of ``work`` (:class:`Iterations`: numpy
        arrays or numbers, broadcast), each exactly :meth:`batch_time` of that
        batch and context, computed with the same operations in the same order
        (so the same floats): a whole run priced at once."""
        e = self.efficiency
        decode, prefill, chunks, decode_ctx, chunk_ctx, chunk_sq, chunk_cross = work
        tokens = decode + prefill
        seqs = chunks + decode
        padded = e.tile * -(-tokens // e.tile)
        lin = np.maximum(self._gemm * padded + self._head * seqs, self._weights)
        ap = np.maximum(self._ap_flops * (chunk_cross + (chunk_sq + prefill) / 2),
                        self._ap_bytes * (chunk_ctx + prefill))
        ad = np.maximum(self._ad_flops * decode_ctx, self._ad_bytes * (decode_ctx + decode))
        return (e.t_step + e.t_req * seqs + self._layer + lin + ap + ad + self._el * tokens
                + (self._tp_fixed + self._tp_token * tokens))

    def run_totals(self, work: Iterations) -> RunTotals:
        """``work`` reduced for :meth:`run_seconds` (at this roofline's hardware,
        model, precision and GEMM tile; any other efficiency of them may price it)."""
        return RunTotals.of(work, self._head / self._gemm, self.efficiency.tile)

    def run_seconds(self, run: RunTotals) -> float:
        """The sum of :meth:`iteration_times` over the iterations ``run``
        reduces (:meth:`run_totals` of a roofline differing at most in its
        efficiency, tile aside), in O(log n) and equal to the sum up to rounding."""
        e = self.efficiency
        return (run.iterations * (e.t_step + self._layer + self._tp_fixed)
                + e.t_req * run.sequences + (self._el + self._tp_token) * run.tokens
                + run.lin.total(self._gemm, self._weights)
                + run.prefill_attention.total(self._ap_flops, self._ap_bytes)
                + run.decode_attention.total(self._ad_flops, self._ad_bytes))

    def batch_times(self, decode: int, prefill: int, requests: int, context: BatchContext,
                    k: int) -> List[float]:
        """Seconds of ``k`` back-to-back iterations of one batch (docs/model.md §7.2):
        iteration ``j`` sees ``context`` after ``j`` iterations (:meth:`BatchContext.after`).
        Each is exactly :meth:`batch_time` at its context, computed with the same
        operations in the same order, only faster (vectorised for long runs):
        the engine's skip-ahead over context runs."""
        c = self._context(decode, prefill, requests, context)
        validation.positive_int("k", k)
        dc, cc, cross, sq = c.decode_ctx, c.chunk_ctx, c.chunk_cross, c.chunk_sq
        if k >= VECTOR:
            j = np.arange(k, dtype=np.int64)
            return self.iteration_times(Iterations(decode, prefill, c.chunks, dc + j * decode,
                                                   cc + j * prefill, sq, cross + j * sq)
                                        ).tolist()
        lin, _, _, el, tp, _, seqs = self._sides(decode, prefill, c)
        e = self.efficiency
        head = e.t_step + e.t_req * seqs + self._layer + max(lin)
        half = (c.chunk_sq + prefill) / 2
        ap_f, ap_b, ad_f, ad_b = self._ap_flops, self._ap_bytes, self._ad_flops, self._ad_bytes
        out = []
        for _ in range(k):
            ap, ap_m = ap_f * (cross + half), ap_b * (cc + prefill)
            ad, ad_m = ad_f * dc, ad_b * (dc + decode)
            out.append(head + (ap if ap >= ap_m else ap_m) + (ad if ad >= ad_m else ad_m)
                       + el + tp)
            dc += decode
            cc += prefill
            cross += sq
        return out

    def breakdown(self, decode: int, prefill: int, requests: int,
                  context: Optional[BatchContext] = None) -> Breakdown:
        """Every term of :meth:`batch_time` and what bounds ``t_lin``, ``t_ap``, ``t_ad``."""
        c = self._context(decode, prefill, requests, context)
        lin, ap, ad, el, tp, padded, seqs = self._sides(decode, prefill, c)
        e = self.efficiency
        terms = {"t_step": e.t_step, "t_req": e.t_req * seqs,
                 "t_layer": self._layer, "t_lin": max(lin),
                 "t_ap": max(ap), "t_ad": max(ad), "t_el": el, "t_tp": tp}
        sides = {"t_lin": lin, "t_ap": ap, "t_ad": ad}
        bound = {k: None if max(v) == 0 else ("compute" if v[0] >= v[1] else "memory")
                 for k, v in sides.items()}
        return Breakdown(seconds=sum(terms[k] for k in TERMS), terms=terms, bound=bound,
                         compute={k: v[0] for k, v in sides.items()},
                         memory={k: v[1] for k, v in sides.items()},
                         tokens=decode + prefill, padded=padded, sequences=seqs, context=c)

    def to_staircase(self, bmax: int, b0_grid: Sequence[int] = (32, 64, 96, 128, 192, 256)
                     ) -> StaircaseApprox:
        """The staircase ``c + a*ceil(b/b0)`` closest to this model on prefill-only
        batches of b = 1..bmax tokens (one request, context 0): for each ``b0`` of the
        grid, :func:`llmqueue.theory.fit.fit_staircase` over every b once; the ``b0``
        of least RMSE wins (a ``b0 >= bmax``, one step only, is skipped)."""
        if not 2 <= validation.positive_int("bmax", bmax) <= SEARCH_LIMIT:
            raise ValueError(f"bmax must be an integer from 2 to {SEARCH_LIMIT:,} to fit a "
                             f"staircase (every size is priced once), got {bmax:,}")
        grid = [validation.positive_int("b0_grid item", b0) for b0 in b0_grid]
        tokens = list(range(1, bmax + 1))
        seconds = [self.batch_time(0, b, 1, BatchContext(0, 1, 0, b * b, 0)) for b in tokens]
        fits, rmse = {}, {}
        for b0 in grid:
            if b0 >= bmax:
                continue
            fits[b0] = fit_staircase(tokens, seconds, b0)
            rmse[b0] = math.sqrt(fits[b0].sse / bmax)
        if not fits:
            raise ValueError(f"b0_grid must hold a step width < bmax={bmax}; got {grid}")
        best = min(rmse, key=lambda b0: (rmse[b0], b0))
        return StaircaseApprox(fits[best].model, rmse[best], fits[best].r2, rmse)
