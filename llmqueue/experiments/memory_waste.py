"""Policies that are not work-conserving waste memory (docs/model.md §6.8.6), and point
C with a real KV cache.

**Policies.**  The 1:1 workload of Table 1 (prompts and outputs U{10..1600},
every iteration 0.0372 s, M = 131,000 KV tokens), saturated, lazy admission
with recompute, whole prompts, no token budget.  Every started request holds
its KV each iteration whether it is served or not, so a policy reaches the
memory capacity mu = 3.2645 req/s only if it serves every started request in
every iteration:

* ``sarathi`` (and ``orca``, identical here) serves them all: about mu;
* ``vllm`` runs prefill-only iterations while a prompt fits, and the decoders
  wait holding their KV: a request's memory area grows to about 1.1 E[g], and
  throughput falls to about 0.90 mu;
* ``fastertransformer`` serves every started request in each decode phase
  (area about E[g]) but starts nobody until all of them finish: the cache sits
  about 30% empty, and throughput falls to about 0.72 mu.

**Point C with memory** (a teaching contrast for docs/model.md §9.1).  CodeLlama-34B
needs 2 * 48 layers * 8 KV heads * 128 * 2 bytes = 192 KiB per token; an
A100-80GB at 90% leaves some 29-40 k tokens beside the weights and
activations.  A point-C request (290 + 990 tokens, chunks of 29) holds
g = 779,240 token-iterations, so at lambda = 2.14 req/s it would need about
77,900 tokens on average: with a real cache point C is memory-bound and
unstable under every policy.  The ``point_c_kv`` row runs ``sarathi-128`` at
point C with that cache (``llmqueue run point-c --set kv=38000`` does the
same); the notes give the cache sizes the hardware module computes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from llmqueue.engine.options import RunOptions
from llmqueue.engine.results import Result
from llmqueue.experiments import memory_runs as mr
from llmqueue.experiments import nie_table1 as table1
from llmqueue.experiments import point_c
from llmqueue.experiments.base import Check, Param, Rows
from llmqueue.hardware import kv_capacity
from llmqueue.hardware import model as find_model
from llmqueue.models.latency import Staircase
from llmqueue.theory import memory

WORKLOAD = table1.BY_NAME["1:1"]
POLICIES = ("sarathi", "orca", "vllm", "fastertransformer")
HORIZON = 1200.0      # s; the second half is measured
#: docs/model.md §6.8.6's expected saturated throughput over mu, and how far a
#: run may stray (§6.8.1's 3% of mu).
EXPECTED = {"sarathi": 1.0, "orca": 1.0, "vllm": 0.90, "fastertransformer": 0.72}
TOLERANCE = table1.TOLERANCE
#: docs/model.md's memory figures: vllm's area about 1.1 E[g]; fastertransformer's
#: about E[g] with the cache about 70% used, against about 99% for sarathi.
AREA = {"vllm": 1.1, "fastertransformer": 1.0}
AREA_TOLERANCE = 0.05
UTILIZATION = {"sarathi": 0.99, "fastertransformer": 0.70}
UTILIZATION_TOLERANCE = 0.05
#: Point C with a real cache: docs/model.md's 38,000 tokens, and the hardware behind it.
POINT_C_KV = 38_000
GPU, MODEL = "A100-80GB", "codellama-34b"
ACTIVATIONS_GIB = (1.0, 3.0, 5.5)   # docs/model.md §6.8.6's 1-3 GiB, and §7.4's 5.5 GiB
POINT_C_HORIZON = 1000.0
#: Sarathi-128's prefill chunk at point C (batches of 29 prefill + 99 decode, docs/model.md §9.1).
POINT_C_CHUNK = 29


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """A saturated row per policy, then (unless ``point_c_kv`` is none) point C's
    ``sarathi-128`` with that KV cache."""
    M = params["kv"]
    horizon = options.horizon or HORIZON
    theory = table1.closed_forms(WORKLOAD, M)
    sizes = mr.uniform(*WORKLOAD.prompt), mr.uniform(*WORKLOAD.output)
    names = [x.strip() for x in str(params["policies"]).split(",") if x.strip()]
    if not names or any(x not in POLICIES for x in names):
        raise ValueError(f"policies must be comma-separated names from {', '.join(POLICIES)}; "
                         f"got {params['policies']!r}")
    out: Rows = []
    for name in names:
        stream = mr.saturated(theory["mu"], *sizes, M, options.seed or 0)
        result = mr.serve(stream, name, mr.constant_time(WORKLOAD.tau), M, horizon,
                          warmup=horizon / 2, bmax=None)
        s = result.summary
        result.add_figures(kv=M, mu=theory["mu"], mean_g=theory["mean_g"], mu_mem=theory["mu"],
                           binding="memory",  # no token budget: compute cannot bind
                           throughput_over_mu=_ratio(s["throughput_requests_per_s"], theory["mu"]),
                           area_over_g=_ratio(s["memory_area_mean"], theory["mean_g"]))
        out.append((name, result))
    if params["point_c_kv"] is not None:
        out.append(point_c_row(params["point_c_kv"], options.horizon or POINT_C_HORIZON))
    return out


def _ratio(value: Any, base: float) -> Any:
    return None if value is None else value / base


def point_c_row(M: int, horizon: float) -> Tuple[str, Result]:
    """``sarathi-128`` at point C with a cache of ``M`` tokens (the ``point-c``
    experiment's own run, figures over its second half), with ``mu_mem`` at
    b̄ = t(128) beside the experiment's own (the linear envelope at b*)."""
    params = point_c.EXPERIMENT.resolve({"scheduler": "sarathi", "kv": str(M)})
    [(label, result)] = point_c.run(params, RunOptions(horizon=horizon, warmup=horizon / 2))
    g = memory.kv_area(point_c.PREFILL, point_c.DECODE, POINT_C_CHUNK)
    t128 = Staircase().tokens_time(point_c.BMAX)
    result.add_figures(kv=M, mean_g=g, rate=1 / point_c.GAP,
                       mu_mem_t128=memory.mu_mem(M, g, t128), kv_needed=g * t128 / point_c.GAP)
    return f"point-c {label} kv={M}", result


def hardware_caches() -> List[Tuple[float, int]]:
    """``(activation GiB, KV tokens)`` of CodeLlama-34B on one A100-80GB at 90%
    (:func:`llmqueue.hardware.kv_capacity`) for each of :data:`ACTIVATIONS_GIB`."""
    return [(a, kv_capacity(GPU, MODEL, activation_gib=a)) for a in ACTIVATIONS_GIB]


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §6.8.6's saturated throughputs, memory areas and utilizations, and
    point C's binding resource."""
    s = {label: r.summary for label, r in rows}
    out = []
    for name in (n for n in POLICIES if n in s):
        v = s[name]
        r = v["throughput_over_mu"]
        out.append(Check(f"{name}: throughput about {EXPECTED[name]:.2f} mu "
                         f"(+- {TOLERANCE:.2f} mu)",
                         r is not None and abs(r - EXPECTED[name]) <= TOLERANCE,
                         f"{v['throughput_requests_per_s']:.4f} req/s = {r:.3f} mu"
                         if r is not None else "undefined"))
    if "sarathi" in s and "orca" in s:
        same = s["sarathi"]["completed"] == s["orca"]["completed"]
        out.append(Check("orca serves exactly as sarathi (whole prompts, no budget)", same,
                         f"{s['orca']['completed']} against {s['sarathi']['completed']} "
                         "requests finished"))
    out += _near(s, "area_over_g", "memory area per request", AREA, AREA_TOLERANCE,
                 ("g", ".3f", " E[g]"))
    out += _near(s, "kv_utilization", "KV utilization", UTILIZATION, UTILIZATION_TOLERANCE,
                 (".0%", ".1%", ""))
    for label, v in s.items():
        if label.startswith("point-c"):
            out.append(Check("point C with a real KV cache: memory binds and the run is unstable",
                             v["binding"] == "memory" and v["verdict"] == "unstable"
                             and v["mu_mem_t128"] < v["rate"],
                             f"binding {v['binding']}, verdict {v['verdict']}, mu_mem "
                             f"{v['mu_mem_t128']:.2f} (b̄ = t_128) / {v['mu_mem']:.2f} "
                             f"(envelope) against lambda {v['rate']:.2f} req/s"))
    return out


def _near(s: Dict[str, Any], key: str, what: str, targets: Dict[str, float],
          tolerance: float, formats: Tuple[str, str, str]) -> List[Check]:
    """One check per policy of ``targets`` that ran: its summary's ``key``
    within ``tolerance`` of the target.  ``formats``: the target's and the
    tolerance's format, the measured value's, and the unit after both."""
    spec, measured, unit = formats
    out = []
    for name, target in targets.items():
        if name in s:
            x = s[name][key]
            out.append(Check(f"{name}: {what} about {target:{spec}}{unit} "
                             f"(+- {tolerance:{spec}})",
                             x is not None and abs(x - target) <= tolerance,
                             f"{x:{measured}}{unit}" if x is not None else "undefined"))
    return out


def notes(rows: Rows, params: Dict[str, Any]) -> List[str]:
    """The hardware behind point C's cache."""
    s = {label: r.summary for label, r in rows}
    out = ["Memory-work conservation: a started request holds its KV in every iteration; "
           "a policy that leaves it unserved (vllm's prefill-only steps) or leaves the "
           "cache idle (fastertransformer's phases) finishes fewer requests per KV token."]
    shape = find_model(MODEL)
    g = memory.kv_area(point_c.PREFILL, point_c.DECODE, POINT_C_CHUNK)
    t128 = Staircase().tokens_time(point_c.BMAX)
    caches = ", ".join(f"{tokens:,} tokens with {a:g} GiB of activations (mu_mem "
                       f"{memory.mu_mem(tokens, g, t128):.2f} req/s)"
                       for a, tokens in hardware_caches())
    out.append(f"{MODEL}: {shape.kv_bytes_per_token():,} B of KV per token; on one {GPU} "
               f"(80 GiB in llmqueue's table; model §6.8.6's 71.2 GiB is 90% of 79.1 GiB) "
               f"at 90% with a 0.15 GiB reserve (llmqueue.hardware.kv_capacity): "
               f"{caches}. Every size is far below the ~77,900 tokens point C needs.")
    for label, v in s.items():
        if label.startswith("point-c"):
            out.append(f"{label}: g = {v['mean_g']:,.0f} token-iterations; at lambda = "
                       f"{v['rate']:.2f} req/s it needs about {v['kv_needed']:,.0f} KV tokens "
                       f"on average. mu_mem = {v['mu_mem_t128']:.2f} req/s at b̄ = t_128 "
                       f"(every batch up to 128 tokens costs t_128), {v['mu_mem']:.2f} on the "
                       f"linear envelope at b* (point-c's own figure, an upper bound); served "
                       f"{v['throughput_requests_per_s']:.2f} req/s over the second half.")
    return out


COLUMNS = [("throughput_requests_per_s", "req/s", "{:.4f}"),
           ("throughput_over_mu", "/ mu", "{:.3f}"), ("area_over_g", "area/E[g]", "{:.3f}"),
           ("kv_utilization", "KV used", "{:.1%}"),
           ("preemptions_per_iteration", "preempt/iter", "{:.3f}"),
           ("prefill_only_fraction", "prefill-only", "{:.0%}"),
           ("decode_only_fraction", "decode-only", "{:.0%}"),
           ("mu_mem", "mu_mem", "{:.3f}"), ("binding", "binding", "{}"),
           ("verdict", "verdict", "{}")]


EXPERIMENT = mr.register_memory(
    name="memory-waste",
    summary="model §6.8.6: saturated throughput of the four policies under memory (1:1 row), "
            "and point C with a real KV cache",
    params={"policies": Param("str", ",".join(POLICIES), "comma-separated policies"),
            "kv": Param("int", table1.CACHE, "KV cache size of the policy rows (tokens)", low=1),
            "point_c_kv": Param("int-or-none", POINT_C_KV,
                                "KV cache of the point-C row (tokens; none: no such row)",
                                low=1)},
    run=run, checks=checks, columns=COLUMNS, notes=notes, horizon=HORIZON)
