"""The ``llmqueue latency`` subcommand: one iteration's roofline time (SPEC 9).

``llmqueue latency --gpu G --model M [--tp N] [--efficiency E] [--prefill P]
[--decode D] [--context X] [--json]`` prices a batch of ``D`` decoding requests,
each holding ``X`` cached tokens, plus one prefill chunk of ``P`` tokens at
context 0, and prints ``seconds`` and the breakdown of SPEC 8.3.
"""

from __future__ import annotations

import argparse

from llmqueue.cli.report import strict_json
from llmqueue.common import validation
from llmqueue.hardware.efficiency import PRESETS
from llmqueue.hardware.roofline import TERMS, Roofline
from llmqueue.models.context import BatchContext


def add_parser(sub: "argparse._SubParsersAction") -> None:
    """Add ``latency`` to the command's subparsers."""
    p = sub.add_parser("latency", help="one iteration's time on a GPU (roofline) and its "
                                       "breakdown")
    p.add_argument("--gpu", required=True, help="GPU name, e.g. A100-80GB, H100")
    p.add_argument("--model", required=True, help="model name, e.g. llama-3-8b")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--efficiency", default="default", metavar="|".join(PRESETS),
                   help="efficiency preset (default: default)")
    p.add_argument("--prefill", type=int, default=0, metavar="P",
                   help="tokens of one prefill chunk at context 0 (default 0)")
    p.add_argument("--decode", type=int, default=0, metavar="D",
                   help="decoding requests, one token each (default 0)")
    p.add_argument("--context", type=int, default=0, metavar="X",
                   help="cached tokens of each decoding request (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=cmd_latency)


def cmd_latency(args: argparse.Namespace) -> None:
    """Print one iteration's time and its terms."""
    prefill = validation.token_count("--prefill", args.prefill)
    decode = validation.token_count("--decode", args.decode)
    context = validation.token_count("--context", args.context)
    if prefill + decode == 0:
        raise ValueError("--prefill and --decode must not both be 0 (an iteration needs a "
                         "token); got 0 and 0")
    validation.choice("--efficiency", args.efficiency, PRESETS)
    model = Roofline(args.gpu, args.model, validation.positive_int("--tp", args.tp),
                     args.efficiency)
    ctx = BatchContext(decode * context, 1 if prefill else 0, 0, prefill * prefill, 0)
    parts = model.breakdown(decode, prefill, decode + (1 if prefill else 0), ctx)
    if args.json:
        print(strict_json({"gpu": model.gpu.name, "model": model.model.name, "tp": model.tp,
                          "efficiency": args.efficiency, "prefill": prefill,
                          "decode": decode, "context": context,
                          "kv_capacity": model.kv_capacity, **parts.as_dict()}))
        return
    batch = ([f"{decode} decodes at context {context}"] if decode else []) + \
        ([f"a prefill chunk of {prefill} tokens at context 0"] if prefill else [])
    print(f"{model.model.name} on {model.tp} x {model.gpu.name}, efficiency "
          f"{args.efficiency}: {' + '.join(batch)}")
    print(f"seconds  {parts.seconds:.6g}  ({parts.seconds * 1e3:.3f} ms)")
    for term in TERMS:
        bound = parts.bound.get(term)
        note = f"  {bound}-bound" if bound else ""
        print(f"  {term:<8} {parts.terms[term] * 1e3:10.4f} ms{note}")
    print(f"tokens T = {parts.tokens} (padded {parts.padded}), sequences S = "
          f"{parts.sequences}; KV capacity {model.kv_capacity} tokens")
