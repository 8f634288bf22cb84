"""Published MLPerf Inference Llama-2-70B results, read from a CSV
(``llmqueue mlperf`` compares its simulations with them).

A results file has a header line naming its columns, in any order:

* required: ``system``, ``accelerator`` (a GPU name as the submission writes
  it, looked up in llmqueue's GPU table), ``accelerators`` (GPUs of the whole
  system), ``scenario`` (``Offline``, ``Server`` or ``Interactive``, in any
  case) and ``tokens_per_s`` (output tokens per second of the whole system);
* optional (a column left out reads as empty cells): ``version``,
  ``organization``, ``samples_per_s``, ``target_qps``, ``ttft_p99_s``,
  ``tpot_p99_s`` and the settings of each engine copy: ``precision``, ``tp``,
  ``pp``, ``max_batch_size``, ``max_num_tokens``, ``kv_fraction``,
  ``chunked_context``, ``engine``.  Other columns are ignored.

An empty cell is the engine's default (``tp`` and ``pp``: 1).  The settings'
forms:

* ``precision``: the weights' and activations' format (``fp8``, ``bf16``,
  ``fp16``), optionally with the KV cache's after a semicolon:
  ``fp8;kv=fp8``;
* ``kv_fraction``: a number in (0, 1], TensorRT-LLM's share of the memory the
  weights leave free, or ``gmu:X``, vLLM's ``gpu_memory_utilization`` (a
  share of the whole memory);
* ``engine``: free text whose first word names the engine: ``TensorRT-LLM``
  (also ``TRT-LLM``, ``trtllm``), ``vLLM`` or ``SGLang``;
* ``chunked_context``: ``true``, ``false`` or empty.

A row that is well formed but that llmqueue cannot model (an accelerator its
GPU table lacks, an engine it has no preset for, an unknown number format,
pipeline parallelism, GPUs that do not split into copies of ``tp x pp``) is
read with the reason in :attr:`MlperfRow.unsupported`, for the caller to count
apart; it never stops the read.  A malformed cell or header is a one-line
``ValueError`` naming the file, the line, the column and what it allows.
"""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

from llmqueue.common import files, validation
from llmqueue.hardware import precision as formats
from llmqueue.hardware import specs

#: Columns every results file must have.
REQUIRED = ("system", "accelerator", "accelerators", "scenario", "tokens_per_s")
#: Columns a results file may have (an absent one reads as empty cells).
OPTIONAL = ("version", "organization", "samples_per_s", "target_qps", "ttft_p99_s",
            "tpot_p99_s", "precision", "tp", "pp", "max_batch_size", "max_num_tokens",
            "kv_fraction", "chunked_context", "engine")
