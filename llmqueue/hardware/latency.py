"""A batch-time model chosen by name (SPEC 9's ``latency=staircase|step|roofline``).

:func:`latency_model` is the one place the command line's latency keys become a
model: the paper's :class:`~llmqueue.models.latency.Staircase` from ``c``, ``a``
and ``b0``; SPEC 4's :class:`~llmqueue.models.latency.StepModel` with its
default coefficients; or the :class:`~llmqueue.hardware.roofline.Roofline` of
SPEC 8.3 for a named GPU and model.
"""

from __future__ import annotations

from typing import Optional

from llmqueue.common import validation
from llmqueue.hardware.roofline import Roofline
from llmqueue.models.latency import LatencyModel, Staircase, StepModel

#: The names ``latency=`` takes.
LATENCIES = ("staircase", "step", "roofline")


def latency_model(kind: str = "staircase", *, c: float = Staircase.c, a: float = Staircase.a,
                  b0: int = Staircase.b0, gpu: Optional[str] = None,
                  model: Optional[str] = None, tp: int = 1,
                  efficiency: str = "default") -> LatencyModel:
    """The model ``kind`` names: ``staircase`` (``c + a*ceil(b/b0)``; ``a = 0``
    with ``c > 0`` is a constant time), ``step`` (SPEC 4's step model, default
    coefficients) or ``roofline`` (needs ``gpu`` and ``model``; ``tp`` GPUs,
    ``efficiency`` ``default`` or ``ideal``).  Bad input is a one-line ValueError."""
    validation.choice("latency", kind, LATENCIES)
    if kind == "staircase":
        return Staircase(c, a, b0)
    if kind == "step":
        return StepModel()
    if not gpu or not model:
        missing = " and ".join(k for k, v in (("gpu", gpu), ("model", model)) if not v)
        raise ValueError(f"latency=roofline needs gpu=NAME and model=NAME; {missing} not given")
    return Roofline(gpu, model, tp=tp, efficiency=efficiency)
