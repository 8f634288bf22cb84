"""What an experiment is: named parameters with types, defaults and bounds, the
run options it honours, and a function that turns parameters into labelled
runs.  The CLI, the sweeps and the scripts in ``scenarios/`` share these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import (Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from llmqueue.common.params import Param
from llmqueue.common.validation import MAX_INT, MAX_INT_TEXT, shown
from llmqueue.engine.kv import ADMISSIONS, KV, MAX_BLOCK_SIZE, RESTARTS
from llmqueue.engine.options import ALL_OPTIONS, RunOptions
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.presets import apply_preset
from llmqueue.hardware.efficiency import efficiency as find_efficiency
from llmqueue.hardware.efficiency import is_profile_path
from llmqueue.hardware.latency import LATENCIES, latency_model, precision_of
from llmqueue.hardware.memory import kv_capacity, kv_share
from llmqueue.hardware.precision import DTYPES
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.hardware.specs import model as find_model
from llmqueue.models.latency import LatencyModel
from llmqueue.models.workload import Workload
from llmqueue.policies.wait import Wait
from llmqueue.theory import wait

Rows = List[Tuple[str, Result]]
"""An experiment's output: ``(label, result)`` per row."""
Column = Tuple[str, str, str]
"""A table column: summary key, heading, format."""


class Check(NamedTuple):
    """One expectation an experiment checks on its own rows."""

    name: str
    passed: bool
    detail: str


#: Parameters of one engine, shared by every single-engine experiment.
ENGINE_PARAMS: Dict[str, Param] = {
    "scheduler": Param("str", "sarathi", "scheduling policy (see `llmqueue list`)"),
    "bmax": Param("int-or-none", 128, "token budget per iteration (none: unlimited)", low=1),
    "kmax": Param("int-or-none", 100, "most resident requests (none: unlimited)", low=1),
    "chunked": Param("bool", True, "split prompts across iterations"),
    "c": Param("float", 0.01128, "staircase constant time per batch (s)", low=0.0),
    "a": Param("float", 0.03547, "staircase time per step of b0 tokens (s; 0 with c > 0: "
               "a constant time)", low=0.0),
    "b0": Param("int", 128, "staircase step width (tokens)", low=1),
}


def read_gpu(name: str, text: str) -> Optional[str]:
    """The ``gpu`` key: ``none`` (or nothing) is ``None``; a name
    :func:`~llmqueue.hardware.specs.gpu` knows is itself; any other is a
    ValueError listing the known names."""
    return _known(find_gpu, text)


def read_model(name: str, text: str) -> Optional[str]:
    """The ``model`` key, as :func:`read_gpu` (names of
    :func:`~llmqueue.hardware.specs.model`)."""
    return _known(find_model, text)


def read_efficiency(name: str, text: str) -> str:
    """The ``efficiency`` key: a preset name or a profile's path, checked by
    reading it (:func:`~llmqueue.hardware.efficiency.efficiency`)."""
    value = str(text).strip()
    find_efficiency(value)
    return value.lower() if not is_profile_path(value) else value


def _known(lookup: Callable[[str], object], text: str) -> Optional[str]:
    value = str(text).strip()
    if value.lower() in ("", "none"):
        return None
    lookup(value)  # its message names the key and lists the known names
    return value


