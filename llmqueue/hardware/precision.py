"""Number formats of an engine's parts: what each part of an iteration costs at
the precision it runs in.

An engine serving an FP8 checkpoint does not run everything in FP8.  The usual
case (TensorRT-LLM and vLLM with an FP8 checkpoint from NVIDIA's ModelOpt or
vLLM's own FP8 quantization): the layers' linear weights are FP8 and their GEMMs
run at the GPU's FP8 tensor-core rate; the vocabulary matrices (input embedding
and LM head) stay 16-bit; attention's QK^T and PV products run at the BF16
rate; the KV cache is BF16 unless asked for in FP8 (vLLM's ``kv_cache_dtype``,
TensorRT-LLM's KV-cache quantization), which halves its bytes per token and so
doubles the tokens a memory holds; element-wise work and all-reduces stay
16-bit.  :class:`Precision` names the format of each part; :meth:`Precision.of`
builds the usual cases from one name.

Formats (:data:`DTYPES`): ``bf16`` and ``fp16`` (2 bytes, the GPU's ``flops``)
and ``fp8`` (1 byte, the GPU's ``fp8_flops``; a GPU without FP8 tensor cores,
such as the A100, refuses it for math), each at the GPU's sustained ``clock``
(:attr:`~llmqueue.hardware.specs.GPU.sustained_flops`: the datasheet's figure
itself at the default ``clock = 1``).  A model record's ``weight_bytes``,
``act_bytes`` and ``kv_bytes`` are its element sizes at 16 bits (2 for every
built-in); an ``fp8`` part takes 1 byte instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Dict, Optional, Union

from llmqueue.hardware.specs import GPU, ModelShape

#: Bytes per element of each format.
DTYPES: Dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1}
#: Other spellings engines use, read as the format they name.
ALIASES: Dict[str, str] = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16",
                           "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "e4m3": "fp8"}


def dtype(field: str, value: object) -> str:
    """``value`` as one of :data:`DTYPES` (case-insensitive; :data:`ALIASES` read
    as their format), else a one-line ValueError naming ``field``."""
    name = value.strip().lower() if isinstance(value, str) else None
    name = ALIASES.get(name, name) if name is not None else None
    if name not in DTYPES:
        raise ValueError(f"{field} must be one of {', '.join(DTYPES)}; got {value!r}")
    return name


@dataclass(frozen=True)
class Precision:
    """The number format of each part of an iteration.

    * ``weights``: the layers' linear weights (Q, K, V, O and FFN): their bytes
      read per iteration and held in memory, and their GEMMs' FLOP/s rate;
    * ``head``: the vocabulary matrices (input embedding, LM head): bytes and the
      LM head's FLOP/s rate (16-bit in FP8 checkpoints);
    * ``attention``: the QK^T and PV products' FLOP/s rate (prefill and decode);
    * ``kv``: the KV-cache element: bytes per cached token, read by attention and
      held in memory (so the KV capacity);
    * ``activations``: element-wise traffic and tensor-parallel all-reduces.
    """

    weights: str = "bf16"
    attention: str = "bf16"
    kv: str = "bf16"
    head: str = "bf16"
    activations: str = "bf16"

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, dtype(f"precision {f.name}", getattr(self, f.name)))

    @classmethod
    def of(cls, weights: str = "bf16", *, attention: Optional[str] = None,
           kv: Optional[str] = None, head: Optional[str] = None,
           activations: Optional[str] = None) -> "Precision":
        """The usual engine from the weights' format: ``Precision.of("fp8")`` is FP8
        weights and GEMMs with attention math, the KV cache, the vocabulary
        matrices and activations in BF16.  Each keyword left None takes its
        default: ``attention``, ``head`` and ``activations`` BF16, ``kv`` the
        activations' format (vLLM's ``kv_cache_dtype=auto``)."""
        act = "bf16" if activations is None else activations
        return cls(weights=weights, attention="bf16" if attention is None else attention,
                   kv=act if kv is None else kv, head="bf16" if head is None else head,
                   activations=act)

    @property
    def name(self) -> Optional[str]:
        """``"bf16"``, ``"fp16"`` or ``"fp8"`` when this is :meth:`of` that format
        with every other part at its default, else None."""
        return next((short for short in DTYPES if self == Precision.of(short)), None)

    def as_dict(self) -> Dict[str, str]:
        """The parts, for ``--json``."""
        return asdict(self)

    def flops(self, gpu: GPU, part: str) -> float:
        """Dense FLOP/s of ``gpu`` for ``part`` (``weights``, ``head`` or
        ``attention``) at its format and the GPU's sustained clock
        (``sustained_flops``, ``sustained_fp8_flops``: the one place a roofline
        reads compute rates); a GPU without that format's tensor cores is a
        ValueError saying so."""
        fmt = getattr(self, part)
        if DTYPES[fmt] == 2:
            return gpu.sustained_flops
        fp8 = gpu.sustained_fp8_flops
        if fp8 is None:
            what = {"weights": "the layer GEMMs (precision)",
                    "attention": "attention's math (attention_precision)",
                    "head": "the LM head"}[part]
            raise ValueError(
                f"{gpu.name} has no FP8 tensor cores (its datasheet lists no FP8 rate), so "
                f"{what} cannot run in fp8 on it; use bf16 there (an FP8 KV cache, "
                f"kv_cache_dtype=fp8, needs no FP8 math and is allowed)")
        return fp8

    def element_bytes(self, model: ModelShape, part: str) -> float:
        """Bytes per element of ``part`` of ``model``: the record's own size at 16
        bits (``weight_bytes`` for ``weights`` and ``head``, ``kv_bytes``,
        ``act_bytes``), or 1 in fp8."""
        fmt = getattr(self, part)
        if DTYPES[fmt] != 2:
            return DTYPES[fmt]
        own = {"weights": "weight_bytes", "head": "weight_bytes", "kv": "kv_bytes",
               "activations": "act_bytes"}[part]
        return getattr(model, own)

    def model(self, model: ModelShape) -> ModelShape:
        """``model`` with its layer-weight, activation and KV element sizes at these
        formats (the record itself when nothing changes); the vocabulary matrices'
        size is :meth:`element_bytes` of ``head``."""
        wb, ab, kb = (self.element_bytes(model, part) for part in ("weights", "activations", "kv"))
        if (wb, ab, kb) == (model.weight_bytes, model.act_bytes, model.kv_bytes):
            return model
        return replace(model, weight_bytes=wb, act_bytes=ab, kv_bytes=kb)

    def weight_memory(self, model: ModelShape) -> float:
        """Bytes every weight of ``model`` holds: ``P_L`` at the weights' size, the
        LM head and (untied) the input embedding at the head's."""
        wb, hb = self.element_bytes(model, "weights"), self.element_bytes(model, "head")
        if wb == hb:
            return model.params() * wb
        return model.layer_params() * wb + model.head_params() * (1 if model.tied else 2) * hb


#: Every part in BF16: every figure as before precisions existed.
BF16 = Precision()


def precision(value: Union[str, Precision, None]) -> Precision:
    """``value`` itself if a :class:`Precision`, :meth:`Precision.of` a format
    name, or BF16 for None."""
    if value is None:
        return BF16
    if isinstance(value, Precision):
        return value
    if isinstance(value, str):
        return Precision.of(dtype("precision", value))
    raise ValueError(f"precision must be one of {', '.join(DTYPES)} or a Precision; "
                     f"got {value!r}")
