"""The roofline latency model (SPEC 8.3) against E8.1 and E8.3, its breakdown,
fitting, staircase approximation and the ``llmqueue latency`` command.

Expected values are SPEC's, not this code's output."""

import dataclasses
import itertools
import json

import pytest

import llmqueue as q
from llmqueue import hardware as hw
from llmqueue.cli.main import main
from llmqueue.hardware.roofline import TERMS
from llmqueue.models.context import BatchContext

GPUS = ["A100-40GB", "A100-80GB", "H100", "H200", "L40S", "MI300X"]


def prefill(model, b, at=0):
    """Seconds of one prefill chunk of b tokens after ``at`` cached tokens."""
    return model.batch_time(0, b, 1, BatchContext.of(chunks=[(b, at)]))


def decode(model, n, at):
    """Seconds of n decodes, each at context ``at``."""
    return model.batch_time(n, 0, n, BatchContext.of(decode_contexts=[at] * n))


# --- E8.1: CodeLlama-34B on one A100-80GB, prefill-only batches at context 0 ---------

E81_DEFAULT = {1: 43.12, 128: 44.97, 129: 79.7, 512: 161.95, 1024: 324.5}
E81_STAIRCASE = {1: 46.75, 128: 46.75, 512: 153.16, 1024: 295.04}
E81_IDEAL = {1: 32.84, 128: 32.88, 512: 109.69, 1024: 220.70}


@pytest.fixture(scope="module")
def codellama():
    return hw.Roofline("A100-80GB", "codellama-34b")


@pytest.mark.parametrize("b, ms", sorted(E81_DEFAULT.items()))
def test_e81_default_preset(codellama, b, ms):
    assert prefill(codellama, b) * 1e3 == pytest.approx(ms, rel=0.005)
    assert codellama.batch_time(0, b, 1) == prefill(codellama, b)  # the assumed context


@pytest.mark.parametrize("b, ms", sorted(E81_STAIRCASE.items()))
def test_e81_default_within_15_percent_of_the_staircase(codellama, b, ms):
    assert prefill(codellama, b) * 1e3 == pytest.approx(ms, rel=0.15)
    assert q.Staircase().tokens_time(b) * 1e3 == pytest.approx(ms, abs=0.01)


@pytest.mark.parametrize("b, ms", sorted(E81_IDEAL.items()))
def test_e81_ideal_preset_is_below_the_staircase(b, ms):
    ideal = hw.Roofline("A100-80GB", "codellama-34b", efficiency="ideal")
    assert prefill(ideal, b) * 1e3 == pytest.approx(ms, rel=0.005)
    assert prefill(ideal, b) * 1e3 < E81_STAIRCASE[b]


def test_e81_to_staircase(codellama):
    approx = codellama.to_staircase(1024)
    assert approx.model.b0 == 128
    assert 0.036 <= approx.model.a <= 0.044
    assert approx.rmse < 0.003
    assert min(approx.rmse_by_b0, key=approx.rmse_by_b0.get) == 128
    assert set(approx.rmse_by_b0) == {32, 64, 96, 128, 192, 256}
    assert set(codellama.to_staircase(100).rmse_by_b0) == {32, 64, 96}  # b0 >= bmax skipped
    with pytest.raises(ValueError, match="b0_grid"):
        codellama.to_staircase(16)


# --- E8.3: Llama-3-8B across GPUs -----------------------------------------------------

def llama(gpu, efficiency="default"):
    return hw.Roofline(gpu, "llama-3-8b", efficiency=efficiency)


def test_e83_ideal_ratios():
    a100, h100, h200 = (llama(g, "ideal") for g in ("A100-80GB", "H100", "H200"))
    assert decode(a100, 1, 1000) / decode(h100, 1, 1000) == pytest.approx(3.35 / 2.039,
                                                                           rel=0.02)
    assert decode(h100, 1, 1000) / decode(h200, 1, 1000) == pytest.approx(4.8 / 3.35, rel=0.02)
    assert prefill(a100, 4096) / prefill(h100, 4096) == pytest.approx(3.17, rel=0.03)
    assert prefill(h100, 4096) == pytest.approx(prefill(h200, 4096), rel=0.01)


