"""Published MLPerf results against llmqueue's predictions of them
(``llmqueue mlperf --measurements FILE``).

Each row of a results file (:mod:`~llmqueue.experiments.mlperf_rows`) becomes
the system it describes (:func:`settings`); an empty cell keeps the engine's
default.  Offline rows get the prediction of the uncalibrated model.  A Server
or Interactive row is predicted after calibrating the speed factor
(:func:`~llmqueue.experiments.mlperf.calibrate_speed`) on the Offline row of the
same system (same ``system`` and ``version``) in the file, with that row's
settings: what a user with one measured Offline number would do.  Without such
a row, or when its calibration leaves physics, the row gets the uncalibrated
prediction and ``calibrated_on`` is None.  Rows llmqueue cannot model keep
their reason in ``unsupported`` and are counted apart.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from llmqueue.experiments import mlperf
from llmqueue.experiments.mlperf_rows import MlperfRow

#: The model every row runs (the benchmark's).
MODEL = "llama-2-70b"
#: What each engine's copy stores its KV cache as when the row does not say:
#: TensorRT-LLM's FP8 checkpoints quantize it with the weights (NVIDIA's MLPerf
#: code does); vLLM keeps the model's 16-bit format unless told.
KV_DEFAULT = {"trtllm": "weights", "vllm": "auto", "sglang": "auto"}


def settings(row: MlperfRow, overrides: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The ``--set`` keys of :data:`~llmqueue.experiments.mlperf.PARAMS` that
    simulate ``row``'s system; ``overrides`` win."""
    engine = row.engine or "trtllm"
    keys = {"engine": engine, "model": MODEL, "gpu": str(row.gpu), "gpus": str(row.accelerators),
            "tp": str(row.tp), "precision": row.precision or "bf16"}
    kv = row.kv_dtype or KV_DEFAULT[engine]
    keys["kv_cache_dtype"] = keys["precision"] if kv == "weights" else kv
    for key, value in (("kmax", row.max_batch_size), ("bmax", row.max_num_tokens),
                       ("kv_cache_free_gpu_mem_fraction", row.kv_fraction),
                       ("gpu_memory_utilization", row.gpu_memory_utilization)):
        if value is not None:
            keys[key] = str(value)
    if row.chunked_context is not None:
        keys["chunked"] = str(row.chunked_context).lower()
    keys.update(overrides or {})
    return keys


class Predictor:
    """Predicts rows, simulating each Offline system once (rows that share a
    system's settings share its run)."""

    def __init__(self, overrides: Optional[Mapping[str, str]] = None) -> None:
        self.overrides = dict(overrides or {})
        self._runs: Dict[Tuple[Tuple[str, str], ...], mlperf.OfflineRun] = {}

    def offline(self, row: MlperfRow) -> mlperf.OfflineRun:
        """The Offline run of ``row``'s system."""
        keys = settings(row, self.overrides)
        key = tuple(sorted(keys.items()))
        if key not in self._runs:
            self._runs[key] = mlperf.offline(mlperf.system(keys))
        return self._runs[key]

    def predict(self, row: MlperfRow, rows: Sequence[MlperfRow]) -> Dict[str, Any]:
        """``row``'s prediction (``rows``: the file, for its Offline partner):
    ``predicted_tokens_per_s``, and for Server and Interactive rows the
    search's other figures (:func:`~llmqueue.experiments.mlperf.figures`),
    each named ``predicted_...`` beside the row's measured ones."""
        out: Dict[str, Any] = {"predicted_tokens_per_s": None, "calibrated_on": None,
                               "speed_factor": None, "calibration": None, "error": None}
        if row.unsupported:
            return out
        if row.scenario == "Offline":
            out["predicted_tokens_per_s"] = self.offline(row).tokens_per_s()
        else:
            s = mlperf.system(settings(row, self.overrides))
            eff = s.efficiency
            partner = next((r for r in rows if r.scenario == "Offline" and not r.unsupported
                            and r.system == row.system and r.version == row.version), None)
            if partner is not None:
                try:
                    factor = mlperf.calibrate_speed(self.offline(partner), partner.tokens_per_s)
                    eff = mlperf.faster(eff, factor)
                    out.update(calibrated_on=partner.tokens_per_s, speed_factor=factor)
                except ValueError as exc:
                    out["calibration"] = str(exc)
            result = mlperf.capacity(s, row.scenario.lower(), self.offline(row), eff,
                                     progress=False)
            out.update({f"predicted_{k}": v for k, v in mlperf.figures(s, result).items()})
        measured = row.tokens_per_s
        out["error"] = (out["predicted_tokens_per_s"] - measured) / measured
        return out


def predict_file(rows: Sequence[MlperfRow], overrides: Optional[Mapping[str, str]] = None,
                 progress: Optional[Callable[[int, int], None]] = None
                 ) -> List[Dict[str, Any]]:
    """Every row's fields and prediction, in file order."""
    predictor = Predictor(overrides)
    out = []
    for i, row in enumerate(rows):
        out.append({**row._asdict(), "copies": None if row.unsupported else row.copies,
                    **predictor.predict(row, rows)})
        if progress:
            progress(i + 1, len(rows))
    return out


def summary(rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Per scenario: the rows predicted, their median and largest ``|error|``;
    and the rows left unsupported."""
    from llmqueue.experiments.measurements import summary as errors
    scenarios = {}
    for name in ("Offline", "Server", "Interactive"):
        done = [r for r in rows if r["scenario"] == name and r["error"] is not None]
        if done:
            scenarios[name] = errors(done)
    return {"scenarios": scenarios, "unsupported": sum(1 for r in rows if r["unsupported"])}
