"""KV-cache memory from the hardware (SPEC 8.4).

:func:`kv_capacity` is how many tokens of KV cache fit beside the weights:
``floor((utilization*tp*memory - params*w_bytes - tp*activation - reserve) / kappa)``
with ``kappa`` the KV bytes per token (whole model, all ``tp`` GPUs).
:func:`kmax_from_memory` turns a capacity into a batch-slot limit for a
workload's request sizes.
"""

from __future__ import annotations

import math
from typing import Optional, Union

from llmqueue.common import validation
from llmqueue.hardware.specs import GPU, ModelShape
from llmqueue.hardware.specs import gpu as find_gpu
from llmqueue.hardware.specs import model as find_model
from llmqueue.models.sizes import Empirical, Fixed, Mixture, SizeLaw, UniformInt

GiB = 2 ** 30

#: The reserve of 8.4 in GiB: one GPU, and several (tensor parallel).
RESERVE_GIB = {True: 0.15, False: 0.6}


def kv_capacity(gpu: Union[str, GPU], model: Union[str, ModelShape], tp: int = 1,
                utilization: float = 0.9, activation_gib: float = 5.5,
                reserve_gib: Optional[float] = None) -> int:
    """KV-cache capacity in tokens of ``model`` on ``tp`` GPUs of type ``gpu``.

    ``floor((utilization*tp*memory - params*weight_bytes - tp*activation_gib GiB
    - reserve_gib GiB) / kv_bytes_per_token)``; ``reserve_gib`` defaults to 0.15 at
    ``tp = 1`` and 0.6 otherwise.  A capacity <= 0 is a ValueError ("model does not
    fit") with the numbers.

    Examples:
        SPEC 8.4's worked example: CodeLlama-34B on one A100-80GB.

        >>> kv_capacity("a100-80gb", "codellama-34b")
        19106
    """
    g, m = find_gpu(gpu), find_model(model)
    validation.positive_int("tp", tp)
    if not 0 < validation.fraction("utilization", utilization):
        raise ValueError(f"utilization must be a number in (0, 1], got {utilization!r}")
    validation.nonnegative_number("activation_gib", activation_gib)
    reserve = RESERVE_GIB[tp == 1] if reserve_gib is None else \
        validation.nonnegative_number("reserve_gib", reserve_gib)
    usable = utilization * tp * g.memory
    weights = m.params() * m.weight_bytes
    free = usable - weights - tp * activation_gib * GiB - reserve * GiB
    tokens = math.floor(free / m.kv_bytes_per_token())
    if tokens <= 0:
        raise ValueError(
            f"model does not fit: {m.name} on {tp} x {g.name}: {utilization:g} x {tp} x "
            f"{g.memory / GiB:.2f} GiB = {usable / GiB:.2f} GiB usable, weights "
            f"{weights / GiB:.2f} GiB, activations {tp} x {activation_gib:g} GiB, reserve "
            f"{reserve:g} GiB leave {free / GiB:.2f} GiB, {tokens} tokens of "
            f"{m.kv_bytes_per_token():g} bytes")
    return tokens


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
