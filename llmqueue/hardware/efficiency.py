"""How close a roofline runs to the hardware's peaks (docs/model.md §7.3's presets).

:class:`Efficiency` holds the utilisations and fixed overheads of
:class:`llmqueue.hardware.roofline.Roofline`; :func:`efficiency` resolves a
preset name (``"ideal"``, ``"default"``) or the path of a profile file
(:func:`read_profile`: what ``llmqueue calibrate`` writes), or passes an
instance through.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Optional, Tuple, Union

from llmqueue.common import validation

#: Fields that are efficiencies in (0, 1] (``eta_el`` may also be None: term off).
FRACTIONS: Tuple[str, ...] = ("mfu", "mbu", "mfu_attn", "mbu_attn", "eta_el", "eta_link")
#: Fields that are times in seconds, >= 0.
TIMES: Tuple[str, ...] = ("tau_layer", "t_step", "t_req", "alpha")


@dataclass(frozen=True)
class Efficiency:
    """Utilisations and overheads of a roofline (docs/model.md §7.3).

    * ``mfu``, ``mbu``: share of peak FLOP/s and HBM bandwidth for the layer GEMMs
      and weight reads, the decode-attention FLOPs (``mfu``) and the prefill KV
      reads (``mbu``);
    * ``mfu_attn``: prefill-attention FLOPs only; ``mbu_attn``: decode KV bytes only;
    * ``eta_el``: bandwidth share of the element-wise traffic (``None``: term off);
    * ``tile``: the token tile of the layer GEMMs (``T`` is rounded up to it);
    * ``tau_layer`` per layer, ``t_step`` per iteration, ``t_req`` per sequence (s);
    * ``alpha`` (s) and ``eta_link``: latency and efficiency of one all-reduce.
    """

    mfu: float = 0.72
    mbu: float = 0.80
    mfu_attn: float = 0.50
    mbu_attn: float = 0.60
    eta_el: Optional[float] = 1 / 3
    tile: int = 128
    tau_layer: float = 40e-6
    t_step: float = 130e-6
    t_req: float = 4.4e-6
    alpha: float = 10e-6
    eta_link: float = 0.8

    def __post_init__(self) -> None:
        for name in FRACTIONS:
            value = getattr(self, name)
            if name == "eta_el" and value is None:
                continue
            if not 0 < validation.fraction(name, value):
                raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
        validation.positive_int("tile", self.tile)
        for name in TIMES:
            validation.nonnegative_number(name, getattr(self, name))

    def as_dict(self) -> Dict[str, object]:
        """The fields, for ``--json``."""
        return asdict(self)

    @property
    def name(self) -> Optional[str]:
        """The preset's name if this equals one, else None."""
        return next((k for k, v in PRESETS.items() if v == self), None)


#: The presets: ``ideal`` (a lower bound on any engine), ``default``
#: (calibrated on Vidur's A100/H100 operator times) and ``trtllm`` (fitted by
#: ``llmqueue calibrate`` to TensorRT-LLM's published H100 offline throughput,
#: FP8, the 21 rows shipped in ``experiments/data``; docs/validation.md).
PRESETS: Dict[str, Efficiency] = {
    "ideal": Efficiency(mfu=1.0, mbu=1.0, mfu_attn=1.0, mbu_attn=1.0, eta_el=None, tile=1,
                        tau_layer=0.0, t_step=0.0, t_req=0.0, alpha=0.0, eta_link=1.0),
    "default": Efficiency(),
    "trtllm": Efficiency(mfu=0.698, mbu=0.714, mfu_attn=0.781, mbu_attn=0.95,
                         tau_layer=87.7e-6, t_step=0.0),
}


#: The key of a profile file that holds its :class:`Efficiency` fields.
PROFILE_KEY = "efficiency"


def is_profile_path(value: object) -> bool:
    """Whether ``value`` names a profile file rather than a preset: a string
    ending in ``.json`` or naming an existing file."""
    return isinstance(value, str) and value.lower() not in PRESETS and (
        value.strip().lower().endswith(".json") or os.path.isfile(value.strip()))


def read_profile(path: str) -> Efficiency:
    """The :class:`Efficiency` of the profile file at ``path``: a JSON object
    whose ``"efficiency"`` member holds its fields (others take their default
    values); what ``llmqueue calibrate --profile`` writes.  A missing file, bad
    JSON or a bad field is a one-line ``ValueError`` naming the file."""
    path = path.strip()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ValueError(f"efficiency profile {path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise ValueError(f"efficiency profile {path}: not JSON ({exc})") from None
    values: Any = data.get(PROFILE_KEY) if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise ValueError(f"efficiency profile {path}: expected a JSON object with an "
                         f"{PROFILE_KEY!r} object of fields")
    known = {f.name for f in fields(Efficiency)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"efficiency profile {path}: unknown field(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(sorted(known))}")
    try:
        return Efficiency(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"efficiency profile {path}: {exc}") from None


def efficiency(value: Union[str, Efficiency]) -> Efficiency:
    """The preset of this name, the profile at this path (:func:`read_profile`),
    or ``value`` itself if it is an :class:`Efficiency`."""
    if isinstance(value, Efficiency):
        return value
    if isinstance(value, str) and value.lower() in PRESETS:
        return PRESETS[value.lower()]
    if is_profile_path(value):
        return read_profile(str(value))
    raise ValueError(f"efficiency must be one of {', '.join(PRESETS)}, the path of a "
                     f"profile file (.json, written by llmqueue calibrate) or an Efficiency; "
                     f"got {value!r}")