#: The number formats the precision keys take.
FORMATS = tuple(DTYPES)
#: The latency keys beside the staircase's c, a, b0 (quiet at their defaults).
LATENCY_PARAMS: Dict[str, Param] = {
    "latency": Param("str", "staircase", "batch-time model (step: model §4's step model; "
                     "roofline: model §7.3's, needs gpu and model)", LATENCIES),
    "gpu": Param("custom", None, "GPU, for latency=roofline or kv=auto",
                 reader=read_gpu, forms="a GPU name (e.g. A100-80GB) or none"),
    "model": Param("custom", None, "model or the path of its config.json, for "
                   "latency=roofline or kv=auto",
                   reader=read_model,
                   forms="a model name (e.g. codellama-34b), the path of a Hugging Face "
                   "config.json, or none"),
    "tp": Param("int", 1, "GPUs per engine (tensor parallel), for roofline and kv=auto", low=1),
    "efficiency": Param("custom", "default", "roofline efficiency: a preset or a profile "
                        "llmqueue calibrate wrote", reader=read_efficiency,
                        forms="default, ideal, trtllm, or the path of a profile .json"),
    "precision": Param("str", "bf16", "format of the layer weights and their GEMMs, for "
                       "roofline and kv=auto (fp8: 1 byte at the GPU's FP8 rate; the LM head, "
                       "attention math and KV cache stay bf16 unless set)", FORMATS),
    "attention_precision": Param("str", "bf16", "format of attention's QK/PV math, for "
                                 "roofline (fp8: FP8 attention kernels)", FORMATS),
    "kv_cache_dtype": Param("str", "auto", "KV-cache element, for roofline and kv=auto "
                            "(auto: bf16; fp8 halves the bytes per token)",
                            ("auto",) + FORMATS + ("fp8_e4m3", "fp8_e5m2")),
}
LATENCY_PARAMS = {name: replace(p, quiet_default=True) for name, p in LATENCY_PARAMS.items()}
ENGINE_PARAMS.update(LATENCY_PARAMS)


def read_kv(name: str, text: str) -> Union[int, str, None]:
    """The ``kv`` key: tokens (an integer >= 1), ``auto`` or ``none``."""
    value = str(text).strip().lower()
    if value in ("none", "auto"):
        return None if value == "none" else value
    try:
        tokens = int(value.replace("_", ""))
    except ValueError:
        tokens = 0
    if not 1 <= tokens <= MAX_INT:
        raise ValueError(f"{name} must be an integer from 1 to {MAX_INT_TEXT} (tokens), auto "
                         f"(model §7.4's capacity for gpu and model) or none; got {shown(text)}")
    return tokens


#: The KV-cache keys, part of every single-engine experiment's parameters.
MEMORY_PARAMS: Dict[str, Param] = {
    "kv": Param("custom", None, "KV cache size in tokens (auto: model §7.4's capacity of model "
                "on tp x gpu; none: no memory limit)", reader=read_kv,
                forms="an integer >= 1, auto or none"),
    "kv_block": Param("int", 1, "KV block size (tokens)", low=1, high=MAX_BLOCK_SIZE),
    "kv_admission": Param("str", "lazy", "when KV blocks are taken", ADMISSIONS),
    "kv_preemption": Param("str", "recompute", "what a KV overflow does (swap: needs kv_swap)",
                           ("recompute", "none", "swap")),
    "kv_restart": Param("str", "keep", "a preempted request's new work", RESTARTS),
    "kv_watermark": Param("float-or-none", None, "share of KV blocks a new start leaves free "
                          "(none: 0.01 for prompt, else 0)", low=0.0),
    "kv_swap": Param("int-or-none", None, "CPU swap pool in tokens (kv_preemption=swap)", low=1),
    "kv_swap_cost": Param("float", 0.0, "seconds per KV token moved to or from the swap pool",
                          low=0.0),
    "kv_max_tokens": Param("int-or-none", None, "tokens kv_admission=peak reserves per request "
                           "(none: its vp + vd)", low=1),
    "kv_cache_free_gpu_mem_fraction": Param(
        "float-or-none", None, "kv=auto: the KV pool as a share of the memory the weights and "
        "activations leave free (TensorRT-LLM's setting; none: gpu_memory_utilization)",
        above=0.0, high=1.0),
    "gpu_memory_utilization": Param(
        "float-or-none", None, "kv=auto: the share of all memory for weights, activations and "
        "the KV pool (vLLM's setting; none: 0.9)", above=0.0, high=1.0),
    "prefix": Param("bool", False, "prefix caching: requests whose prompts begin alike share "
                    "those KV blocks (needs kv; workloads with prefix ids: prefix_groups, "
                    "sessions, Mooncake traces)"),
}
#: The keys that state the KV pool of kv=auto as an engine does.
SHARE_KEYS = ("kv_cache_free_gpu_mem_fraction", "gpu_memory_utilization")
# added after sweeps already drew run seeds from every parameter: at their
# defaults they stay out of the seeds, so runs without memory keep their numbers
MEMORY_PARAMS = {name: replace(p, quiet_default=True) for name, p in MEMORY_PARAMS.items()}
ENGINE_PARAMS.update(MEMORY_PARAMS)
#: WAIT's quota (docs/model.md §6.5: scheduler ``wait`` with ``wait_n=N``), quiet at its
#: default like the memory keys; WAIT needs a KV cache, so networks leave it out.
WAIT_PARAMS: Dict[str, Param] = {
    "wait_n": Param("int-or-none", None, "WAIT's group of whole prompts (scheduler=wait, "
                    "which ignores bmax; none: wait_thresholds from kv, vp and vd)", low=1,
                    quiet_default=True)}