E83_PREFILL = {"MI300X": 77.7, "H200": 100.3, "H100": 104.5, "L40S": 299.1,
               "A100-80GB": 307.0, "A100-40GB": 314.2}
E83_DECODE = {"MI300X": 5.00, "H200": 5.37, "H100": 7.08, "A100-80GB": 10.73,
              "A100-40GB": 13.63, "L40S": 23.40}


@pytest.mark.parametrize("gpu", GPUS)
def test_e83_default_values(gpu):
    model = llama(gpu)
    assert prefill(model, 4096) * 1e3 == pytest.approx(E83_PREFILL[gpu], rel=0.01)
    assert decode(model, 1, 1000) * 1e3 == pytest.approx(E83_DECODE[gpu], rel=0.01)


def test_e83_default_ordering():
    p = {g: prefill(llama(g), 4096) for g in GPUS}
    assert p["MI300X"] < p["H200"] <= p["H100"] < p["L40S"] <= p["A100-80GB"] <= p["A100-40GB"]
    d = {g: decode(llama(g), 1, 1000) for g in GPUS}
    assert d["MI300X"] < d["H200"] < d["H100"] < d["A100-80GB"] < d["A100-40GB"] < d["L40S"]


def grid_batches():
    """(p, d, decode context per request, prefill chunk's cached tokens)."""
    return itertools.product((0, 1, 100, 129, 2048), (0, 1, 64, 300), (0, 50, 1000, 8000),
                             (0, 300, 5000))


def breakdown(model, p, d, x, s):
    ctx = BatchContext.of([x] * d, [(p, s)] if p else [])
    return model.breakdown(d, p, d + (1 if p else 0), ctx)


@pytest.mark.parametrize("tp", [1, 2])
def test_e83_every_term_is_monotone_and_ideal_is_below_default(tp):
    default = hw.Roofline("H100", "llama-3-8b", tp=tp)
    ideal = hw.Roofline("H100", "llama-3-8b", tp=tp, efficiency="ideal")
    points = [pt for pt in grid_batches() if pt[0] + pt[1] > 0]
    parts = {pt: breakdown(default, *pt) for pt in points}
    for pt in points:
        lower = breakdown(ideal, *pt)
        assert lower.seconds <= parts[pt].seconds
        for term in TERMS:
            assert lower.terms[term] <= parts[pt].terms[term], (pt, term)
        for axis in range(4):  # raise p, d, decode context or chunk context alone
            for bigger in points:
                if bigger[axis] > pt[axis] and all(bigger[i] == pt[i] for i in range(4)
                                                   if i != axis):
                    for term in TERMS:
                        assert parts[bigger].terms[term] >= parts[pt].terms[term], \
                            (pt, bigger, term)


def test_breakdown_terms_sum_to_the_batch_time_and_name_the_bound():
    model = llama("H100")
    parts = model.breakdown(0, 4096, 1, BatchContext.of(chunks=[(4096, 0)]))
    assert parts.seconds == prefill(model, 4096)
    assert sum(parts.terms[t] for t in TERMS) == pytest.approx(parts.seconds, rel=1e-12)
    assert parts.bound == {"t_lin": "compute", "t_ap": "compute", "t_ad": None}
    assert parts.terms["t_tp"] == 0 and parts.tokens == 4096 and parts.sequences == 1
    one = model.breakdown(1, 0, 1, BatchContext.of([1000]))
    assert one.bound == {"t_lin": "memory", "t_ap": None, "t_ad": "memory"}
    assert one.padded == 128  # T^ = tile * ceil(T / tile)
    assert model.breakdown(0, 129, 1).padded == 256
    doc = json.loads(json.dumps(one.as_dict()))
    assert doc["seconds"] == one.seconds and doc["bound"]["t_lin"] == "memory"


