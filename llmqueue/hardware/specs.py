"""Hardware and model specs as data (docs/model.md §7.1): :class:`GPU`, :class:`ModelShape`.

The built-in records live in the package data files ``hardware/data/gpus.json``
and ``hardware/data/models.json`` (units: ``flops`` and ``fp8_flops`` dense BF16
and FP8 FLOP/s, ``hbm`` and ``link`` bytes/s, ``link`` per direction, ``memory``
bytes; sources in ``hardware/data/README.md``).  Look them up with :func:`gpu`
and :func:`model`: names are case-insensitive and a parenthesised suffix is
dropped (``"Mistral-7B (v0.1)"`` is ``mistral-7b``, MLPerf's
``"H200-SXM-141GB (700W, preview)"`` is ``h200-sxm-141gb``); :func:`gpu` also
takes MLPerf's names of parts that are exactly a record (:func:`gpu_aliases`:
``H100-SXM-80GB`` is the ``H100``) and :func:`model` the path of a Hugging Face
``config.json`` (or of its folder).  A GPU's ``clock`` scales its compute rates
(:attr:`GPU.sustained_flops`), never its bandwidths.
:func:`register_gpu` and :func:`register_model` add records; every function
that takes a name also takes the record itself.  :meth:`ModelShape.from_hf_config`
reads a Hugging Face ``config.json`` (a dict, a file or a folder holding one)
without any network access.

Derived figures (docs/model.md §7.3): ``params() = P_L + V*h`` (plus a second ``V*h`` when the
embeddings are untied) with ``P_L = L*(P_attn + g*h*f)``,
``P_attn = h*n_q*d_h + 2*h*n_kv*d_h + n_q*d_h*h`` and ``g = 3`` for a gated
FFN, 2 otherwise; ``kv_bytes_per_token() = 2*L*n_kv*d_h*kv_bytes``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import KW_ONLY, dataclass
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union

from llmqueue.common import files, validation


#: The range of a GPU's figures (FLOP/s, bytes/s, bytes): physical numbers,
#: from 1 to 10^30 (an H100 does about 10^15 FLOP/s; a roofline of a GPU
#: beyond the range would price iterations at 0 or beyond any run's clock).
GPU_RANGE = (1.0, 1e30)
#: Most bytes one weight, activation or KV element may take (fp64 takes 8).
MAX_ELEMENT_BYTES = 64
#: The largest ``clock`` a GPU may have (above 0): twice the reference's.
MAX_CLOCK = 2.0


@dataclass(frozen=True)
class GPU:
    """One accelerator: dense BF16 ``flops`` (FLOP/s), ``hbm`` bandwidth
    (bytes/s), ``memory`` (bytes) and the interconnect ``link`` (bytes/s per
    direction); ``fp8_flops``, its dense FP8 tensor-core FLOP/s, is None for a
    GPU without FP8 (the A100).  ``flops`` and ``fp8_flops`` are the datasheet's.

    ``clock`` is the part's sustained tensor-core clock under its power limit,
    relative to the reference's: a 700 W H100/H200 SXM under the same sustained
    GEMM load, whose throttling the ``default`` efficiency (calibrated on such
    parts) already holds.  It scales the compute rates a roofline prices at
    (:attr:`sustained_flops`, :attr:`sustained_fp8_flops`), never the memory
    bandwidth: 1.0 (the default, every record of docs/model.md §7.1) prices at the
    datasheet's figures; 1.114 is a 1,000 W H200 that holds its boost clock
    where the 700 W part throttles (``hardware/data/README.md`` derives the
    built-ins' factors, estimates all).  Set it on a record of your own:
    ``GPU(..., clock=0.9)``; it must be above 0 and at most :data:`MAX_CLOCK`."""

    name: str
    flops: float
    hbm: float
    memory: float
    link: float
    fp8_flops: Optional[float] = None
    clock: float = 1.0

    def __post_init__(self) -> None:
        _name("name", self.name)
        for field in ("flops", "hbm", "memory", "link"):
            validation.number_within(f"GPU {self.name} {field}", getattr(self, field),
                                     *GPU_RANGE)
        if self.fp8_flops is not None:
            validation.number_within(f"GPU {self.name} fp8_flops", self.fp8_flops, *GPU_RANGE)
        if not validation.is_number(self.clock) or not 0 < self.clock <= MAX_CLOCK:
            raise ValueError(f"GPU {self.name} clock must be a number > 0 and at most "
                             f"{MAX_CLOCK:g} (the sustained clock relative to a 700 W "
                             f"H100/H200 SXM's), got {validation.shown(self.clock)}")

    @property
    def sustained_flops(self) -> float:
        """Dense BF16 FLOP/s at the sustained clock: ``flops * clock`` (``flops``
        itself at ``clock = 1``)."""
        return self.flops if self.clock == 1 else self.flops * self.clock

    @property
    def sustained_fp8_flops(self) -> Optional[float]:
        """Dense FP8 FLOP/s at the sustained clock: ``fp8_flops * clock`` (None
        without FP8; ``fp8_flops`` itself at ``clock = 1``)."""
        if self.fp8_flops is None or self.clock == 1:
            return self.fp8_flops
        return self.fp8_flops * self.clock


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape (docs/model.md §7.1).

    ``layers`` L, ``hidden`` h, ``heads`` n_q, ``kv_heads`` n_kv (default
    ``heads``), ``head_dim`` d_h (default ``hidden / heads``), ``ffn`` f, ``gated``
    (a SwiGLU-style FFN with three matrices), ``vocab`` V, ``tied`` (input and
    output embeddings shared), and the bytes per weight, activation and KV
    element.  Fields after ``head_dim`` are keyword-only.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    _: KW_ONLY
    ffn: int
    gated: bool
    vocab: int
    tied: bool
    weight_bytes: float = 2
    act_bytes: float = 2
    kv_bytes: float = 2

    def __post_init__(self) -> None:
        _name("name", self.name)
        where = f"model {self.name}"
        for field in ("layers", "hidden", "heads", "ffn", "vocab"):
            validation.positive_int(f"{where} {field}", getattr(self, field))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        assert self.kv_heads is not None  # just filled in when not given
        validation.positive_int(f"{where} kv_heads", self.kv_heads)
        if self.heads % self.kv_heads:
            raise ValueError(f"{where} kv_heads must divide heads={self.heads} (grouped-query "
                             f"attention); got kv_heads={self.kv_heads}")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ValueError(f"{where} head_dim must be given when heads={self.heads} does "
                                 f"not divide hidden={self.hidden}")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        validation.positive_int(f"{where} head_dim", self.head_dim)
        for field in ("gated", "tied"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"{where} {field} must be True or False, "
                                 f"got {getattr(self, field)!r}")
        for field in ("weight_bytes", "act_bytes", "kv_bytes"):
            if validation.positive_number(f"{where} {field}", getattr(self, field)) > \
                    MAX_ELEMENT_BYTES:
                raise ValueError(f"{where} {field} must be a number > 0 and at most "
                                 f"{MAX_ELEMENT_BYTES} (bytes), got {getattr(self, field)!r}")

    @property
    def ffn_matrices(self) -> int:
        """g of docs/model.md §7.3: 3 FFN matrices when gated, 2 otherwise."""
        return 3 if self.gated else 2

    def attention_params(self) -> int:
        """``P_attn = h*n_q*d_h + 2*h*n_kv*d_h + n_q*d_h*h`` (one layer: Q, K, V, O)."""
        h, q, kv, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        assert kv is not None and d is not None  # filled in by __post_init__
        return h * q * d + 2 * h * kv * d + q * d * h

    def layer_params(self) -> int:
        """``P_L = L*(P_attn + g*h*f)``: every layer's weights (biases, norms ignored)."""
        return self.layers * (self.attention_params() + self.ffn_matrices * self.hidden * self.ffn)

    def head_params(self) -> int:
        """``P_head = V*h``: the LM head (equal to the input embedding)."""
        return self.vocab * self.hidden

    def params(self) -> int:
        """Parameter count: ``P_L + V*h``, plus a second ``V*h`` when untied."""
        return self.layer_params() + self.head_params() * (1 if self.tied else 2)

    def kv_bytes_per_token(self) -> float:
        """``kappa = 2*L*n_kv*d_h*kv_bytes``: KV-cache bytes one token holds."""
        assert self.kv_heads is not None and self.head_dim is not None  # by __post_init__
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes

    @classmethod
    def from_hf_config(cls, config: Union[str, "os.PathLike[str]", Mapping[str, Any]],
                       name: Optional[str] = None) -> "ModelShape":
        """A shape from a Hugging Face ``config.json``: a dict, the file, or a folder
        holding it.  Reads ``num_hidden_layers, hidden_size, num_attention_heads,
        num_key_value_heads`` (default: the attention heads), ``head_dim`` (default:
        hidden / heads), ``intermediate_size`` (or ``ffn_dim``), ``vocab_size``,
        ``tie_word_embeddings`` (default true, as in transformers) and ``hidden_act``
        (or ``activation_function``; ``silu`` means a gated FFN).  ``name`` defaults
        to the config's ``_name_or_path``, else the folder's name (the file's, when it
        is not called ``config.json``).  A missing or bad
        key is a ValueError naming it and the file."""
        where = "config"
        if isinstance(config, Mapping):
            data: Mapping[str, Any] = config
        elif not isinstance(config, (str, os.PathLike)):
            raise ValueError(f"config must be a mapping (a config.json read), or the name of a "
                             f"config.json or of its folder (a str or os.PathLike); got "
                             f"{type(config).__name__} {validation.shown(config)}")
        else:
            path = files.file_name("config", config)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            where = path
            try:
                with files.open_text_input(path, "model config") as handle:
                    data = json.load(handle)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON: {exc}") from None
            except RecursionError:
                raise ValueError(f"{path}: not a model config: its JSON is nested too deeply "
                                 "to read") from None
            if not isinstance(data, Mapping):
                raise ValueError(f"{path}: a model config must be a JSON object, "
                                 f"got {type(data).__name__}")
            if name is None:
                stem = os.path.splitext(os.path.basename(path))[0]
                name = data.get("_name_or_path") or (os.path.basename(
                    os.path.dirname(os.path.abspath(path))) if stem == "config" else stem) \
                    or "custom"
        return _from_config(data, where, name)


def _from_config(data: Mapping[str, Any], where: str, name: Optional[str]) -> ModelShape:
    def get(key: str, default: Any = ...) -> Any:
        value = data.get(key, default)
        if value is ...:
            raise ValueError(f"{where}: missing key {key!r} (needed for a model shape)")
        return value

    def whole(key: str, value: Any) -> int:
        try:
            return validation.positive_int(key, value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None

    layers = whole("num_hidden_layers", get("num_hidden_layers"))
    hidden = whole("hidden_size", get("hidden_size"))
    heads = whole("num_attention_heads", get("num_attention_heads"))
    kv = get("num_key_value_heads", None)
    head_dim = get("head_dim", None)
    ffn_key = "intermediate_size" if "intermediate_size" in data else "ffn_dim"
    if ffn_key not in data:
        raise ValueError(f"{where}: missing key 'intermediate_size' (or 'ffn_dim')")
    act_key = "hidden_act" if "hidden_act" in data else "activation_function"
    if act_key not in data:
        raise ValueError(f"{where}: missing key 'hidden_act' (or 'activation_function')")
    act = data[act_key]
    if not isinstance(act, str):
        raise ValueError(f"{where}: {act_key} must be an activation name, got {act!r}")
    tied = get("tie_word_embeddings", True)
    if not isinstance(tied, bool):
        raise ValueError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    try:
        return ModelShape(
            name or str(data.get("_name_or_path") or "custom"), layers, hidden, heads,
            None if kv is None else whole("num_key_value_heads", kv),
            None if head_dim is None else whole("head_dim", head_dim),
            ffn=whole(ffn_key, data[ffn_key]), gated=act.lower() in ("silu", "swiglu"),
            vocab=whole("vocab_size", get("vocab_size")), tied=tied)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not key(value):
        raise ValueError(f"{field} must be a non-empty name, got {value!r}")
    return value


def key(name: str) -> str:
    """The lookup key of a name: lower case, a parenthesised part dropped,
    spaces trimmed (``"Mistral-7B (v0.1)"`` -> ``"mistral-7b"``)."""
    return re.sub(r"\([^)]*\)", "", name).strip().lower()


_GPUS: Dict[str, GPU] = {}
#: Other names of built-in GPUs (``alias_of`` rows of ``gpus.json``): lookup
#: key -> (the name as written, the record's lookup key).
_GPU_ALIASES: Dict[str, Tuple[str, str]] = {}
_MODELS: Dict[str, ModelShape] = {}


def _load(filename: str) -> list:
    data = resources.files("llmqueue.hardware").joinpath("data")
    text = data.joinpath(filename).read_text("utf-8")
    return json.loads(text)


def _gpus() -> Dict[str, GPU]:
    if not _GPUS:
        for record in _load("gpus.json"):
            if "alias_of" in record:
                _GPU_ALIASES.setdefault(key(record["name"]),
                                        (record["name"], key(record["alias_of"])))
            else:
                _GPUS.setdefault(key(record["name"]), GPU(**record))
    return _GPUS


def _models() -> Dict[str, ModelShape]:
    if not _MODELS:
        for record in _load("models.json"):
            _MODELS.setdefault(key(record["name"]), ModelShape(**record))
    return _MODELS


def _register(table: Dict[str, Any], record: Any, kind: str, replace: bool) -> Any:
    k = key(record.name)
    if k in table and not replace and table[k] != record:
        raise ValueError(f"{kind} {record.name!r} is already known; pass replace=True to "
                         f"replace it")
    table[k] = record
    return record


def register_gpu(record: GPU, replace: bool = False) -> GPU:
    """Add ``record`` to the GPUs :func:`gpu` knows (an existing different record of
    the same name is an error unless ``replace``)."""
    if not isinstance(record, GPU):
        raise ValueError(f"record must be a GPU, got {record!r}")
    return _register(_gpus(), record, "GPU", replace)


def register_model(record: ModelShape, replace: bool = False) -> ModelShape:
    """Add ``record`` to the models :func:`model` knows (an existing different
    record of the same name is an error unless ``replace``)."""
    if not isinstance(record, ModelShape):
        raise ValueError(f"record must be a ModelShape, got {record!r}")
    return _register(_models(), record, "model", replace)


def gpu_names() -> List[str]:
    """The known GPUs' names, in the order they were added (one per record:
    :func:`gpu_aliases` holds the other names :func:`gpu` takes)."""
    return [g.name for g in _gpus().values()]


def gpu_aliases() -> Dict[str, str]:
    """The other names of built-in GPUs, each with its record's name: MLPerf's
    names of parts that are exactly a record (``"H100-SXM-80GB": "H100"``).
    A record registered under such a name wins over the alias."""
    table = _gpus()
    return {name: table[target].name for k, (name, target) in _GPU_ALIASES.items()
            if target in table and k not in table}


def model_names() -> List[str]:
    """The known models' lookup keys, in the order they were added."""
    return list(_models())


def gpu(name: Union[str, GPU]) -> GPU:
    """The GPU of this name (case-insensitive, parenthesis dropped: MLPerf's
    ``"H200-SXM-141GB-CTS (1000W)"``) or of this alias (:func:`gpu_aliases`), or
    ``name`` itself if it is a GPU.  Names match whole: ``H200-SXM-141GB-CTS``
    is never the ``H200-SXM-141GB``."""
    table = _gpus()
    if isinstance(name, str) and key(name) not in table:
        target = _GPU_ALIASES.get(key(name), (name, ""))[1]
        if target in table:
            return table[target]
    aliases = ", ".join(f"{alias} = {target}" for alias, target in gpu_aliases().items())
    return _lookup("gpu", GPU, table, gpu_names(), name,
                   f", or another name of one: {aliases}" if aliases else "")


def model(name: Union[str, ModelShape]) -> ModelShape:
    """The model shape of this name (case-insensitive, parenthesis dropped), or
    ``name`` itself if it is a ModelShape; a name no record has that ends in
    ``.json`` or names an existing file or folder is read as a Hugging Face
    ``config.json`` (:meth:`ModelShape.from_hf_config`; no network)."""
    if isinstance(name, str) and key(name) not in _models() and (
            name.strip().lower().endswith(".json") or os.path.exists(name)):
        return ModelShape.from_hf_config(name.strip())
    return _lookup("model", ModelShape, _models(), model_names(), name,
                   " or the path of a Hugging Face config.json")


T = TypeVar("T")


def _lookup(kind: str, record: Type[T], table: Dict[str, T], names: List[str],
            name: object, other: str = "") -> T:
    """``name`` itself if it is a ``record``, else the entry of ``table`` it
    names, else a ``ValueError`` listing the known names (and ``other`` forms)."""
    if isinstance(name, record):
        return name
    found = table.get(key(name)) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{kind} must be one of {', '.join(names)} (or a {record.__name__}"
                         f"{other}); got {name!r}")
    return found
