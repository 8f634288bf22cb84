"""KV-cache memory from the hardware (docs/model.md §7.4).

:func:`kv_capacity` is how many tokens of KV cache fit beside the weights:
``floor((utilization*tp*memory - params*w_bytes - tp*activation - reserve) / kappa)``
with ``kappa`` the KV bytes per token (whole model, all ``tp`` GPUs); or, as
TensorRT-LLM states it, a share of the memory the weights and activations leave
free.
:func:`kmax_from_memory` turns a capacity into a batch-slot limit for a
workload's request sizes.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple, Union

from llmqueue.common import validation
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.precision import precision as find_precision
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.hardware.specs import model as find_model
from llmqueue.models.sizes import Empirical, Fixed, Mixture, SizeLaw, UniformInt

GiB = 2 ** 30

#: The reserve in GiB: one GPU, and several (tensor parallel).
RESERVE_GIB = {True: 0.15, False: 0.6}
#: How :func:`kv_capacity`'s share is stated: of the whole memory (vLLM) or of the
#: memory the weights and activations leave free (TensorRT-LLM).
SHARES = ("total", "free")


def kv_capacity(gpu: Union[str, GPU], model: Union[str, ModelShape], tp: int = 1,
                utilization: float = 0.9, activation_gib: float = 5.5,
                reserve_gib: Optional[float] = None, *, fraction: Optional[float] = None,
                of: str = "total", precision: Union[str, Precision, None] = None) -> int:
    """KV-cache capacity in tokens of ``model`` on ``tp`` GPUs of type ``gpu``.

    The KV pool is a share ``f`` (``fraction``, else ``utilization``) of memory, as
    engines state it:

    * ``of="total"`` (vLLM's ``gpu_memory_utilization``; the default, 0.9):
      ``floor((f*tp*memory - weights - tp*activation_gib GiB - reserve_gib GiB) / kappa)``;
    * ``of="free"`` (TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction``): the share
      of what the weights, activations and reserve leave free,
      ``floor(f*(tp*memory - weights - tp*activation_gib GiB - reserve_gib GiB) / kappa)``.

    ``weights`` and ``kappa`` (KV bytes per token) are at ``precision``'s formats
    (:class:`~llmqueue.hardware.precision.Precision` or a format name; None: the
    record's own sizes, 16-bit).  ``reserve_gib`` defaults to 0.15 at ``tp = 1``
    and 0.6 otherwise.  A capacity <= 0 is a ValueError ("model does not fit")
    with the numbers.

    Examples:
        CodeLlama-34B on one A100-80GB, and with TensorRT-LLM's 0.95 of free memory.

        >>> kv_capacity("a100-80gb", "codellama-34b")
        19106
        >>> kv_capacity("a100-80gb", "codellama-34b", fraction=0.95, of="free")
        59656
    """
    g, m = find_gpu(gpu), find_model(model)
    validation.positive_int("tp", tp)
    validation.choice("of", of, SHARES)
    if fraction is not None and utilization != 0.9:
        raise ValueError(f"give the KV share once: fraction={fraction!r} or utilization="
                         f"{utilization!r}, not both")
    name = "utilization" if fraction is None else "fraction"
    share = utilization if fraction is None else fraction
    if not 0 < validation.fraction(name, share):
        raise ValueError(f"{name} must be a number in (0, 1], got {share!r}")
    validation.nonnegative_number("activation_gib", activation_gib)
    reserve = RESERVE_GIB[tp == 1] if reserve_gib is None else \
        validation.nonnegative_number("reserve_gib", reserve_gib)
    p = find_precision(precision)
    weights = p.weight_memory(m)
    kappa = p.model(m).kv_bytes_per_token()
    if of == "total":
        usable = share * tp * g.memory
        free = usable - weights - tp * activation_gib * GiB - reserve * GiB
        pool = free
    else:
        usable = tp * g.memory
        free = usable - weights - tp * activation_gib * GiB - reserve * GiB
        pool = share * free
    tokens = math.floor(pool / kappa)
    if tokens <= 0:
        total = f"{share:g} x " if of == "total" else ""
        kept = "" if of == "total" else f" ({share:g} of them for KV: {pool / GiB:.2f} GiB)"
        raise ValueError(
            f"model does not fit: {m.name} on {tp} x {g.name}: {total}{tp} x "
            f"{g.memory / GiB:.2f} GiB = {usable / GiB:.2f} GiB usable, weights "
            f"{weights / GiB:.2f} GiB, activations {tp} x {activation_gib:g} GiB, reserve "
            f"{reserve:g} GiB leave {free / GiB:.2f} GiB{kept}, {tokens} tokens of "
            f"{kappa:g} bytes")
    return tokens


def kv_share(free_fraction: Optional[float] = None,
             utilization: Optional[float] = None) -> Tuple[Optional[float], str]:
    """``(fraction, of)`` of :func:`kv_capacity` from an engine's setting:
    TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` (``free_fraction``, a share
    of the memory left free) or vLLM's ``gpu_memory_utilization``
    (``utilization``, a share of the whole memory); neither is the default, 0.9
    of the whole.  Both is a ValueError: an engine states one."""
    if free_fraction is not None and utilization is not None:
        raise ValueError("kv_cache_free_gpu_mem_fraction (TensorRT-LLM) and "
                         "gpu_memory_utilization (vLLM) state the same KV pool two ways; "
                         "give one")
    if free_fraction is not None:
        return free_fraction, "free"
    return utilization, "total"


SizeLike = Union[int, float, SizeLaw]


def law_max(name: str, law: SizeLike) -> float:
    """The largest value a size law can draw (a plain number is itself).
    Fixed, UniformInt, Empirical and mixtures of them have one; the others are
    unbounded, which is a ValueError (give a number instead)."""
    if isinstance(law, Fixed):
        return float(law.value)
    if isinstance(law, UniformInt):
        return float(law.high - 1)
    if isinstance(law, Empirical):
        return float(law._values.max())  # the observed counts it resamples
    if isinstance(law, Mixture):
        return max(law_max(name, part) for part in law.laws)
    if isinstance(law, SizeLaw):
        raise ValueError(f"{name}: {law!r} has no maximum; with mode='max' give {name} as "
                         f"Fixed, UniformInt, Empirical, a mixture of them, or a number")
    return validation.nonnegative_number(name, law)


def law_mean(name: str, law: SizeLike) -> float:
    """The mean of a size law (a plain number is itself)."""
    if isinstance(law, SizeLaw):
        return float(law.mean)
    return validation.nonnegative_number(name, law)


def kmax_from_memory(capacity: int, vp: SizeLike, vd: SizeLike, mode: str = "max") -> int:
    """Batch slots the KV capacity allows: ``floor(capacity / (vp + vd))`` with the
    prompt and decode sizes at the size laws' maximum (``mode="max"``, Vidur's rule:
    every resident request may grow to its full size) or mean (``mode="mean"``).
    ``vp`` and ``vd`` are size laws or numbers.  At least 1."""
    validation.positive_int("capacity", capacity)
    validation.choice("mode", mode, ("max", "mean"))
    size = law_max if mode == "max" else law_mean
    tokens = size("vp", vp) + size("vd", vd)
    if tokens <= 0:
        raise ValueError(f"vp + vd must be > 0 tokens per request, got {tokens:g}")
    if tokens > capacity:
        raise ValueError(f"one request of vp + vd = {tokens:g} tokens ({mode}) does not fit "
                         f"in the KV capacity of {capacity} tokens")
    return int(capacity // tokens)
