"""Chunked prefill against whole prefills (docs/model.md §9.6, after Sarathi-Serve).

300 requests arrive as a seeded Poisson stream at 8 per second; 20% bring a
long prompt (uniform in [1500, 2500) tokens), the rest a short one (uniform in
[50, 200)), and every output is uniform in [100, 200) tokens.  At most 16 are
resident and there is no token budget.  Batches are priced by docs/model.md §4's step
model ``5 ms + 0.8 ms * d + 0.02 ms * p + 0.3 ms * p**0.6``.

* ``whole-prefill``: one resident's whole remaining prompt runs alone while any
  prompt is left (decodes wait), else every resident decodes;
* ``chunked``: ``sarathi`` with up to ``chunk`` prefill tokens per iteration and
  one decode token for every resident already decoding (they ride along).

The run reports throughput (output tokens / makespan), TTFT and TPOT p50/p99
and checks docs/model.md §9.6's four expectations.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llmqueue.common import validation
from llmqueue.engine.options import ALL_OPTIONS, RunOptions
from llmqueue.engine.results import Result
from llmqueue.engine.simulate import simulate
from llmqueue.experiments.base import Check, Experiment, Param, Rows, register
from llmqueue.models.arrivals import Poisson
from llmqueue.models.latency import StepModel
from llmqueue.models.sizes import Mixture, UniformInt
from llmqueue.models.workload import Workload, compose
from llmqueue.policies.builtin import Sarathi, WholePrefill

KMAX = 16
COUNT = 300
RATE = 8.0                      # requests per second
LONG_FRACTION = 0.2
LONG_PROMPT = (1500, 2500)      # tokens, [low, high)
SHORT_PROMPT = (50, 200)
OUTPUT = (100, 200)
CHUNK = 1024                    # prefill tokens per iteration, chunked side
SWEEP = (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
SEED = 0

#: docs/model.md §9.6's expectations, as (name, test on chunked / whole-prefill figures).
TPOT_GAIN = 0.05                # TPOT p99 lower by more than 5% with chunking
TTFT_LIMIT = 1.4                # TTFT p99 at most 1.4x the baseline
THROUGHPUT_FLOOR = 0.85         # throughput at least 0.85x the baseline


def workload(rate: float = RATE, count: int = COUNT, long_fraction: float = LONG_FRACTION,
             seed: int = SEED) -> Workload:
    """The docs/model.md §9.6 request stream."""
    validation.fraction("long_fraction", long_fraction)
    parts = [(w, law) for w, law in ((1.0 - long_fraction, UniformInt(*SHORT_PROMPT)),
                                     (long_fraction, UniformInt(*LONG_PROMPT))) if w > 0]
    return compose(Poisson(rate), Mixture(parts), UniformInt(*OUTPUT), count=count, seed=seed)


def serve(stream: Workload, policy: object, kmax: Optional[int] = KMAX,
          latency: Optional[StepModel] = None, **logs: Any) -> Result:
    """Run ``stream`` to the end under the step model with no token budget, and
    add ``output_tokens_per_s`` (output tokens / makespan) to the summary."""
    result = simulate(stream, policy, bmax=None, kmax=kmax,
                      latency=StepModel() if latency is None else latency, **logs)
    output = sum(a.decode for a in stream)
    result.add_figures(output_tokens_per_s=output / result.summary["duration"])
    return result


#: The two whole-prefill baselines: the prompt runs alone (docs/model.md §9.6's model), or
#: as in the notebook, which also charges the step model's per-decode cost for
#: every decoder that waits while the prompt runs.
BASELINES = {"alone": StepModel(), "notebook": StepModel(charge_waiting=True)}


def run(params: Dict[str, Any], options: RunOptions) -> Rows:
    """Rows ``whole-prefill`` (the baseline the checks use, ``baseline``),
    ``chunked``, and the other baseline beside them, all on the same requests."""
    requests = workload(params["rate"], params["count"], params["long_fraction"],
                        SEED if options.seed is None else options.seed)
    kmax, chosen = params["kmax"], params["baseline"]
    other = next(name for name in BASELINES if name != chosen)
    logs = options.logs()
    return [("whole-prefill", serve(requests, WholePrefill(), kmax, BASELINES[chosen], **logs)),
            ("chunked", serve(requests, Sarathi(chunk=params["chunk"]), kmax, **logs)),
            (f"whole-prefill-{other}",
             serve(requests, WholePrefill(), kmax, BASELINES[other], **logs))]


def checks(rows: Rows) -> List[Check]:
    """docs/model.md §9.6's four expectations, chunked against whole-prefill (a figure a
    short or stopped run leaves undefined fails its check and says so)."""
    found = {label: result.summary for label, result in rows}
    whole, chunked = found["whole-prefill"], found["chunked"]

    def ratio(key: str) -> Optional[float]:
        a, b = chunked.get(key), whole.get(key)
        return None if a is None or not b else a / b

    def compare(key: str, scale: float, unit: str, spec: str, passes: Callable[[float], bool]
                ) -> Tuple[bool, str]:
        r = ratio(key)
        if r is None:
            return False, (f"undefined: {key} is {chunked.get(key)} vs {whole.get(key)} "
                           "(too few requests finished)")
        return passes(r), (f"{chunked[key] * scale:{spec}} {unit} vs {whole[key] * scale:{spec}} "
                           f"{unit} ({r - 1:+.1%}, {r:.3f}x)")

    done = [(s["completed"], s["arrivals"]) for s in (whole, chunked)]
    return [
        Check(f"TPOT p99 lower with chunking by more than {TPOT_GAIN:.0%}",
              *compare("tpot_p99", 1e3, "ms", ".2f", lambda r: r < 1 - TPOT_GAIN)),
        Check(f"TTFT p99 at most {TTFT_LIMIT}x the baseline",
              *compare("ttft_p99", 1.0, "s", ".2f", lambda r: r <= TTFT_LIMIT)),
        Check(f"throughput at least {THROUGHPUT_FLOOR}x the baseline",
              *compare("output_tokens_per_s", 1.0, "output tokens/s", ".0f",
                       lambda r: r >= THROUGHPUT_FLOOR)),
        Check("every request finishes", all(c == a for c, a in done),
              ", ".join(f"{c}/{a}" for c, a in done)),
    ]


def sweep(chunks: Sequence[int] = SWEEP, seeds: Sequence[int] = (SEED,),
          **workload_args: Any) -> Dict[str, List[List[float]]]:
    """TTFT p99 and TPOT p99 (seconds) for each chunk size and seed, and the
    whole-prefill baseline per seed: ``{"ttft": [[...per seed] per chunk],
    "tpot": ..., "whole_ttft": [...per seed], "whole_tpot": ...}``."""
    out: Dict[str, List] = {"ttft": [], "tpot": [], "whole_ttft": [], "whole_tpot": []}
    streams = [workload(seed=s, **workload_args) for s in seeds]
    for requests in streams:
        base = serve(requests, WholePrefill()).summary
        out["whole_ttft"].append(base["ttft_p99"])
        out["whole_tpot"].append(base["tpot_p99"])
    for chunk in chunks:
        figures = [serve(requests, Sarathi(chunk=chunk)).summary for requests in streams]
        out["ttft"].append([s["ttft_p99"] for s in figures])
        out["tpot"].append([s["tpot_p99"] for s in figures])
    return out


#: The demo's table: docs/model.md §9.6's figures.
COLUMNS = [("output_tokens_per_s", "output tok/s", "{:.0f}"),
           ("ttft_p50", "TTFT p50 s", "{:.2f}"), ("ttft_p99", "TTFT p99 s", "{:.2f}"),
           ("tpot_p50", "TPOT p50 s", "{:.4f}"), ("tpot_p99", "TPOT p99 s", "{:.4f}"),
           ("completed", "done", "{:d}")]


EXPERIMENT = register(Experiment(
    options=ALL_OPTIONS - {"horizon", "warmup"},  # it runs its requests until all finish
    name="sarathi-demo",
    summary="model §9.6: chunked prefill (sarathi, chunk) against whole prefills, step model",
    run=run,
    seeded=True,
    checks=checks,
    columns=COLUMNS,
    params={"chunk": Param("int", CHUNK, "prefill tokens per iteration on the chunked side"),
            "kmax": Param("int-or-none", KMAX, "most resident requests (none: unlimited)"),
            "count": Param("int", COUNT, "requests"),
            "rate": Param("float", RATE, "Poisson arrivals per second"),
            "long_fraction": Param("float", LONG_FRACTION, "share of long prompts"),
            "baseline": Param("str", "alone", "whole-prefill baseline the checks use: alone "
                              "(the prompt runs alone) or notebook (waiting decoders charged "
                              "too)", tuple(BASELINES), quiet_default=True)},
))

