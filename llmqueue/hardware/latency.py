"""A batch-time model chosen by name (``latency=staircase|step|roofline``).

:func:`latency_model` is the one place the command line's latency keys become a
model: the paper's :class:`~llmqueue.models.latency.Staircase` from ``c``, ``a``
and ``b0``; docs/model.md §4's :class:`~llmqueue.models.latency.StepModel` with its
default coefficients; or the :class:`~llmqueue.hardware.roofline.Roofline` of
docs/model.md §7.3 for a named GPU and model, at the number formats
:func:`precision_of` reads from the ``precision``, ``attention_precision`` and
``kv_cache_dtype`` keys.
"""

from __future__ import annotations

from typing import Optional

from llmqueue.common import validation
from llmqueue.hardware.precision import Precision, dtype
from llmqueue.hardware.roofline import Roofline
from llmqueue.models.latency import LatencyModel, Staircase, StepModel

#: The names ``latency=`` takes.
LATENCIES = ("staircase", "step", "roofline")


def latency_model(kind: str = "staircase", *, c: float = Staircase.c, a: float = Staircase.a,
                  b0: int = Staircase.b0, gpu: Optional[str] = None,
                  model: Optional[str] = None, tp: int = 1,
                  efficiency: str = "default", precision: str = "bf16",
                  attention_precision: Optional[str] = None,
                  kv_cache_dtype: Optional[str] = None, kv_fraction: Optional[float] = None,
                  kv_of: str = "total") -> LatencyModel:
    """The model ``kind`` names: ``staircase`` (``c + a*ceil(b/b0)``; ``a = 0``
    with ``c > 0`` is a constant time), ``step`` (docs/model.md §4's step model, default
    coefficients) or ``roofline`` (needs ``gpu`` and ``model``; ``tp`` GPUs,
    ``efficiency`` ``default`` or ``ideal``, the formats of :func:`precision_of`,
    and the KV share of memory of
    :func:`~llmqueue.hardware.memory.kv_capacity`).  Bad input is a one-line
    ValueError."""
    validation.choice("latency", kind, LATENCIES)
    if kind == "staircase":
        return Staircase(c, a, b0)
    if kind == "step":
        return StepModel()
    if not gpu or not model:
        missing = " and ".join(k for k, v in (("gpu", gpu), ("model", model)) if not v)
        raise ValueError(f"latency=roofline needs gpu=NAME and model=NAME; {missing} not given")
    return Roofline(gpu, model, tp=tp, efficiency=efficiency,
                    precision=precision_of(precision, attention_precision, kv_cache_dtype),
                    kv_fraction=kv_fraction, kv_of=kv_of)


def precision_of(precision: str = "bf16", attention_precision: Optional[str] = None,
                 kv_cache_dtype: Optional[str] = None) -> Precision:
    """The :class:`~llmqueue.hardware.precision.Precision` of the command line's
    keys: ``precision`` the layer weights and GEMMs (``bf16``, ``fp16``, ``fp8``),
    ``attention_precision`` the QK^T/PV math (None: bf16), ``kv_cache_dtype`` the
    KV cache (None or ``auto``: the activations', bf16; vLLM's spellings
    ``fp8_e4m3`` and ``fp8_e5m2`` read as ``fp8``)."""
    kv = None if kv_cache_dtype is None or str(kv_cache_dtype).lower() == "auto" \
        else dtype("kv_cache_dtype", kv_cache_dtype)
    return Precision.of(dtype("precision", precision),
                        attention=None if attention_precision is None
                        else dtype("attention_precision", attention_precision), kv=kv)