def test_the_assumed_context():
    model = llama("H100")
    assert model.needs_context is True
    # two prefill requests of 100 tokens at context 0, split evenly
    assert model.batch_time(3, 200, 5) == model.batch_time(
        3, 200, 5, BatchContext.of([0, 0, 0], [(100, 0), (100, 0)]))
    assert hw.assumed_context(0, 7, 3) == BatchContext(0, 3, 0, 9 + 4 + 4, 0)
    assert hw.assumed_context(4, 0, 4) == BatchContext()
    assert q.tokens_time(model, 512) == prefill(model, 512)


def test_bad_batches_and_settings():
    model = llama("H100")
    with pytest.raises(ValueError, match="decode \\+ prefill"):
        model.batch_time(0, 0, 0)
    with pytest.raises(ValueError, match="context.chunks"):
        model.batch_time(0, 10, 1, BatchContext(0, 0, 0, 100, 0))
    with pytest.raises(ValueError, match="context.decode_ctx"):
        model.batch_time(1, 0, 1, BatchContext(-1, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="efficiency must be one of ideal, default"):
        hw.Roofline("H100", "llama-3-8b", efficiency="fast")
    with pytest.raises(ValueError, match="mfu must be a number in"):
        hw.Efficiency(mfu=0)
    with pytest.raises(ValueError, match="tile"):
        hw.Efficiency(tile=0)
    with pytest.raises(ValueError, match="chunks\\[0\\] n"):
        BatchContext.of(chunks=[(0, 5)])


def test_presets():
    assert hw.Efficiency() == hw.PRESETS["default"] == q.Efficiency()
    ideal = hw.PRESETS["ideal"]
    assert (ideal.mfu, ideal.mbu, ideal.eta_el, ideal.tile, ideal.t_step) == (1, 1, None, 1, 0)
    assert repr(llama("H100", "ideal")).endswith("efficiency='ideal')")


def test_tensor_parallel_adds_communication():
    one = hw.Roofline("H100", "llama-3-70b", tp=2)
    parts = one.breakdown(0, 1024, 1)
    # t_tp = 2*L*(alpha + 2*(tp-1)/tp * T*h*act_bytes / (link*eta_link)), SPEC 8.3
    expected = 2 * 80 * (10e-6 + 2 * 0.5 * 1024 * 8192 * 2 / (450e9 * 0.8))
    assert parts.terms["t_tp"] == pytest.approx(expected, rel=1e-9)
    assert hw.Roofline("H100", "llama-3-70b", tp=4).batch_time(0, 1024, 1) < \
        one.batch_time(0, 1024, 1)


# --- fit_roofline ---------------------------------------------------------------------

def samples_from(model):
    out = []
    for b in (128, 512, 2048, 4096):
        ctx = BatchContext.of(chunks=[(b, 0)])
        out.append(((0, b, 1, ctx), model.batch_time(0, b, 1, ctx)))
    for n, x in itertools.product((1, 16, 64, 256), (200, 2000)):
        ctx = BatchContext.of([x] * n)
        out.append(((n, 0, n, ctx), model.batch_time(n, 0, n, ctx)))
    return out


def test_fit_roofline_recovers_known_values():
    truth = dataclasses.replace(hw.PRESETS["default"], mfu=0.55, mbu=0.66, t_step=350e-6)
    samples = samples_from(hw.Roofline("A100-80GB", "llama-3-8b", efficiency=truth))
    fit = hw.fit_roofline(samples, gpu="A100-80GB", model="llama-3-8b")
    assert fit.values["mfu"] == pytest.approx(0.55, rel=1e-3)
    assert fit.values["mbu"] == pytest.approx(0.66, rel=1e-3)
    assert fit.values["t_step"] == pytest.approx(350e-6, rel=1e-3)
    assert fit.mape < 1e-4 and fit.samples == len(samples) and fit.undetermined == ()
    assert fit.efficiency.mfu_attn == truth.mfu_attn  # fields not named stay the base's
    assert fit.roofline.batch_time(1, 0, 1) > 0


def test_fit_roofline_keeps_bounds_and_reports_the_error():
    base = hw.Roofline("H100", "llama-3-8b")
    slow = [((d, p, r, c), 3 * t) for (d, p, r, c), t in samples_from(base)]
    fit = hw.fit_roofline(slow, base=base, free=("mfu", "mbu"))
    assert 0 < fit.values["mfu"] <= 1 and 0 < fit.values["mbu"] <= 1
    fast = [((d, p, r, c), t / 3) for (d, p, r, c), t in samples_from(base)]
    fit = hw.fit_roofline(fast, base=base, free=("mfu", "mbu", "t_step"))
    assert fit.values["mfu"] == 1 and fit.values["mbu"] == 1  # can't beat the peak
    assert fit.values["t_step"] >= 0 and fit.mape > 0.1
    with pytest.raises(ValueError, match="free field must be one of"):
        hw.fit_roofline(fast, base=base, free=("tile",))
    with pytest.raises(ValueError, match="gpu and model"):
        hw.fit_roofline(fast, free=("mfu",))
    with pytest.raises(ValueError, match="samples\\[0\\]"):
        hw.fit_roofline([(1, 2)], base=base)


# --- llmqueue latency -----------------------------------------------------------------

def test_latency_command_json(capsys):
    code = main(["latency", "--gpu", "H100", "--model", "llama-3-8b", "--prefill", "4096",
                 "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seconds"] * 1e3 == pytest.approx(E83_PREFILL["H100"], rel=0.01)
    assert doc["bound"]["t_lin"] == "compute" and doc["kv_capacity"] == 421011
    code = main(["latency", "--gpu", "a100-80gb", "--model", "Llama-3-8B", "--decode", "1",
                 "--context", "1000", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seconds"] * 1e3 == pytest.approx(E83_DECODE["A100-80GB"], rel=0.01)


def test_latency_command_text(capsys):
    assert main(["latency", "--gpu", "H100", "--model", "llama-3-70b", "--tp", "4",
                 "--decode", "32", "--context", "2000", "--prefill", "512",
                 "--efficiency", "ideal"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Llama-3-70B on 4 x H100") and "seconds" in out and "t_tp" in out


@pytest.mark.parametrize("argv, message", [
    (["--gpu", "B200", "--model", "llama-3-8b", "--decode", "1"], "gpu must be one of"),
    (["--gpu", "H100", "--model", "llama-9", "--decode", "1"], "model must be one of"),
    (["--gpu", "H100", "--model", "llama-3-8b"], "--prefill and --decode"),
    (["--gpu", "H100", "--model", "llama-3-8b", "--decode", "-1"], "--decode"),
    (["--gpu", "H100", "--model", "llama-3-8b", "--decode", "1", "--efficiency", "x"],
     "--efficiency must be one of"),
    (["--gpu", "H100", "--model", "llama-3-8b", "--decode", "1", "--tp", "3"], "tp must divide"),
    (["--gpu", "H100", "--model", "llama-3-70b", "--decode", "1"], "does not fit"),
])
def test_latency_command_errors(capsys, argv, message):
    assert main(["latency", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_capacity_search_prices_every_size_at_once_with_the_same_floats():
    """peak_token_rate on a roofline tries every batch size up to 65,536: the
    vectorised times are the scalar ones bit for bit, so the maximum is too."""
    import numpy as np

    from llmqueue.theory.capacity import peak_token_rate
    model = q.Roofline("A100-80GB", "codellama-34b")
    sizes = np.arange(1, 5001)
    assert model.tokens_times(sizes).tolist() == [model.tokens_time(int(b)) for b in sizes]
    scalar = max(b / model.tokens_time(b) for b in [*range(1, 65_537), 10**6])
    assert peak_token_rate(10**6, model) == scalar
