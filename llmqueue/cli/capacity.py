"""The ``llmqueue capacity`` subcommand (docs/model.md §9.2, §6.6, §7.6): Theorem 2's
figures for the engine and workload of ``run single``, the slot capacity
where ``kmax`` is set, the KV cache's where ``kv`` is, and each scheduler's
predicted verdict."""

from __future__ import annotations

import argparse
from typing import Any, Dict

from llmqueue import experiments
from llmqueue.cli.report import strict_json, table
from llmqueue.cli.settings import overrides
from llmqueue.common import validation
from llmqueue.policies.builtin import make_policy, policy_names


def cmd_capacity(args: argparse.Namespace) -> None:
    """Theorem 2's figures for the engine and workload of ``run single``."""
    from llmqueue.experiments.base import engine_kwargs
    from llmqueue.experiments.capacity import decoded, memory_capacity, slot_figures
    from llmqueue.experiments.single import arrival_rate
    from llmqueue.experiments.traffic import group_hit, mean_sizes
    from llmqueue.models.latency import tokens_time
    from llmqueue.theory import capacity as theory
    from llmqueue.theory.prefix import lambda_star_cached, prefix_gain
    from llmqueue.theory.shapes import at_mean_context
    from llmqueue.theory.stability import predict, with_limits
    p = experiments.REGISTRY["single"].resolve(overrides(args.set, args.scheduler))
    make_policy(p["scheduler"], chunked=p["chunked"]).check_kv(p["kv"])  # as `run` refuses
    if p["bmax"] is None:
        raise ValueError("bmax must be an integer >= 1 for capacity figures; got none "
                         "(an unlimited budget has no full batch)")
    latency = engine_kwargs(p)["latency"]
    vp, vd = mean_sizes(p)
    if p["first_token"] == "prefill" and vp > 0:  # the prefill emits the first token
        vd -= 1
    bmax, kmax = p["bmax"], validation.optional_positive_int("kmax", p["kmax"])
    rate = arrival_rate(p)
    names = [p["scheduler"]] if args.scheduler else [  # wait needs a KV cache
        name for name in policy_names() if p["kv"] is not None
        or not getattr(make_policy(name), "needs_kv", False)]
    verdicts: Dict[str, Dict[str, Any]] = {}
    for name in names:
        wc = make_policy(name, chunked=p["chunked"]).work_conserving
        verdicts[name] = {"work_conserving": wc,
                          "predicted": predict(rate, vp, vd, work_conserving=wc, bmax=bmax,
                                               kmax=kmax, latency=latency)}
    seen: Any = at_mean_context(latency, vp, vd)  # not of the batch size alone: at the mix
    compute = theory.lambda_star(bmax, vp, vd, seen)
    doc = {"token_capacity": theory.token_capacity(bmax, seen),
           "peak_token_rate": theory.peak_token_rate(bmax, seen),
           "batch_time": tokens_time(seen, bmax),
           "lambda_star": compute,
           "rate": rate, "tokens_per_request": vp + vd,
           "load": theory.load(rate, bmax, vp, vd, seen),
           "fluid_slope": theory.fluid_slope(rate, bmax, vp, vd, seen),
           "approximate": seen is not latency,
           "params": p, "verdicts": verdicts}
    prefix_workload = p["prefix_groups"] is not None or p["sessions"] is not None
    memory = {} if prefix_workload else (  # vp is then a suffix, or a turn's message
        memory_capacity(decoded(p), p["vp"], decoded(p)["vd"], latency)
        or slot_figures(p, p["vp"], decoded(p)["vd"], latency, compute))
    doc.update(memory)
    hit = group_hit(p)
    if hit is not None:  # every group's prefix cached: the prompt tokens left to compute
        cached = lambda_star_cached(bmax, vp, vd, hit, seen)
        doc.update(mean_hit=hit, lambda_star_cached=cached, load_cached=rate / cached,
                   prefix_gain=prefix_gain(vp, vd, hit))
        for verdict in verdicts.values():
            verdict["predicted_cached"] = predict(
                rate, vp - hit, vd, work_conserving=verdict["work_conserving"], bmax=bmax,
                kmax=kmax, latency=latency)
    for verdict in verdicts.values():  # above a binding memory or slot bound: unstable
        verdict["predicted"] = with_limits(verdict["predicted"], rate, memory)
    if args.json:
        print(strict_json(doc))
        return
    print(f"engine: bmax = {bmax}, kmax = {kmax}, {latency!r}\n"
          f"workload: {rate:.4g} req/s x ({p['vp']} + {p['vd']}) tokens = "
          f"{rate * (vp + vd):.1f} tokens/s offered\n"
          f"{_full_batch(seen, bmax) if doc['approximate'] else ''}"
          f"token capacity  bmax / t_bmax = {bmax} / {doc['batch_time']:.5g} s = "
          f"{doc['token_capacity']:.1f} tokens/s (a work-conserving scheduler in overload)\n"
          f"peak token rate max b / t_b   = {doc['peak_token_rate']:.1f} tokens/s "
          f"({'at the mix' if doc['approximate'] else 'no scheduler serves faster'})\n"
          f"lambda*         = {doc['lambda_star']:.4g} req/s\n"
          f"load            = {doc['load']:.4f} of capacity; fluid backlog slope "
          f"{doc['fluid_slope']:.1f} tokens/s\n")
    if "mu_mem" in doc:
        print(memory_lines(doc) + "\n")
    elif "lambda_kmax" in doc:
        print(slot_lines(doc) + "\n")
    if hit is not None:
        print(f"prefix cache    every group's {hit:g}-token head cached (its whole hash blocks): "
              f"lambda*_c = (bmax / t_bmax) / (E[vp] - E[hit] + E[vd]) = "
              f"{doc['lambda_star_cached']:.4g} req/s, {doc['prefix_gain']:.3g}x the capacity "
              f"without it; load {doc['load_cached']:.4f}\n")
    if prefix_workload:
        print("(memory and slot figures are not computed for prefix workloads: run them)\n")
    columns = [("wc", "work-conserving", "{}"),
               ("predicted", "predicted (Theorem 2" + (
                   ", memory)" if "mu_mem" in memory else ", slots)" if memory else ")"), "{}")]
    if hit is not None:
        columns.append(("predicted_cached", "with the prefix cache", "{}"))
    print(table([{"label": n, "wc": "yes" if v["work_conserving"] else "no", **v}
                 for n, v in verdicts.items()], columns))


