"""Published throughput measurements and llmqueue's predictions of them
(``llmqueue validate``).

A measurement file is a CSV with the columns of :data:`COLUMNS`, one row per
published run: the serving engine (``trtllm``, ``vllm``, ``sglang``: the
preset of :mod:`~llmqueue.experiments.presets` that stands for its documented
settings), the model and GPU (names of the hardware tables, or a model's
``config.json``), tensor-parallel GPUs, the weights' precision, fixed input and
output lengths, the requests in the batch and the measured output tokens per
second of the whole run.  :func:`predict` simulates each row as the offline
batch it was (every request present at time 0, run to its end: the
``offline`` experiment on the roofline with ``kv=auto``) and :func:`summary`
reports the errors.  The package ships the rows it was checked on
(:data:`SHIPPED`, with their source in ``data/README.md``).
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

from llmqueue.common import files, validation
from llmqueue.engine.options import RunOptions

#: The columns a measurement file holds, in this order.
COLUMNS = ("engine", "model", "gpu", "tp", "precision", "isl", "osl", "requests",
           "output_tokens_per_s")
#: TensorRT-LLM's published offline throughput on H100 (package data).
SHIPPED = os.path.join(os.path.dirname(__file__), "data", "trtllm_offline_h100.csv")
#: What every row runs with unless ``--set`` says otherwise: the row's
#: engine's preset, the KV pool of the published runs (95% of the memory the
#: weights leave free) and an FP8 KV cache with FP8 weights (the checkpoints
#: NVIDIA publishes quantize both).
DEFAULTS: Dict[str, str] = {"latency": "roofline", "kv": "auto",
                            "kv_cache_free_gpu_mem_fraction": "0.95"}


#: TensorRT-LLM's ``max_num_tokens`` and ``max_batch_size`` (its preset's
#: ``bmax`` and ``kmax``).
TRTLLM_TOKENS, TRTLLM_BATCH = 8192, 2048


class Measurement(NamedTuple):
    """One published run."""

    engine: str
    model: str
    gpu: str
    tp: int
    precision: str
    isl: int
    osl: int
    requests: int
    output_tokens_per_s: float
    line: int
    """Its line in the file (for messages)."""


def read_measurements(path: str) -> List[Measurement]:
    """The rows of the measurement CSV at ``path``, in file order; a missing
    column or a bad cell is a one-line ``ValueError`` naming the file and line."""
    rows: List[Measurement] = []
    with files.open_text_input(path) as handle:
        reader = csv.reader(handle)
        header = [cell.strip() for cell in next(reader, [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path}:1: the header lacks {', '.join(missing)}; a measurement "
                             f"file has the columns {','.join(COLUMNS)}")
        at = {c: header.index(c) for c in COLUMNS}
        for line, row in enumerate(reader, 2):
            if not any(cell.strip() for cell in row):
                continue
            rows.append(_row(path, line, row, at))
    if not rows:
        raise ValueError(f"{path}: no measurement rows")
    return rows


def _row(path: str, line: int, row: Sequence[str], at: Mapping[str, int]) -> Measurement:
    if len(row) < len(at):
        raise ValueError(f"{path}:{line}: expected {len(at)} cells, got {len(row)}")
    cells = {c: row[i].strip() for c, i in at.items()}
    try:
        tp, isl, osl, requests = (validation.positive_int(c, _int(cells[c]))
                                  for c in ("tp", "isl", "osl", "requests"))
        measured = validation.positive_number("output_tokens_per_s",
                                              float(cells["output_tokens_per_s"]))
    except ValueError as exc:
        raise ValueError(f"{path}:{line}: {exc}") from None
    if not math.isfinite(measured):
        raise ValueError(f"{path}:{line}: output_tokens_per_s must be finite")
    return Measurement(cells["engine"], cells["model"], cells["gpu"], tp,
                       cells["precision"], isl, osl, requests, measured, line)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def settings(m: Measurement, overrides: Mapping[str, str]) -> Dict[str, str]:
    """The ``offline`` experiment's ``--set`` keys that simulate ``m``;
    ``overrides`` win (``engine=none``: llmqueue's own defaults instead of the
    engine's preset)."""
    keys = {**DEFAULTS, "engine": m.engine, "model": m.model, "gpu": m.gpu, "tp": str(m.tp),
            "precision": m.precision, "kv_cache_dtype": m.precision,
            "requests": str(m.requests), "vp": str(m.isl), "vd": str(m.osl)}
    if m.engine == "trtllm" and m.isl > TRTLLM_TOKENS:
        # without chunked context a whole prompt runs in one iteration beside the
        # running requests' tokens, so max_num_tokens must hold a prompt and a
        # full batch of decodes (or one long prompt would run alone)
        keys["bmax"] = str(m.isl + TRTLLM_BATCH)
    keys.update(overrides)
    return keys


def predict(m: Measurement, overrides: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Simulate ``m`` and return its row: the measurement, ``predicted``
    output tokens/s, the relative ``error`` ((predicted - measured) / measured)
    and what the run saw (preemptions, makespan)."""
    from llmqueue import experiments  # every experiment registered

    experiment = experiments.REGISTRY["offline"]
    p = experiment.resolve(settings(m, overrides or {}))
    label, result = experiment.execute(p, RunOptions())[0]
    s = result.summary
    predicted = s["output_tokens_per_s"]
    return {**{c: getattr(m, c) for c in COLUMNS}, "predicted": predicted,
            "error": (predicted - m.output_tokens_per_s) / m.output_tokens_per_s,
            "makespan_s": s["duration"], "preemptions": s.get("preemptions")}


def summary(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The median and the largest ``|error|`` of ``rows`` and their count."""
    errors = sorted(abs(r["error"]) for r in rows)
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 if n else None
    return {"rows": n, "median_abs_error": median, "max_abs_error": errors[-1] if n else None}