ENGINE_PARAMS.update(WAIT_PARAMS)


def engine_params(memory: bool = True, **defaults: object) -> Dict[str, Param]:
    """:data:`ENGINE_PARAMS` with some defaults changed (same types and help),
    e.g. ``engine_params(bmax=512, kmax=None)``; ``memory=False`` leaves out
    the KV-cache keys."""
    unknown = set(defaults) - set(ENGINE_PARAMS)
    if unknown:
        raise ValueError(f"not engine parameters: {', '.join(sorted(unknown))}; allowed: "
                         f"{', '.join(ENGINE_PARAMS)}")
    return {name: replace(p, default=defaults[name]) if name in defaults else p
            for name, p in ENGINE_PARAMS.items()
            if memory or (name not in MEMORY_PARAMS and name not in WAIT_PARAMS)}


def engine_kwargs(p: Mapping[str, Any]) -> Dict[str, Any]:
    """Keyword arguments of :func:`llmqueue.simulate` from engine parameters."""
    kv = kv_of(p)
    return {"policy": policy_of(p, kv), "bmax": p["bmax"], "kmax": p["kmax"],
            "chunked": p["chunked"], "latency": latency_of(p),
            "kv": kv}


def policy_of(p: Mapping[str, Any], kv: Optional[KV]) -> object:
    """The policy ``p["scheduler"]`` names; ``wait`` becomes ``Wait(n=wait_n)``,
    with ``n`` from :func:`~llmqueue.theory.wait.wait_thresholds` (the cache
    less its watermark) when ``wait_n`` is none and ``vp``, ``vd`` are fixed.
    ``wait_n`` with another scheduler is an error, never ignored."""
    n = p.get("wait_n")
    if p["scheduler"] != Wait.name:
        if n is not None:
            raise ValueError(f"wait_n needs scheduler=wait; got scheduler={p['scheduler']!r}")
        return p["scheduler"]
    vp, vd = p.get("vp"), p.get("vd")
    if n is None and kv is not None and isinstance(vp, int) and isinstance(vd, int):
        n = wait.wait_thresholds([(vp, vd, 1)], kv.tokens, headroom=kv.reserve * kv.block_size,
                                   block_size=kv.block_size)[0]
    return Wait(n=n)


