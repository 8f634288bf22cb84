"""Hardware latency models and KV memory (docs/model.md §7.1-7.4).

* :mod:`~llmqueue.hardware.specs`: :class:`GPU` and :class:`ModelShape` records,
  the built-ins of ``data/*.json``, :func:`gpu` / :func:`model` lookups and
  :func:`register_gpu` / :func:`register_model`;
* :mod:`~llmqueue.hardware.efficiency`: :class:`Efficiency` and its presets;
* :mod:`~llmqueue.hardware.precision`: :class:`Precision`, the number format of
  each part of an iteration (weights and GEMMs, LM head, attention math, KV
  cache, activations);
* :mod:`~llmqueue.hardware.roofline`: the :class:`Roofline` batch-time model,
  its breakdown and its staircase approximation;
* :mod:`~llmqueue.hardware.fit`: :func:`fit_roofline`;
* :mod:`~llmqueue.hardware.memory`: :func:`kv_capacity` (a share of total or of
  free memory, :func:`kv_share`), :func:`kmax_from_memory`.

A roofline sees a batch's :class:`BatchContext` (docs/model.md §7.2, defined in
:mod:`llmqueue.models.context`).  Imports :mod:`llmqueue.common`,
:mod:`llmqueue.models` and :mod:`llmqueue.theory.fit` only.
"""

from llmqueue.hardware.efficiency import PRESETS, Efficiency
from llmqueue.hardware.fit import RooflineFit, fit_roofline
from llmqueue.hardware.memory import kmax_from_memory, kv_capacity, kv_share
from llmqueue.hardware.precision import DTYPES, Precision
from llmqueue.hardware.roofline import Breakdown, Roofline, StaircaseApprox, assumed_context
from llmqueue.hardware.specs import (GPU, ModelShape, gpu, gpu_names, model, model_names,
                                     register_gpu, register_model)
from llmqueue.models.context import BatchContext

__all__ = ["BatchContext", "Breakdown", "DTYPES", "Efficiency", "GPU", "ModelShape",
           "PRESETS", "Precision", "Roofline", "RooflineFit", "StaircaseApprox",
           "assumed_context", "fit_roofline", "gpu", "gpu_names", "kmax_from_memory",
           "kv_capacity", "kv_share", "model", "model_names", "register_gpu",
           "register_model"]