def _full_batch(seen: Any, bmax: int) -> str:
    """The line that says how ``capacity`` prices the full batch of a model
    not priced by its batch size alone (:class:`~llmqueue.theory.shapes.MeanContext`)."""
    from llmqueue.theory.shapes import MIX_TOKENS, mix_decode, needs_context
    times = f"{bmax / MIX_TOKENS:g} x (" if bmax > MIX_TOKENS else ""  # priced per token
    bmax = min(bmax, MIX_TOKENS)
    d = mix_decode(bmax, seen.mean_prefill, seen.mean_decode)
    if needs_context(seen.latency):
        shape = (f"{bmax - d} prefill tokens (one chunk at context {seen.chunk_ctx:g}) + "
                 f"{d} decodes (at context {seen.decode_ctx:g}): the workload's mix at its "
                 "mean contexts")
    else:
        shape = f"{bmax - d} prefill tokens (one chunk) + {d} decodes: the workload's mix"
    shape = f"{times}{shape})" if times else shape
    return (f"full batch      {shape}, so every figure below is approximate (model §7.6) and "
            "loads within 10% of 1 are a boundary\n")


#: ``llmqueue capacity``'s line for the slot capacity (docs/model.md §6.6, §7.6).
SLOTS_LINE = ("slots           lambda_kmax = kmax / (t E[iterations]) = {lambda_kmax:.4g} "
              "req/s (t: the smallest iteration, or the batch's envelope if longer)")


def binds(resource: str) -> str:
    """``compute binds``, ``memory binds``, ``slots bind``."""
    return f"{resource} {'bind' if resource == 'slots' else 'binds'}"


def slot_lines(doc: Dict[str, Any]) -> str:
    """``llmqueue capacity``'s slot block for an engine with ``kmax`` and no
    KV cache (:func:`~llmqueue.experiments.base.slot_figures`)."""
    return "\n".join([SLOTS_LINE.format(**doc),
                      f"joint capacity  {doc['lambda_joint']:.4g} req/s: {binds(doc['binding'])}"])


def memory_lines(doc: Dict[str, Any]) -> str:
    """``llmqueue capacity``'s memory block (docs/model.md §6.6): the figures of
    :func:`~llmqueue.experiments.capacity.memory_capacity` with their formulas."""
    lines = [f"KV cache        M = {doc['kv_capacity']:,} tokens; E[g] = {doc['kv_area']:,.0f} "
             f"token-iterations per request; b* = M E[vp+vd] / E[g] = {doc['b_star']:.1f} "
             "tokens per iteration",
             f"mu_mem          M / (t(b*) E[g]) = {doc['mu_mem']:.4g} req/s"]
    if doc.get("fits") is False:
        lines.append(f"no request fits  vp + vd = {doc['tokens_per_request']:,} tokens, more than "
                     "the cache holds for one request: every request is ignored (model §6.1)")
    if doc.get("delta") is not None:
        lines.append(f"stable side     mu_mem (1 - delta) = {doc['mu_mem_stable']:.4g} req/s "
                     f"(delta = (vp + vd) / M = {doc['delta']:.4f})")
    if doc.get("lambda_kmax") is not None:
        lines.append(SLOTS_LINE.format(**doc))
    if doc.get("lambda_joint") is not None:
        lines.append(f"joint capacity  {doc['lambda_joint']:.4g} req/s: {binds(doc['binding'])}")
    else:
        lines.append(f"joint capacity  {doc['mu_mem']:.4g} req/s: memory binds (no budget)")
    if doc.get("wait_n") is not None:
        fits = doc["lambda_wait"] is not None
        lines.append(f"WAIT            quota n = {doc['wait_n']}, steady KV n g = "
                     f"{doc['wait_kv']:,.0f} tokens: "
                     + (f"lambda_WAIT = {doc['lambda_wait']:.4g} req/s" if fits else
                        "more than M, so WAIT would preempt (threshold_error): "
                        + ("no quota fits" if doc["wait_n"] == 1 else
                           "this quota does not fit (without wait_n: the largest that does)")))
    return "\n".join(lines)
