"""How close a roofline runs to the hardware's peaks (SPEC 8.3's presets).

:class:`Efficiency` holds the utilisations and fixed overheads of
:class:`llmqueue.hardware.roofline.Roofline`; :func:`efficiency` resolves a
preset name (``"ideal"``, ``"default"``) or passes an instance through.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Optional, Tuple, Union

from llmqueue.common import validation

#: Fields that are efficiencies in (0, 1] (``eta_el`` may also be None: term off).
FRACTIONS: Tuple[str, ...] = ("mfu", "mbu", "mfu_attn", "mbu_attn", "eta_el", "eta_link")
#: Fields that are times in seconds, >= 0.
TIMES: Tuple[str, ...] = ("tau_layer", "t_step", "t_req", "alpha")


@dataclass(frozen=True)
class Efficiency:
    """Utilisations and overheads of a roofline (SPEC 8.3).

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


#: The presets of SPEC 8.3: ``ideal`` (a lower bound on any engine) and
#: ``default`` (calibrated on Vidur's A100/H100 operator times).
PRESETS: Dict[str, Efficiency] = {
    "ideal": Efficiency(mfu=1.0, mbu=1.0, mfu_attn=1.0, mbu_attn=1.0, eta_el=None, tile=1,
                        tau_layer=0.0, t_step=0.0, t_req=0.0, alpha=0.0, eta_link=1.0),
    "default": Efficiency(),
}


def efficiency(value: Union[str, Efficiency]) -> Efficiency:
    """The preset of this name, or ``value`` itself if it is an :class:`Efficiency`."""
    if isinstance(value, Efficiency):
        return value
    if isinstance(value, str) and value.lower() in PRESETS:
        return PRESETS[value.lower()]
    raise ValueError(f"efficiency must be one of {', '.join(PRESETS)} or an Efficiency; "
                     f"got {value!r}")