def latency_of(p: Mapping[str, Any]) -> LatencyModel:
    """The batch-time model the latency keys ask for
    (:func:`~llmqueue.hardware.latency.latency_model`); keys that the chosen
    model does not read, set away from their defaults, are an error."""
    kind = p.get("latency", "staircase")
    unused = [] if kind == "staircase" else \
        [k for k in ("c", "a", "b0") if p.get(k, ENGINE_PARAMS[k].default) !=
         ENGINE_PARAMS[k].default]
    roofline_only = ("efficiency", "attention_precision")
    hardware = roofline_only if p.get("kv") == "auto" else \
        ("gpu", "model", "tp", "precision", "kv_cache_dtype") + roofline_only
    if kind != "roofline":
        unused += [k for k in hardware if p.get(k, ENGINE_PARAMS[k].default) !=
                   ENGINE_PARAMS[k].default]
    if unused:
        users = {"c": "latency=staircase", "a": "latency=staircase", "b0": "latency=staircase",
                 **{k: "latency=roofline" for k in roofline_only}}
        need = sorted({users.get(k, "latency=roofline or kv=auto") for k in unused})
        raise ValueError(f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not read "
                         f"with latency={kind}: {' / '.join(need)} reads it")
    fraction, of = _share(p)
    return latency_model(kind, c=p["c"], a=p["a"], b0=p["b0"], gpu=p.get("gpu"),
                         model=p.get("model"), tp=p.get("tp", 1),
                         efficiency=p.get("efficiency", "default"), **_formats(p),
                         kv_fraction=fraction, kv_of=of)


def _formats(p: Mapping[str, Any]) -> Dict[str, Any]:
    """The precision keys of ``p`` as :func:`~llmqueue.hardware.latency.latency_model`
    takes them."""
    return {"precision": p.get("precision", "bf16"),
            "attention_precision": p.get("attention_precision", "bf16"),
            "kv_cache_dtype": p.get("kv_cache_dtype", "auto")}


def _share(p: Mapping[str, Any]) -> Tuple[Optional[float], str]:
    """``(fraction, of)`` of :func:`~llmqueue.hardware.memory.kv_capacity` from the
    KV-share keys of ``p`` (:func:`~llmqueue.hardware.memory.kv_share`)."""
    return kv_share(p.get("kv_cache_free_gpu_mem_fraction"), p.get("gpu_memory_utilization"))


def kv_of(p: Mapping[str, Any]) -> Optional[KV]:
    """The :class:`~llmqueue.engine.kv.KV` the ``kv*`` parameters ask for
    (``None`` when ``kv`` is none or absent; other ``kv_*`` keys set away from
    their defaults without ``kv`` are an error, never ignored).  ``kv=auto`` is
    docs/model.md §7.4's :func:`~llmqueue.hardware.memory.kv_capacity` of ``model`` on
    ``tp`` GPUs ``gpu`` at the precision keys' formats, its share of memory
    stated by ``kv_cache_free_gpu_mem_fraction`` or ``gpu_memory_utilization``
    (neither: 0.9 of the whole)."""
    shares = [name for name in SHARE_KEYS if p.get(name) is not None]
    if shares and p.get("kv") != "auto":
        raise ValueError(f"{', '.join(shares)} {'needs' if len(shares) == 1 else 'need'} "
                         f"kv=auto (the capacity from gpu and model); got kv={p.get('kv')}")
    if p.get("kv") is None:
        changed = [name for name, param in MEMORY_PARAMS.items()
                   if name != "kv" and p.get(name, param.default) != param.default]
        if changed:
            verb = "needs" if len(changed) == 1 else "need"
            raise ValueError(f"{', '.join(changed)} {verb} a KV cache: set kv=TOKENS too "
                             "(kv is none)")
        return None
    tokens = p["kv"]
    if tokens == "auto":
        if not p.get("gpu") or not p.get("model"):
            raise ValueError("kv=auto needs gpu=NAME and model=NAME (model §7.4's capacity of "
                             "that model on tp GPUs); give them or kv=TOKENS")
        fraction, of = _share(p)
        tokens = kv_capacity(p["gpu"], p["model"], p.get("tp", 1), fraction=fraction, of=of,
                             precision=precision_of(**_formats(p)))
    return KV(capacity_tokens=tokens, block_size=p["kv_block"],
              admission=p["kv_admission"], preemption=p["kv_preemption"],
              restart=p["kv_restart"], watermark=p["kv_watermark"],
              swap_tokens=p.get("kv_swap"), swap_seconds_per_token=p.get("kv_swap_cost", 0.0),
              max_tokens=p.get("kv_max_tokens"), prefix=p.get("prefix", False))


