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

A measurement file may instead be vLLM's ``benchmark_serving --save-result``
JSON (:func:`read_vllm_results`): one result object, a list of them, or JSON
lines.  Such a run states no GPU, tensor parallelism or precision, so those
rows leave ``gpu``, ``tp`` and ``precision`` empty and ``--set`` supplies them
(``gpu`` is required); a finite ``request_rate`` is simulated as the Poisson
arrivals it was (the ``offline`` experiment's ``rate``), and the per-request
lengths of ``--save-detailed`` as they were (its ``lengths``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from llmqueue.common import files, validation
from llmqueue.engine.options import RunOptions
from llmqueue.hardware.specs import key as model_key
from llmqueue.hardware.specs import model as find_model
from llmqueue.hardware.specs import model_names

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
    """One published run (``gpu`` and ``precision`` empty, ``tp`` None where
    the file does not state them: ``--set`` gives them)."""

    engine: str
    model: str
    gpu: str
    tp: Optional[int]
    precision: str
    isl: int
    osl: int
    requests: int
    output_tokens_per_s: float
    line: int
    """Its row in the file, for messages: the line of a CSV or JSON-lines file,
    the place (from 1) in a JSON file's list."""
    rate: Optional[float] = None
    """Requests per second of Poisson arrivals from time 0 (vLLM's finite
    ``request_rate``); None: an offline batch, every request at time 0."""
    lengths: Optional[Tuple[Tuple[int, int], ...]] = None
    """Each request's ``(prompt, output)`` tokens in the order sent, where the
    file lists them; None: every request ``isl`` + ``osl``."""


def read_measurements(path: str) -> List[Measurement]:
    """The rows of the measurement file at ``path``, in file order: a CSV of
    :data:`COLUMNS`, or (a file whose text starts with ``{`` or ``[``) vLLM's
    ``benchmark_serving`` results (:func:`read_vllm_results`).  A missing
    column or key or a bad cell is a one-line ``ValueError`` naming the file
    and the row."""
    with files.open_text_input(path) as handle:
        text = handle.read()
    if text.lstrip()[:1] in ("{", "["):
        return read_vllm_results(path, text)
    rows: List[Measurement] = []
    reader = csv.reader(io.StringIO(text, newline=""))
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
        tp, isl, osl, requests = (validation.positive_int(c, validation.cell(cells[c]))
                                  for c in ("tp", "isl", "osl", "requests"))
        measured = validation.positive_number("output_tokens_per_s",
                                              float(cells["output_tokens_per_s"]))
    except ValueError as exc:
        raise ValueError(f"{path}:{line}: {exc}") from None
    if not math.isfinite(measured):
        raise ValueError(f"{path}:{line}: output_tokens_per_s must be finite")
    return Measurement(cells["engine"], cells["model"], cells["gpu"], tp,
                       cells["precision"], isl, osl, requests, measured, line)


#: The keys a vLLM ``benchmark_serving`` result must hold.
VLLM_KEYS = ("model_id", "request_rate", "completed", "total_input_tokens",
             "total_output_tokens", "output_throughput")
#: Endings of Hugging Face model ids that name a tuned variant of a shape llmqueue knows.
VARIANTS = ("-instruct", "-chat", "-hf")


def read_vllm_results(path: str, text: Optional[str] = None) -> List[Measurement]:
    """Measurements from vLLM's ``benchmark_serving --save-result`` JSON at
    ``path`` (``text``: its contents, if already read): one result object, a
    list of them, or one per line (JSON lines).  Each is a run of the ``vllm``
    engine: the model :func:`known_model` finds in ``model_id`` (else the id as
    given, for ``--set model=`` to replace); ``gpu``, ``tp`` and ``precision``
    not stated; ``isl`` and ``osl`` the mean input and output tokens of the
    completed requests, rounded; ``requests`` those completed;
    ``output_tokens_per_s`` its ``output_throughput``; ``rate`` its
    ``request_rate`` unless ``inf``; ``lengths`` its ``input_lens`` and
    ``output_lens`` (``--save-detailed``) but for the failed requests (an
    output of 0 tokens), which then count as ``requests``.  A run whose
    requests llmqueue cannot send as vLLM did (``burstiness`` other than 1, a
    ``max_concurrency`` below its requests) is refused.  Bad JSON, a missing
    key or a bad value is a one-line ``ValueError`` naming the file, the result
    and the key."""
    if text is None:
        with files.open_text_input(path) as handle:
            text = handle.read()
    found = [_result(where, row, doc) for row, where, doc in _json_documents(path, text)]
    if not found:
        raise ValueError(f"{path}: no benchmark results (an empty list)")
    return found


def _json_documents(path: str, text: str) -> List[Tuple[int, str, Any]]:
    """``(row, where, document)`` of each result in ``text``: the whole file,
    each entry of its list, or each line of JSON lines."""
    try:
        doc = json.loads(text)
    except ValueError as whole:
        docs: List[Tuple[int, str, Any]] = []
        for line, part in enumerate(text.split("\n"), 1):
            if not part.strip():
                continue
            try:
                docs.append((line, f"{path}:{line}", json.loads(part)))
            except ValueError as exc:
                if docs:  # JSON lines, one of them bad
                    raise ValueError(f"{path}:{line}: not JSON ({exc})") from None
                raise ValueError(f"{path}: not JSON ({whole})") from None
        return docs
    if isinstance(doc, list):
        return [(i, f"{path}: result {i} of its list", d) for i, d in enumerate(doc, 1)]
    return [(1, path, doc)]


def _result(where: str, row: int, doc: Any) -> Measurement:
    """The measurement of one ``benchmark_serving`` result ``doc``."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object of vLLM's benchmark_serving "
                         f"results, got {type(doc).__name__}")
    missing = [k for k in VLLM_KEYS if k not in doc]
    if missing:
        raise ValueError(f"{where}: the result lacks {', '.join(missing)} (vLLM's "
                         f"benchmark_serving --save-result writes {', '.join(VLLM_KEYS)})")
    try:
        model_id = doc["model_id"]
        if not isinstance(model_id, str) or not model_id.strip():
            raise ValueError(f"model_id must be a model's name, got {validation.shown(model_id)}")
        completed = validation.positive_int("completed", doc["completed"])
        inputs = validation.nonnegative_int("total_input_tokens", doc["total_input_tokens"])
        outputs = validation.positive_int("total_output_tokens", doc["total_output_tokens"])
        measured = validation.positive_number("output_throughput", doc["output_throughput"])
        rate = _rate(doc)
        lengths = _lengths(doc)
        isl = validation.positive_int("total_input_tokens / completed (the mean prompt)",
                                      math.floor(inputs / completed + 0.5))
        osl = validation.positive_int("total_output_tokens / completed (the mean output)",
                                      math.floor(outputs / completed + 0.5))
        sent = len(lengths) if lengths else completed
        limit = doc.get("max_concurrency")
        if limit is not None and not (validation.is_number(limit) and limit >= sent):
            raise ValueError(f"max_concurrency {validation.shown(limit)}: a limit on the "
                             f"requests in flight below the {sent} requests is not simulated "
                             "(compare runs without --max-concurrency)")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return Measurement("vllm", known_model(model_id) or model_id.strip(), "", None, "", isl,
                       osl, sent, measured, row, rate, lengths)


def _rate(doc: Mapping[str, Any]) -> Optional[float]:
    """``request_rate`` of a result: None for ``"inf"`` (every request at
    once), else the Poisson rate, which needs ``burstiness`` 1 (or none)."""
    value = doc["request_rate"]
    if (isinstance(value, str) and value.strip().lower() in ("inf", "infinity")) or \
            value == math.inf:
        return None
    if not validation.is_number(value) or value <= 0:
        raise ValueError(f"request_rate must be a number > 0 or \"inf\", got "
                         f"{validation.shown(value)}")
    burstiness = doc.get("burstiness")
    if burstiness is not None and burstiness != 1:
        raise ValueError(f"burstiness {validation.shown(burstiness)}: gamma-distributed gaps "
                         "are not simulated, only Poisson arrivals (burstiness 1)")
    return validation.arrival_rate("request_rate", value)


def _lengths(doc: Mapping[str, Any]) -> Optional[Tuple[Tuple[int, int], ...]]:
    """``(prompt, output)`` of each request with an output, from a result's
    ``input_lens`` and ``output_lens`` (None without them)."""
    ins, outs = doc.get("input_lens"), doc.get("output_lens")
    if ins is None and outs is None:
        return None
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
        raise ValueError("input_lens and output_lens must be lists of one entry per request, "
                         "both or neither")
    pairs = tuple((validation.token_count(f"input_lens[{i}]", p),
                   validation.token_count(f"output_lens[{i}]", d))
                  for i, (p, d) in enumerate(zip(ins, outs)))
    kept = tuple(pair for pair in pairs if pair[1] > 0)  # a failed request has 0
    if not kept:
        raise ValueError("output_lens holds no request with an output (all failed)")
    return kept


def known_model(model_id: str) -> Optional[str]:
    """The name of the model llmqueue knows that the Hugging Face id
    ``model_id`` names, or None: its last path part, case-insensitive, with the
    endings of :data:`VARIANTS` dropped (as often as they come) and a leading
    ``meta-`` too (``meta-llama/Meta-Llama-3.1-8B-Instruct`` is llama-3.1-8b)."""
    name, names = model_key(model_id.strip().rstrip("/").split("/")[-1]), set(model_names())
    while True:
        for candidate in (name, name[len("meta-"):] if name.startswith("meta-") else name):
            if candidate in names:
                return candidate
        ending = next((e for e in VARIANTS if name.endswith(e)), None)
        if ending is None:
            return None
        name = name[:-len(ending)]


def settings(m: Measurement, overrides: Mapping[str, str]) -> Dict[str, str]:
    """The ``offline`` experiment's ``--set`` keys that simulate ``m``;
    ``overrides`` win (``engine=none``: llmqueue's own defaults instead of the
    engine's preset).  The KV pool of :data:`DEFAULTS` is TensorRT-LLM's; rows
    of other engines take their preset's.  Keys a row does not state (a
    benchmark result's ``gpu``, ``tp``, ``precision``) are left to
    ``overrides`` (else llmqueue's defaults); a row with no GPU after them, or
    with a model llmqueue does not know, is a ValueError naming the ``--set``
    key that gives it.  ``m.rate`` and ``m.lengths`` become the experiment's
    ``rate`` and ``lengths`` (which then stand for ``requests``, ``vp`` and
    ``vd``)."""
    keys = {**DEFAULTS, "engine": m.engine, "model": m.model,
            "requests": str(m.requests), "vp": str(m.isl), "vd": str(m.osl)}
    if m.engine != "trtllm":
        del keys["kv_cache_free_gpu_mem_fraction"]
    stated = {"gpu": m.gpu, "tp": "" if m.tp is None else str(m.tp), "precision": m.precision,
              "kv_cache_dtype": m.precision}
    keys.update((k, v) for k, v in stated.items() if v)
    if m.rate is not None:
        keys["rate"] = repr(m.rate)
    if m.lengths is not None:
        for k in ("requests", "vp", "vd"):
            del keys[k]
        keys["lengths"] = ",".join(f"{p}:{d}" for p, d in m.lengths)
    longest = max(p for p, _ in m.lengths) if m.lengths else m.isl
    if m.engine == "trtllm" and longest > TRTLLM_TOKENS:
        # without chunked context a whole prompt runs in one iteration beside the
        # running requests' tokens, so max_num_tokens must hold a prompt and a
        # full batch of decodes (or one long prompt would run alone)
        keys["bmax"] = str(longest + TRTLLM_BATCH)
    keys.update(overrides)
    if keys.get("gpu", "").strip().lower() in ("", "none"):
        raise ValueError(f"row {m.line} ({m.model}) states no GPU (vLLM's benchmark results "
                         "do not): give it with --set gpu=NAME, e.g. --set gpu=H100")
    if "model" not in overrides:
        try:
            find_model(m.model)
        except ValueError as exc:
            raise ValueError(f"row {m.line}: {exc}; give the model with --set model=NAME") \
                from None
    return keys


def shown(m: Measurement, keys: Mapping[str, str]) -> Dict[str, Any]:
    """``m``'s columns as a report shows them: the model, GPU, tensor
    parallelism and precision that ran (``keys``: its :func:`settings`, where
    ``--set`` gave what the row left empty)."""
    out = {c: getattr(m, c) for c in COLUMNS}
    for column in ("model", "gpu", "tp", "precision"):
        if keys.get(column) not in (None, ""):
            out[column] = keys[column]
    return out


def predict(m: Measurement, overrides: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Simulate ``m`` and return its row: the measurement, ``predicted``
    output tokens/s, the relative ``error`` ((predicted - measured) / measured)
    and what the run saw (preemptions, makespan)."""
    from llmqueue import experiments  # every experiment registered

    experiment = experiments.REGISTRY["offline"]
    keys = settings(m, overrides or {})
    label, result = experiment.execute(experiment.resolve(keys), RunOptions())[0]
    s = result.summary
    predicted = s["output_tokens_per_s"]
    return {**shown(m, keys), "predicted": predicted,
            "error": (predicted - m.output_tokens_per_s) / m.output_tokens_per_s,
            "makespan_s": s["duration"], "preemptions": s.get("preemptions")}


def summary(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The median and the largest ``|error|`` of ``rows`` and their count."""
    errors = sorted(abs(r["error"]) for r in rows)
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2 if n else None
    return {"rows": n, "median_abs_error": median, "max_abs_error": errors[-1] if n else None}