#: The benchmark's scenarios, as rows name them after normalising.
SCENARIOS = ("Offline", "Server", "Interactive")
#: First words of the ``engine`` text and the engine each names.
ENGINE_WORDS: Dict[str, str] = {"tensorrt-llm": "trtllm", "trt-llm": "trtllm",
                                "trtllm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
_FIRST_WORD = re.compile(r"[^\s,;:()/]+")
_SHARE_FORMS = ("a number in (0, 1] (TensorRT-LLM's share of the memory free after the "
                "weights) or gmu:X (vLLM's share of the whole memory, X in (0, 1])")
_PRECISION_FORMS = "a format such as fp8, or a format and the KV cache's: fp8;kv=fp8"


class MlperfRow(NamedTuple):
    """One published result and the engine settings it ran with."""

    version: Optional[str]
    organization: Optional[str]
    system: str
    accelerator: str
    """The GPU as the file writes it."""
    accelerators: int
    """GPUs of the whole system."""
    scenario: str
    """``Offline``, ``Server`` or ``Interactive``."""
    tokens_per_s: float
    """Output tokens per second of the whole system."""
    samples_per_s: Optional[float]
    target_qps: Optional[float]
    ttft_p99_s: Optional[float]
    tpot_p99_s: Optional[float]
    precision: Optional[str]
    """Weights' and activations' format (``fp8``, ``bf16``, ``fp16``; the text
    as written, in lower case, if unknown); ``None``: the engine's default."""
    kv_dtype: Optional[str]
    """The KV cache's format; ``None``: the engine's default."""
    tp: int
    pp: int
    max_batch_size: Optional[int]
    max_num_tokens: Optional[int]
    kv_fraction: Optional[float]
    """TensorRT-LLM's share of the memory free after the weights."""
    gpu_memory_utilization: Optional[float]
    """vLLM's share of the whole memory (``gmu:X``)."""
    chunked_context: Optional[bool]
    engine: Optional[str]
    """``trtllm``, ``vllm`` or ``sglang``; ``None`` if the text names none."""
    engine_text: str
    """The ``engine`` cell as written."""
    line: int
    """Its line in the file (for messages)."""
    unsupported: Optional[str]
    """Why llmqueue cannot model the row, in one phrase; ``None`` if it can."""
    gpu: Optional[str]
    """The GPU table's name of :attr:`accelerator`; ``None`` if unknown."""

    @property
    def copies(self) -> int:
        """Independent engine copies of the system: ``accelerators // (tp * pp)``."""
        return self.accelerators // (self.tp * self.pp)


def read_mlperf(path: str, what: str = "path") -> List[MlperfRow]:
    """The rows of the MLPerf results CSV at ``path``, in file order (blank
    lines skipped); see the module docstring for the columns and the forms of
    their cells.  ``what`` names the file in a message it cannot be read
    (``--measurements``)."""
    rows: List[MlperfRow] = []
    with files.open_text_input(path, what) as handle:
        reader = files.csv_rows(handle, handle.name)
        header = [cell.strip().lower() for cell in next(reader, (1, []))[1]]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ValueError(f"{handle.name}:1: the header lacks {', '.join(missing)}; a "
                             f"results file needs the columns {','.join(REQUIRED)} (and may "
                             f"have {','.join(OPTIONAL)})")
        at = {c: header.index(c) for c in REQUIRED + OPTIONAL if c in header}
        for line, row in reader:
            if not "".join(row).strip():
                continue
            if len(row) != len(header):
                raise ValueError(f"{handle.name}:{line}: expected {len(header)} cells as in "
                                 f"the header, got {len(row)}")
            cells = {c: row[i].strip() for c, i in at.items()}
            try:
                rows.append(_row(cells, line))
            except ValueError as exc:
                raise ValueError(f"{handle.name}:{line}: {exc}") from None
    if not rows:
        raise ValueError(f"{files.shown(path)}: no result rows")
    return rows


def _row(cells: Mapping[str, str], line: int) -> MlperfRow:
    """One row from its cells (an absent column: empty)."""
    def cell(column: str) -> str:
        return cells.get(column, "")

    system, accelerator = _text("system", cell("system")), _text("accelerator",
                                                                  cell("accelerator"))
    accelerators = _count("accelerators", cell("accelerators"))
    numbers = {c: _number(c, cell(c)) if cell(c) else None  # empty: not stated
               for c in ("samples_per_s", "target_qps", "ttft_p99_s", "tpot_p99_s")}
    counts = {c: _count(c, cell(c)) if cell(c) else None  # empty: the engine's default
              for c in ("tp", "pp", "max_batch_size", "max_num_tokens")}
    weights, kv, unknown = _precision(cell("precision"))
    fraction, utilization = _share(cell("kv_fraction"))
    engine_text = cell("engine")
    word = _FIRST_WORD.search(engine_text)
    engine = ENGINE_WORDS.get(word.group().lower()) if word else None
    tp, pp = counts["tp"] or 1, counts["pp"] or 1
    gpu = _gpu(accelerator)
    reasons = [
        (gpu is None, f"unknown accelerator {accelerator!r}"),
        (not engine_text, "no engine named"),
        (engine is None and bool(engine_text),
         f"engine {word.group() if word else engine_text!r} is not modelled "
         f"(TensorRT-LLM, vLLM, SGLang)"),
        (unknown is not None, f"unknown precision {unknown!r} (known: "
                              f"{', '.join(formats.DTYPES)})"),
        (pp > 1, "pipeline parallelism is not modelled"),
        (accelerators % (tp * pp) != 0,
         f"{accelerators} accelerators do not split into copies of tp x pp = {tp * pp}"),
    ]
    return MlperfRow(
        version=cell("version") or None, organization=cell("organization") or None,
        system=system, accelerator=accelerator, accelerators=accelerators,
        scenario=_scenario(cell("scenario")),
        tokens_per_s=_number("tokens_per_s", cell("tokens_per_s")),
        samples_per_s=numbers["samples_per_s"], target_qps=numbers["target_qps"],
        ttft_p99_s=numbers["ttft_p99_s"], tpot_p99_s=numbers["tpot_p99_s"],
        precision=weights, kv_dtype=kv, tp=tp, pp=pp,
        max_batch_size=counts["max_batch_size"], max_num_tokens=counts["max_num_tokens"],
        kv_fraction=fraction, gpu_memory_utilization=utilization,
        chunked_context=_chunked(cell("chunked_context")), engine=engine,
        engine_text=engine_text, line=line,
        unsupported=next((reason for failed, reason in reasons if failed), None), gpu=gpu)


def _text(column: str, text: str) -> str:
    """A required text cell: not empty."""
    if not text:
        raise ValueError(f"{column} must be given (the cell is empty)")
    return text


def _number(column: str, text: str) -> float:
    """A number cell: a finite number > 0."""
    return validation.positive_number(column, validation.cell(text, float))


def _count(column: str, text: str) -> int:
    """A count cell: an integer >= 1."""
    return validation.positive_int(column, validation.cell(text))


def _scenario(text: str) -> str:
    """The scenario, in any case, as :data:`SCENARIOS` names it."""
    found = {s.lower(): s for s in SCENARIOS}.get(text.lower())
    return validation.choice("scenario", found if found else text, SCENARIOS)


def _gpu(accelerator: str) -> Optional[str]:
    """The GPU table's name of ``accelerator``; ``None`` if the table lacks it."""
    try:
        return specs.gpu(accelerator).name
    except ValueError:
        return None


def _precision(text: str) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """``(weights, kv, unknown)`` of a ``precision`` cell: each format as
    :data:`~llmqueue.hardware.precision.DTYPES` names it (``None``: not stated),
    ``unknown`` the first format word llmqueue does not know (then kept in
    lower case)."""
    if not text:
        return None, None, None
    weights: Optional[str] = None
    kv: Optional[str] = None
    unknown: Optional[str] = None
    for part in (p.strip() for p in text.split(";")):
        name, equals, value = (s.strip().lower() for s in part.partition("="))
        if not part or (equals and (name != "kv" or not value or kv is not None)) or (
                not equals and weights is not None):
            raise ValueError(f"precision must be {_PRECISION_FORMS}; got {text!r}")
        given = value if equals else name
        try:
            known: Optional[str] = formats.dtype("precision", given)
        except ValueError:
            known, unknown = given, unknown or given
        if equals:
            kv = known
        else:
            weights = known
    return weights, kv, unknown


def _share(text: str) -> Tuple[Optional[float], Optional[float]]:
    """``(kv_fraction, gpu_memory_utilization)`` of a ``kv_fraction`` cell."""
    if not text:
        return None, None
    utilization = text[:4].lower() == "gmu:"
    share = validation.cell(text[4:].strip() if utilization else text, float)
    if not (isinstance(share, float) and validation.is_number(share) and 0 < share <= 1):
        raise ValueError(f"kv_fraction must be {_SHARE_FORMS}; got {text!r}")
    return (None, share) if utilization else (share, None)


def _chunked(text: str) -> Optional[bool]:
    """A ``chunked_context`` cell: ``true``, ``false`` (any case) or empty."""
    if not text:
        return None
    value = {"true": True, "false": False}.get(text.lower())
    if value is None:
        raise ValueError(f"chunked_context must be true, false or empty (the engine's "
                         f"default); got {text!r}")
    return value
