"""When a request's first output token appears: ``simulate(..., first_token=...)``.

* ``"decode"`` (the default, the paper's model and docs/model.md §1): a prompt's
  prefill produces no token; the first output token is the end of the
  request's first decode iteration, and a request of ``vd`` output tokens
  runs ``vd`` decode iterations.  Every figure of llmqueue before this option
  is of this mode.
* ``"prefill"`` (vLLM, TensorRT-LLM, SGLang): the iteration that completes a
  prompt's prefill also samples the first output token; each of the
  ``vd - 1`` decode iterations after it writes the KV of the token sampled
  last and samples the next.  So the request processes ``vp + vd - 1``
  tokens, its KV peaks at ``vp + vd - 1`` (the last token's KV is never
  written, as in vLLM, whose decode step allocates the slot of the token it
  processes), its TTFT ends at its prefill's end, and a request of one output
  token finishes there, with no decode iteration.

The engine runs a ``"prefill"`` request as the paper's model runs one of
``vd - 1`` decode tokens (:func:`make_early`: ``Request.vd`` then counts the
decode tokens it processes and :attr:`Request.early` says one more token is
output), stamping its first token at its prefill's end (:func:`emit`).  Hence
every KV rule of docs/model.md §6 (allocation, admission, preemption, recompute,
memory area) applies unchanged to the tokens really processed.  Reports use
the output count (:func:`~llmqueue.policies.view.output_tokens`): TPOT is
``(finish - first token) / (vd - 1)`` with ``vd`` output tokens, the request
log shows ``vd`` as given, and ``output_tokens_per_s`` counts the first
tokens emitted with prefills besides the decode tokens.

Decisions: a request with no prompt to prefill here (``vp = 0``, or a prompt
that arrived prefilled, ``Engine.call(prefilled=True)``) has no prefill
iteration to emit from: it keeps the ``"decode"`` timing; a request re-prefilled
after a preemption keeps the first token of its first incarnation (its
re-prefill emits nothing new).  Multi-turn sessions and WAIT (whose quotas
are per ``(vp, vd)`` class) are refused with ``"prefill"``, and networks of
engines run ``"decode"``.
"""

from __future__ import annotations

from typing import Any, List, Sequence

from llmqueue.common import validation
from llmqueue.policies.view import Request

#: The values of ``first_token``; the first is the default.
FIRST_TOKENS = ("decode", "prefill")


def check_first_token(value: object) -> str:
    """``value`` if it is one of :data:`FIRST_TOKENS`, else a ValueError."""
    return validation.choice("first_token", value, FIRST_TOKENS)


def make_early(r: Request) -> Request:
    """``r`` (just made, not yet submitted) with its first token emitted by its
    prefill: one decode token fewer to process.  A request without a prompt to
    prefill is left as it is."""
    if r.prefill_left > 0:
        r.vd -= 1
        r.end_mark = r.vd  # off the decode clock: its decode tokens left
        r.early = True
    return r


def emit(residents: Any, prefilled: Sequence[Request], finished: List[Request],
         end: int) -> None:
    """The requests of ``prefilled`` completed their prefill at ``end`` (an
    engine's :class:`~llmqueue.engine.residents.Residents` applying an
    iteration): an early one emits its first token now (counted in
    ``residents.first_tokens``, the recorder) and finishes if it has no decode
    token left (appended to ``finished``); the others join the decoders."""
    recorder, tokens = residents.first_tokens, residents.tokens
    due = getattr(residents, "due", None)
    for r in prefilled:
        first = r.early and r.first_token is None
        if first:
            r.first_token = end
            recorder.emitted += 1
        if r.early and r.end_mark == 0:  # no decode token left (off the clock: end_mark)
            r.finished = end
            finished.append(r)
            if due is not None:  # releasing it takes it out of the decoders' block counts
                residents._due_add(r)
            continue
        residents._start_decoding(r)
        if first and tokens is not None:
            tokens.first(r, end)
