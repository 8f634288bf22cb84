"""MLPerf Inference's Llama-2-70B workload: its 24,576 samples' token lengths
and the offline and Poisson workloads the benchmark's scenarios run.

The package ships the benchmark's dataset as lengths only
(``models/data/mlperf_llama2_70b_lengths.csv``, source and licence in
``models/data/README.md``): for each sample, the prompt's tokens and the tokens of
the dataset's *reference* answer (GPT-4's), both counted with the Llama-2
tokenizer.  Prompts are used as they are (mean 222.3 tokens, at most 1,021).

The reference answers are not what the model under test generates: they
average 218.9 tokens, while Llama-2-70B's own answers in the published valid
runs average about 290 tokens a sample (output tokens per second divided by
samples per second: NVIDIA's v4.1 H100 Offline run, 24,524.9 / 84.4792 = 290.3;
the benchmark's accuracy rule asks for 294.45 tokens a sample within 10%).
So the generated length of a sample is, by default (``outputs="scaled"``):

    generated = min(max(1, round(SCALE x reference)), 1024)

one factor :data:`SCALE` = 1.3303 for every sample, rounded to the nearest whole
token (halves to even) and capped at 1,024 tokens, the benchmark's generation
limit.  :data:`SCALE` is the factor that makes the mean generated length
290.0 tokens over the 24,576 samples: :func:`scale_factor` finds it by
bisection (the smallest factor whose mean reaches 290; the mean is a step
function of the factor, and 1.3303 gives 290.008).  The cap shortens 265
samples.  ``outputs="raw"`` uses the reference lengths unchanged instead.

Samples are drawn as the benchmark's load generator draws them for this model:
the dataset in a random order, then again in a fresh random order, and so on,
so every sample is issued equally often (within one) however many are asked
for.  Same seed, same order, same arrival times.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from importlib import resources
from typing import List, Optional, Tuple

import numpy as np

from llmqueue.common import limits, validation
from llmqueue.models.arrivals import Poisson
from llmqueue.models.workload import Workload, from_list

#: The package data file of the dataset's lengths.
DATA_FILE = "mlperf_llama2_70b_lengths.csv"
#: Samples in the dataset.
SAMPLES = 24576
#: The benchmark's generation limit (output tokens a sample).
OUTPUT_LIMIT = 1024
#: Mean generated tokens a sample that :data:`SCALE` aims at (published runs).
TARGET_OUTPUT = 290.0
#: The factor of the scaling rule: ``scale_factor(290.0)`` = 1.33026, to four
#: decimals (mean generated length 290.008 tokens).
SCALE = 1.3303
#: What ``outputs=`` takes.
OUTPUTS = ("scaled", "raw")


@functools.lru_cache(maxsize=1)
def _dataset() -> Tuple[np.ndarray, np.ndarray]:
    """The shipped prompt and reference lengths, read once (read-only arrays)."""
    data = resources.files("llmqueue.models").joinpath("data")
    text = data.joinpath(DATA_FILE).read_text("utf-8")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or rows[0] != ["input_length", "output_length"] or len(rows) != SAMPLES + 1:
        raise ValueError(f"{DATA_FILE}: expected the header input_length,output_length and "
                         f"{SAMPLES} rows; the package data is damaged (reinstall llmqueue)")
    lengths = np.array(rows[1:], dtype=np.int64)
    prompts, references = lengths[:, 0], lengths[:, 1]
    for array in (prompts, references):
        array.setflags(write=False)
    return prompts, references


def generated_lengths(references: np.ndarray, scale: float = SCALE) -> np.ndarray:
    """The scaling rule: ``min(max(1, round(scale * reference)), 1024)`` for
    each reference length (rounded to the nearest whole token, halves to even)."""
    validation.positive_number("scale", scale)
    scaled = np.rint(np.asarray(references, dtype=float) * scale)
    return np.clip(scaled, 1, OUTPUT_LIMIT).astype(np.int64)


def scale_factor(target: float = TARGET_OUTPUT) -> float:
    """The smallest factor ``s`` (to 1e-12) for which the mean of
    :func:`generated_lengths` of the dataset's reference lengths reaches
    ``target`` tokens, found by bisection (deterministic).  ``target`` must be
    from 1 to 1,024 (the rule gives no mean outside).  ``scale_factor(290.0)``
    is 1.33026; :data:`SCALE` is it to four decimals."""
    validation.number_within("target", target, 1, OUTPUT_LIMIT)
    references = _dataset()[1]
    low, high = 0.0, float(OUTPUT_LIMIT)  # mean(low) = 1 <= target <= mean(high) = 1024
    while high - low > 1e-12:
        middle = (low + high) / 2
        if generated_lengths(references, middle).mean() >= target:
            high = middle
        else:
            low = middle
    return high


def mlperf_lengths(outputs: str = "scaled") -> Tuple[np.ndarray, np.ndarray]:
    """The dataset's 24,576 prompt lengths and output lengths (integer arrays,
    in the file's order): the output lengths by the scaling rule (``"scaled"``,
    the default, see the module docstring) or the reference answers' own
    (``"raw"``).  The file is read once; the arrays are read-only."""
    validation.choice("outputs", outputs, OUTPUTS)
    prompts, references = _dataset()
    if outputs == "raw":
        return prompts, references
    return prompts, _scaled()


@functools.lru_cache(maxsize=1)
def _scaled() -> np.ndarray:
    """The dataset's generated lengths by the rule at :data:`SCALE` (read-only)."""
    lengths = generated_lengths(_dataset()[1])
    lengths.setflags(write=False)
    return lengths


