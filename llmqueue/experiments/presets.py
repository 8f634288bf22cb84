"""Serving engines' own settings as one key: ``--set engine=trtllm|vllm|sglang``,
and when a request's first token appears (``first_token``).

A preset sets the engine keys of llmqueue that each engine's documented
defaults stand for; a key given explicitly (``--set``, ``--scheduler``, a
sweep's grid or fixed values) keeps its value.  The memory keys apply only
with a KV cache (``kv``), the KV-pool share only with ``kv=auto``.  Every
preset emits the first token with the prefill, as those engines do.  The
defaults as documented (sources: each engine's own reference pages and
argument code, read for the versions named):

* ``trtllm`` (TensorRT-LLM 1.x, LLM API ``TorchLlmArgs``/``BaseLlmArgs``):
  ``max_num_tokens`` 8192 = ``bmax``; ``max_batch_size`` 2048 = ``kmax``;
  ``enable_chunked_prefill`` False = ``chunked=false``; the capacity scheduler
  ``GUARANTEED_NO_EVICT`` (the default of ``SchedulerConfig``; "a started
  request is never paused": its prompt and whole output are reserved at its
  start) = ``kv_admission=peak`` (which reserves the ``vp + vd - 1`` tokens a
  request processes when its prefill emits the first token: one token fewer
  than the prompt and ``max_new_tokens`` TensorRT-LLM reserves;
  ``MAX_UTILIZATION``, which may pause requests, is ``lazy``: set it
  explicitly); in-flight batching puts the
  running generation tokens and the context requests that fit in one batch =
  ``sarathi``; ``KvCacheConfig.tokens_per_block`` 32 = ``kv_block``;
  ``free_gpu_memory_fraction`` 0.9 = ``kv_cache_free_gpu_mem_fraction``.
  ``trtllm-bench`` picks ``max_num_tokens`` and ``max_batch_size`` per dataset
  by its own heuristics: give those explicitly to match a benchmark.
* ``vllm`` (vLLM V1, ``EngineArgs``): the scheduler serves the running
  requests' tokens first, then the waiting prompts in chunks (chunked prefill
  is always on) = ``sarathi``, ``chunked=true``; blocks are allocated per step
  for the tokens scheduled, with recompute preemption = ``lazy``, no
  watermark; ``block_size`` 16; ``gpu_memory_utilization`` 0.9; the server's
  (``vllm serve``) ``max_num_batched_tokens``/``max_num_seqs`` on a GPU of 70
  GiB or more other than an A100: 8192/1024, else 2048/256 (the offline
  ``LLM`` class uses 16384/1024 and 8192/256: give them explicitly).
* ``sglang`` (SGLang ``ServerArgs``): ``schedule_policy`` fcfs; a new prefill
  batch runs alone whenever one can be formed, decodes otherwise
  (``enable_mixed_chunk`` False) = ``vllm`` (the scheduler, not the engine);
  ``chunked_prefill_size`` = ``bmax``: 2048 under 35 GiB, 8192 under 160 GiB
  (H100, H200, A100-80GB), 16384 above; ``page_size`` 1 = ``kv_block``;
  ``max_running_requests`` = half the KV pool's tokens, which memory binds
  first = ``kmax=none``; it admits a prompt when the prompt and an estimate of
  the running requests' remaining outputs fit, and retracts (recomputes) on
  overflow: llmqueue's nearest mode is ``prompt`` admission, no watermark;
  ``mem_fraction_static`` about 0.88 = ``gpu_memory_utilization``.

No preset (``engine=none``, the default) changes nothing.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional

from llmqueue.common.params import Param
from llmqueue.engine.first_token import FIRST_TOKENS
from llmqueue.hardware.specs import gpu as find_gpu

#: The presets ``engine`` takes (``none``: no preset).
ENGINES = ("none", "trtllm", "vllm", "sglang")

#: Keys a preset sets only when the run has a KV cache.
_MEMORY = ("kv_admission", "kv_block", "kv_watermark")
#: Keys a preset sets only with ``kv=auto`` (the KV pool's share of memory).
_SHARE = ("kv_cache_free_gpu_mem_fraction", "gpu_memory_utilization")

#: The serving keys of single-engine experiments (quiet at their defaults: runs
#: that do not set them keep their seeds and numbers).
SERVING_PARAMS: Dict[str, Param] = {
    "engine": Param("str", "none", "a serving engine's documented scheduler defaults "
                    "(scheduler, bmax, kmax, chunked, first_token; with kv the admission, "
                    "block and watermark; with kv=auto the pool's share); keys set "
                    "explicitly win", ENGINES, quiet_default=True),
    "first_token": Param("str", "decode", "when a request's first output token appears: "
                         "decode (the paper's model: its first decode iteration) or prefill "
                         "(with the iteration completing its prompt, as vLLM and "
                         "TensorRT-LLM do)", FIRST_TOKENS, quiet_default=True),
}

_GIB = 2**30


def _memory(gpu: Optional[str]) -> Optional[float]:
    """Memory of the GPU named ``gpu`` in bytes (``None`` without one)."""
    return None if gpu is None else float(find_gpu(gpu).memory)


def preset(engine: str, gpu: Optional[str] = None) -> Dict[str, Any]:
    """The settings of ``engine`` (one of :data:`ENGINES` but ``none``) as llmqueue
    keys, for the GPU named ``gpu`` where its defaults depend on it (none
    named: an 80 GB H100's)."""
    memory = _memory(gpu)
    if engine == "trtllm":
        return {"scheduler": "sarathi", "chunked": False, "bmax": 8192, "kmax": 2048,
                "first_token": "prefill", "kv_admission": "peak", "kv_block": 32,
                "kv_watermark": 0.0, "kv_cache_free_gpu_mem_fraction": 0.9}
    if engine == "vllm":
        large = memory is None or (memory >= 70 * _GIB and "a100" not in str(gpu).lower())
        return {"scheduler": "sarathi", "chunked": True, "bmax": 8192 if large else 2048,
                "kmax": 1024 if large else 256, "first_token": "prefill",
                "kv_admission": "lazy", "kv_block": 16, "kv_watermark": 0.0,
                "gpu_memory_utilization": 0.9}
    if engine == "sglang":
        chunk = 8192 if memory is None or 35 * _GIB <= memory < 160 * _GIB else \
            2048 if memory < 35 * _GIB else 16384
        return {"scheduler": "vllm", "chunked": True, "bmax": chunk, "kmax": None,
                "first_token": "prefill", "kv_admission": "prompt", "kv_block": 1,
                "kv_watermark": 0.0, "gpu_memory_utilization": 0.88}
    raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")


def apply_preset(values: Mapping[str, Any], explicit: Iterable[str]) -> Dict[str, Any]:
    """``values`` (an experiment's resolved parameters) with the preset that
    ``values["engine"]`` names filled in: every key it sets that the
    experiment has, but those named in ``explicit`` (given by the user), the
    memory keys without a KV cache, and the KV pool's share without ``kv=auto``."""
    out = dict(values)
    name = out.get("engine", "none")
    if name in (None, "none"):
        return out
    given = set(explicit)
    for key, value in preset(name, out.get("gpu")).items():
        if key in given or key not in out:
            continue
        if (key in _MEMORY and out.get("kv") is None) or \
                (key in _SHARE and out.get("kv") != "auto"):
            continue
        if key in _SHARE and any(k in given for k in _SHARE):
            continue  # the user stated the pool's share the other way
        out[key] = value
    return out
