"""The ``llmqueue latency`` subcommand: one iteration's roofline time (docs/model.md §7.3).

``llmqueue latency --gpu G --model M [--tp N] [--efficiency E] [--prefill P]
[--decode D] [--context X] [--precision F] [--attention-precision F]
[--kv-cache-dtype F] [--json]`` prices a batch of ``D`` decoding requests,
each holding ``X`` cached tokens, plus one prefill chunk of ``P`` tokens at
context 0, and prints ``seconds`` and the breakdown of docs/model.md §7.3.  ``E`` is an
efficiency preset or the path of an efficiency profile (``PATH.json``).  The three
precision flags mean what the ``--set`` keys ``precision``,
``attention_precision`` and ``kv_cache_dtype`` of ``llmqueue run`` mean and
take the same values (:data:`~llmqueue.experiments.base.LATENCY_PARAMS`);
:func:`~llmqueue.hardware.latency.precision_of` turns them into the
:class:`~llmqueue.hardware.precision.Precision` the roofline prices.
"""

from __future__ import annotations

import argparse
from typing import Dict, Tuple

from llmqueue.cli.report import strict_json
from llmqueue.common import validation
from llmqueue.experiments.base import LATENCY_PARAMS
from llmqueue.hardware.efficiency import PRESETS, Efficiency, is_profile_path
from llmqueue.hardware.efficiency import efficiency as find_efficiency
from llmqueue.hardware.latency import precision_of
from llmqueue.hardware.precision import Precision
from llmqueue.hardware.roofline import TERMS, Roofline
from llmqueue.models.context import BatchContext

#: The precision flags: ``(flag, the --set key whose meaning, default and values
#: it takes, the part it sets)``.
PRECISION_FLAGS: Tuple[Tuple[str, str, str], ...] = (
    ("--precision", "precision", "the layer weights and their GEMMs (fp8: 1 byte at the "
                                 "GPU's FP8 rate)"),
    ("--attention-precision", "attention_precision", "attention's QK/PV math (fp8: FP8 "
                                                     "attention kernels)"),
    ("--kv-cache-dtype", "kv_cache_dtype", "the KV-cache element (auto: bf16; fp8 halves "
                                           "its bytes per token and so doubles the capacity)"))


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``latency`` to the command's subparsers."""
    p = sub.add_parser("latency", help="one iteration's time on a GPU (roofline) and its "
                                       "breakdown")
    p.add_argument("--gpu", required=True, help="GPU name, e.g. A100-80GB, H100")
    p.add_argument("--model", required=True, help="model name, e.g. llama-3-8b")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--efficiency", default="default", metavar="|".join(PRESETS) + "|PATH.json",
                   help="efficiency preset, or the path of an efficiency profile (default: "
                        "default)")
    p.add_argument("--prefill", type=int, default=0, metavar="P",
                   help="tokens of one prefill chunk at context 0 (default 0)")
    p.add_argument("--decode", type=int, default=0, metavar="D",
                   help="decoding requests, one token each (default 0)")
    p.add_argument("--context", type=int, default=0, metavar="X",
                   help="cached tokens of each decoding request (default 0)")
    for flag, key, part in PRECISION_FLAGS:
        param = LATENCY_PARAMS[key]
        p.add_argument(flag, dest=key, default=param.default, metavar="|".join(param.choices),
                       help=f"format of {part}, as the run key {key} (default: "
                            f"{param.default})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_latency)


def precision_flags(args: argparse.Namespace) -> Tuple[Dict[str, str], Precision]:
    """The precision flags of ``args`` checked (a bad value is a one-line
    ValueError naming the flag and the allowed values) and the
    :class:`~llmqueue.hardware.precision.Precision` they state."""
    keys = {key: validation.choice(flag, getattr(args, key), LATENCY_PARAMS[key].choices)
            for flag, key, _ in PRECISION_FLAGS}
    return keys, precision_of(**keys)


def efficiency_flag(value: str) -> Efficiency:
    """``--efficiency``: a preset's name (as written) or the path of a profile
    file (:func:`~llmqueue.hardware.efficiency.read_profile`), else a one-line
    ValueError naming the flag."""
    if value in PRESETS:
        return PRESETS[value]
    if not is_profile_path(value):
        raise ValueError(f"--efficiency must be one of {', '.join(PRESETS)} or the path of an "
                         f"efficiency profile (.json); got {validation.shown(value)}")
    try:
        return find_efficiency(value)
    except ValueError as exc:
        raise ValueError(f"--efficiency: {exc}") from None


def described(precision: Precision) -> str:
    """``precision`` in words: its format's name when it is the usual engine of
    one format, else the weights', attention's and KV cache's formats."""
    return precision.name or (f"weights {precision.weights}, attention {precision.attention}, "
                              f"KV cache {precision.kv}")


def cmd_latency(args: argparse.Namespace) -> None:
    """Print one iteration's time and its terms."""
    prefill = validation.token_count("--prefill", args.prefill)
    decode = validation.token_count("--decode", args.decode)
    context = validation.token_count("--context", args.context)
    if prefill + decode == 0:
        raise ValueError("--prefill and --decode must not both be 0 (an iteration needs a "
                         "token); got 0 and 0")
    efficiency = efficiency_flag(args.efficiency)
    formats, precision = precision_flags(args)
    model = Roofline(args.gpu, args.model, validation.positive_int("--tp", args.tp),
                     efficiency, precision)
    profile = {} if args.efficiency in PRESETS else {"efficiency_fields": efficiency.as_dict()}
    ctx = BatchContext(decode * context, 1 if prefill else 0, 0, prefill * prefill, 0)
    parts = model.breakdown(decode, prefill, decode + (1 if prefill else 0), ctx)
    if args.json:
        print(strict_json({"gpu": model.gpu.name, "model": model.model.name, "tp": model.tp,
                          "efficiency": args.efficiency, **profile, **formats,
                          "formats": precision.as_dict(), "prefill": prefill,
                          "decode": decode, "context": context,
                          "kv_capacity": model.kv_capacity, **parts.as_dict()}))
        return
    batch = ([f"{decode} decodes at context {context}"] if decode else []) + \
        ([f"a prefill chunk of {prefill} tokens at context 0"] if prefill else [])
    source = args.efficiency if args.efficiency in PRESETS else f"profile {args.efficiency}"
    print(f"{model.model.name} on {model.tp} x {model.gpu.name}, efficiency {source}, "
          f"precision {described(precision)}: {' + '.join(batch)}")
    print(f"seconds  {parts.seconds:.6g}  ({parts.seconds * 1e3:.3f} ms)")
    for term in TERMS:
        bound = parts.bound.get(term)
        note = f"  {bound}-bound" if bound else ""
        print(f"  {term:<8} {parts.terms[term] * 1e3:10.4f} ms{note}")
    print(f"tokens T = {parts.tokens} (padded {parts.padded}), sequences S = "
          f"{parts.sequences}; KV capacity {model.kv_capacity} tokens")