def sample_order(samples: int, seed: int = 0) -> np.ndarray:
    """The dataset indices of ``samples`` samples in the benchmark's order:
    a random permutation of the 24,576 samples, then a fresh one, and so on
    (seeded: the same ``seed``, the same order)."""
    validation.positive_int("samples", samples)
    validation.seed("seed", seed)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0])  # [1]: arrivals
    passes = -(-samples // SAMPLES)
    return np.concatenate([rng.permutation(SAMPLES) for _ in range(passes)])[:samples]


def mlperf_offline(samples: int = SAMPLES, outputs: str = "scaled", seed: int = 0) -> Workload:
    """The Offline scenario's query: ``samples`` requests all present at time 0,
    drawn in the benchmark's order (:func:`sample_order`) with the lengths of
    :func:`mlperf_lengths` (``outputs`` ``"scaled"`` or ``"raw"``).  Like
    :func:`~llmqueue.models.workload.offline`, its ``rate`` is ``None`` and its
    mean sizes are the dataset's.

    Examples:
        >>> w = mlperf_offline(3, seed=1)
        >>> w.count, {a.time for a in w}
        (3, {0.0})
    """
    validation.positive_int("samples", samples)
    limits.check_requests(None, None, samples)
    prompts, decodes = mlperf_lengths(outputs)
    order = sample_order(samples, seed)
    work = from_list(list(zip([0.0] * samples, prompts[order].tolist(),
                              decodes[order].tolist())))
    text = (f"MLPerf Llama-2-70B offline query of {samples} samples at t=0, "
            f"{outputs} outputs, seed={seed}")
    return dataclasses.replace(work, description=text, initial=samples, rate=None,
                               mean_prefill=float(prompts.mean()),
                               mean_decode=float(decodes.mean()))


def mlperf_poisson(rate: float, samples: Optional[int] = None, duration: Optional[float] = None,
                   outputs: str = "scaled", seed: int = 0) -> Workload:
    """The Server and Interactive scenarios' traffic: Poisson arrivals at
    ``rate`` per second, samples drawn in the benchmark's order
    (:func:`sample_order`) with the lengths of :func:`mlperf_lengths`.

    The run lasts as the benchmark's does, until both minimums are met: every
    arrival before ``duration`` seconds, and more after it if fewer than
    ``samples`` arrived by then.  Give ``samples``, ``duration`` or both
    (the benchmark asks at least 600 s).  The sizes of the ``k``-th request
    are the same whatever ``rate``, ``samples`` and ``duration`` are.

    Examples:
        >>> w = mlperf_poisson(10.0, samples=5, seed=3)
        >>> times = [a.time for a in w]
        >>> len(times), times == sorted(times), w.rate
        (5, True, 10.0)
    """
    law = Poisson(rate)  # checks the rate, naming it
    if samples is None and duration is None:
        raise ValueError("give samples (a count >= 1), duration (seconds > 0) or both; "
                         "got neither")
    if samples is not None:
        validation.positive_int("samples", samples)
        limits.check_requests(None, None, samples)
    if duration is not None:
        validation.gap_seconds("duration", duration)
        limits.check_requests(law.rate, duration)
    prompts, decodes = mlperf_lengths(outputs)
    validation.seed("seed", seed)
    times: List[float] = []
    for t in law.times(np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])):
        if (duration is None or t >= duration) and len(times) >= (samples or 0):
            break
        times.append(t)
    if not times:
        raise ValueError(f"no request arrives within duration={duration:g} s at rate="
                         f"{law.rate:g}/s with seed={seed}; give a longer duration or samples")
    order = sample_order(len(times), seed)
    work = from_list(list(zip(times, prompts[order].tolist(), decodes[order].tolist())))
    text = (f"MLPerf Llama-2-70B Poisson rate={law.rate:g}/s, {len(times)} samples"
            + (f" over {duration:g} s" if duration is not None else "")
            + f", {outputs} outputs, seed={seed}")
    return dataclasses.replace(work, description=text, rate=law.rate,
                               mean_prefill=float(prompts.mean()),
                               mean_decode=float(decodes.mean()))