def each_scheduler(params: Mapping[str, Any], schedulers: Sequence[str],
                   workload: Workload, options: RunOptions,
                   horizon: Optional[float] = None) -> Rows:
    """A ``(scheduler, result)`` row for each of ``schedulers`` (or only
    ``params["scheduler"]`` when set), all on ``workload`` with the engine
    parameters of ``params``, until ``options.horizon`` (else ``horizon``)."""
    names = schedulers if params["scheduler"] is None else (params["scheduler"],)
    span = options.horizon or horizon
    return [(str(name), simulate(workload, horizon=span, **options.logs(),
                                 **engine_kwargs({**params, "scheduler": name})))
            for name in names]


@dataclass(frozen=True)
class Experiment:
    """A named experiment the CLI can run and a sweep can repeat."""

    name: str
    """The name ``llmqueue run`` takes."""
    summary: str
    """One line: what it runs."""
    params: Dict[str, Param]
    """Its ``--set`` parameters."""
    run: Callable[[Dict[str, Any], RunOptions], Rows]
    """``run(params, options)``: the rows (call :meth:`execute`, which checks options)."""
    horizon: Optional[float] = None
    """Simulated seconds when none is given (``None``: it runs until its requests finish)."""
    seeded: bool = False
    """Whether it draws random numbers (then ``seed`` matters)."""
    options: FrozenSet[str] = ALL_OPTIONS
    """The :class:`~llmqueue.engine.options.RunOptions` it honours."""
    checks: Optional[Callable[[Rows], List[Check]]] = None
    """Expectations it checks on its rows (printed PASS/FAIL)."""
    columns: Optional[Sequence[Column]] = None
    """The table it prints, when not the standard one."""
    notes: Optional[Callable[[Rows, Dict[str, Any]], List[str]]] = None
    """Lines printed under the table, when not the standard drift notes."""
    network: bool = field(default=False)
    """Whether it runs several engines (per-engine and total rows)."""

    def resolve(self, overrides: Mapping[str, str]) -> Dict[str, Any]:
        """Defaults with ``--set`` overrides parsed and checked, then an engine
        preset (``engine``) filled in where no override gave the key."""
        values = {name: p.default for name, p in self.params.items()}
        for name, text in overrides.items():
            if name not in self.params:
                raise ValueError(f"{self.name} has no parameter {name!r}; allowed: "
                                 f"{', '.join(self.params)}")
            values[name] = self.params[name].parse(name, text)
        return self.with_preset(values, overrides)

    def with_preset(self, values: Mapping[str, Any], explicit: Iterable[str]) -> Dict[str, Any]:
        """``values`` with the engine preset they name (``engine``,
        :func:`~llmqueue.experiments.presets.apply_preset`) filled in, but for
        the keys named in ``explicit``; as they are without an ``engine`` key."""
        return apply_preset(values, explicit)

    def check_options(self, options: RunOptions,
                      flags: Optional[Mapping[str, str]] = None) -> None:
        """Raise ``ValueError`` naming any option asked for that this
        experiment cannot honour (never ignore one silently), as ``flags`` names it."""
        honoured = self.options if self.seeded else self.options - {"seed"}
        refused = sorted((flags or {}).get(name, name) for name in options.asked() - honoured)
        if refused:
            allowed = ", ".join(sorted(honoured)) or "none"
            why = " (it runs a network of engines, not a single-engine run)" \
                if self.network else ""
            raise ValueError(f"{self.name} does not support {', '.join(refused)}{why}; "
                             f"it supports: {allowed}")

    def execute(self, params: Dict[str, Any],
                options: Optional[RunOptions] = None) -> Rows:
        """Check ``options`` against what this experiment honours, then run it."""
        options = RunOptions() if options is None else options
        self.check_options(options)
        return self.run(params, options)


REGISTRY: Dict[str, Experiment] = {}
"""Every registered experiment by name, in registration order."""


def register(experiment: Experiment) -> Experiment:
    """Add ``experiment`` to the CLI's list."""
    REGISTRY[experiment.name] = experiment
    return experiment
