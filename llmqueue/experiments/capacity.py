"""The capacity figures a single-engine run and ``llmqueue capacity`` add
(docs/model.md §6.6, §7.6): the KV cache's (``mu_mem``, the joint capacity, WAIT's
quota) and the slots' (``lambda_kmax``), and the prediction they imply."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

from llmqueue.engine.results import Result
from llmqueue.experiments.base import kv_of
from llmqueue.experiments.traffic import SizeValue, mean_sizes, size_law
from llmqueue.models.chunks import mean_chunks
from llmqueue.models.sizes import SizeLaw
from llmqueue.theory import memory, wait
from llmqueue.theory.shapes import at_mean_context
from llmqueue.theory.stability import with_limits


def add_memory_capacity(result: Result, p: Mapping[str, Any], latency: Any,
                        rate: float) -> None:
    """Give ``result``, a run of the engine of ``p`` at ``rate`` req/s, the
    figures of :func:`memory_capacity` and the prediction they imply where
    memory or slots bind (:func:`~llmqueue.theory.stability.with_limits`:
    Theorem 2's verdict knows compute only)."""
    figures = memory_capacity(p, p["vp"], p["vd"], latency)
    predicted = result.summary.get("predicted")
    if predicted is not None and figures:
        figures["predicted"] = with_limits(predicted, rate, figures)
    result.add_figures(**figures)


def decoded(p: Mapping[str, Any]) -> Mapping[str, Any]:
    """``p`` with ``vd`` the decode tokens a request processes: with
    ``first_token=prefill`` and a prompt, a fixed ``vd >= 2`` less the first
    token, which its prefill emits (the capacity figures count tokens of
    work); as it is otherwise (a size law is read as given: one token of work
    more than a run does per request)."""
    vd = p.get("vd")
    if p.get("first_token") == "prefill" and isinstance(vd, int) and vd >= 2 and p.get("vp"):
        return {**p, "vd": vd - 1}
    return p


def memory_capacity(p: Mapping[str, Any], vp: Union[SizeValue, SizeLaw],
                    vd: Union[SizeValue, SizeLaw], latency: Any) -> Dict[str, Any]:
    """``mu_mem``, ``lambda_joint``, ``binding`` (docs/model.md §6.6), the cache's
    ``kv_capacity`` (tokens), ``kv_area`` (E[g]), ``b_star``, ``lambda_kmax``
    (with kmax) and, for fixed sizes, ``delta``, ``mu_mem_stable``
    (``mu_mem (1 - delta)``), WAIT's quota ``wait_n`` (the one ``p`` gives, else
    the largest that fits), its steady KV ``wait_kv`` and ``lambda_wait``, for
    requests of sizes ``vp`` and ``vd`` (fixed counts or size laws) on the
    engine of ``p``, when it has a KV cache (else
    ``{}``): chunks of ``bmax`` when chunked (docs/model.md §6.8.1's calculator), else
    whole prompts; no budget counts as whole prompts and an unbounded compute.
    ``E[g]`` is :func:`~llmqueue.theory.memory.law_kv_area` and the mean
    iterations per request ``E[ceil(vp/bmax)] + E[vd]``
    (:func:`~llmqueue.models.chunks.mean_chunks`).  A context model (the
    roofline) prices batches at the mean contexts
    (:func:`~llmqueue.theory.shapes.at_mean_context`), as Theorem 2's figures
    do, but WAIT's, whose contexts are known (:func:`~llmqueue.theory.wait.lambda_wait`)."""
    kv = kv_of(p)
    if kv is None:
        return {}
    prefill, decode = size_law("vp", vp), size_law("vd", vd)
    mean_p, mean_d = mean_sizes({"vp": prefill, "vd": decode})
    model = at_mean_context(latency, mean_p, mean_d)  # as Theorem 2 reads a context model
    bmax = p["bmax"]
    chunk = _chunk(p, mean_p)
    g = memory.law_kv_area(prefill, decode, chunk)
    iterations = _iterations(prefill, mean_d, chunk)
    b_mem = memory.b_star(kv.tokens, mean_p + mean_d, g)
    figures: Dict[str, Any] = {"kv_capacity": kv.tokens, "kv_area": g, "b_star": b_mem}
    never = False  # fixed sizes that can never fit the cache (docs/model.md §6.1)
    if isinstance(vp, int) and isinstance(vd, int):  # fixed sizes: delta and WAIT's figures
        never = not kv.fits_ever(vp, vd)
        share = memory.delta(vp + vd, kv.tokens)
        quota = p.get("wait_n")  # the quota asked for, else the largest that fits
        n = [quota] if quota is not None else wait.wait_thresholds(
            [(vp, vd, 1)], kv.tokens, headroom=kv.reserve * kv.block_size,
            block_size=kv.block_size)
        whole = (memory.kv_area(vp, vd) if kv.block_size == 1
                 else memory.kv_area_blocks(vp, vd, kv.block_size))
        fits = n[0] * whole <= kv.tokens  # else WAIT preempts: no quota fits
        figures.update(delta=share, wait_n=n[0], wait_kv=n[0] * whole,
                       lambda_wait=wait.lambda_wait([(vp, vd, 1)], n, latency) if fits else None)
    if bmax is None:
        figures.update(mu_mem=memory.mu_mem(kv.tokens, g, memory.envelope_time(model, b_mem)),
                       binding="memory")
    else:
        joint = memory.lambda_joint(kv.tokens, mean_p, mean_d, g, bmax, model,
                                    kmax=p["kmax"], mean_iterations=iterations)
        figures.update(mu_mem=joint.memory, lambda_joint=joint.rate, binding=joint.binding,
                       lambda_kmax=joint.slots)
    if "delta" in figures:
        figures["mu_mem_stable"] = figures["mu_mem"] * (1 - figures["delta"])
    if never:  # every request is ignored: none is served
        figures.update(mu_mem=0.0, mu_mem_stable=0.0, binding="memory", lambda_wait=None,
                       fits=False)
        if "lambda_joint" in figures:
            figures["lambda_joint"] = 0.0
    return figures


def _chunk(p: Mapping[str, Any], mean_prefill: float) -> Optional[int]:
    """The prefill chunk the capacity figures assume: ``bmax`` when prompts
    are chunked, else ``None`` (whole prompts)."""
    bmax = p["bmax"]
    return bmax if p["chunked"] and bmax is not None and mean_prefill > 0 else None


def _iterations(prefill: SizeLaw, mean_decode: float, chunk: Optional[int]) -> float:
    """Mean iterations a request holds a slot for: ``E[ceil(vp/chunk)] + E[vd]``
    (one prefill iteration for whole prompts, none for requests without a
    prompt: they start with their first decode)."""
    if chunk:
        return mean_chunks(prefill, chunk) + mean_decode
    return (1 if prefill.mean > 0 else 0) + mean_decode


def slot_figures(p: Mapping[str, Any], vp: Union[SizeValue, SizeLaw],
                 vd: Union[SizeValue, SizeLaw], latency: Any,
                 compute: float) -> Dict[str, Any]:
    """For an engine without a KV cache that has ``kmax`` slots: the slot
    capacity ``lambda_kmax`` (:func:`~llmqueue.theory.memory.slot_capacity`,
    iterations counted as :func:`memory_capacity` counts them) and the joint
    capacity ``lambda_joint`` = the smaller of it and ``compute`` (Theorem
    2's lambda*), with the ``binding`` resource; ``{}`` without ``kmax``
    (with a cache, :func:`memory_capacity` gives them all)."""
    if p["kmax"] is None or kv_of(p) is not None:
        return {}
    prefill, decode = size_law("vp", vp), size_law("vd", vd)
    mean_p, mean_d = mean_sizes({"vp": prefill, "vd": decode})
    slots = memory.slot_capacity(p["kmax"], mean_p, mean_d,
                                 _iterations(prefill, mean_d, _chunk(p, mean_p)), latency)
    binding = "slots" if slots < compute else "compute"
    return {"lambda_kmax": slots, "lambda_joint": min(slots, compute), "binding": binding}
