"""The KV-cache keys of SPEC 9 on the command line."""

import csv
import json

import pytest

from llmqueue.cli.main import main

MEMORY_KEYS = {"throughput_requests_per_s", "preemptions", "preemptions_per_iteration",
               "recompute_fraction", "kv_mean", "kv_max", "kv_utilization", "ignored"}


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_single_with_a_kv_cache_reports_memory(capsys):
    doc = run_json(capsys, "run", "single", "--set", "kv=60000", "--set", "kv_block=16",
                   "--set", "kv_admission=prompt", "--set", "kv_restart=scratch",
                   "--set", "kv_watermark=0.02", "--horizon", "80")
    row = doc["rows"][0]
    assert MEMORY_KEYS <= set(row)
    # point C's sizes, chunks of 128: g = [(1 + 290/128) 290 + 2 * 990 * 290 + 991 * 990] / 2
    # = 778,118.5; b* = 60,000 * 1280 / g = 98.70; t = 0.01128 + 0.03547 * 98.70 / 128
    # = 0.038631 s; mu_mem = 60,000 / (t g) = 1.996 req/s, below lambda* = 2.14
    assert row["binding"] == "memory"
    assert row["mu_mem"] == pytest.approx(1.996, abs=0.001)
    assert row["preemptions"] > 0 and 0 < row["kv_utilization"] <= 1
    p = doc["params"]
    assert (p["kv"], p["kv_block"], p["kv_admission"], p["kv_restart"]) == \
        (60000, 16, "prompt", "scratch")


def test_without_kv_the_rows_are_unchanged(capsys):
    row = run_json(capsys, "run", "single", "--horizon", "20")["rows"][0]
    assert not MEMORY_KEYS & set(row)


def test_every_single_engine_experiment_takes_the_kv_keys(capsys):
    row = run_json(capsys, "run", "point-c", "--scheduler", "vllm", "--set", "kv=50000",
                   "--set", "kv_admission=prompt", "--horizon", "40")["rows"][0]
    assert row["preemptions"] >= 0 and "kv_mean" in row


@pytest.mark.parametrize("setting, message", [
    (["kv_block=16"], "kv_block needs a KV cache"),
    (["kv=1000", "kv_preemption=swap"], "swap_tokens must be an integer >= 1 (kv_swap"),
    (["kv=1000", "kv_admission=eager"], "kv_admission must be one of lazy, prompt, peak"),
    (["kv=0"], "kv must be"),
    (["kv=1000", "kv_watermark=-1"], "kv_watermark must be"),
])
def test_bad_kv_settings_are_refused(capsys, setting, message):
    argv = ["run", "single", "--horizon", "5"]
    for s in setting:
        argv += ["--set", s]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_text_table_shows_memory_where_a_cache_ran(capsys):
    """With a cache the default table adds KV used, KV max, preemptions and
    the recomputed share, the figures of the row (not another run's)."""
    assert main(["run", "single", "--set", "kv=40000", "--horizon", "60"]) == 0
    header, _, row = capsys.readouterr().out.splitlines()[:3]
    assert header.endswith("KV used  KV max  preempted  recomputed")
    doc = run_json(capsys, "run", "single", "--set", "kv=40000", "--horizon", "60")["rows"][0]
    cells = row.split()
    assert cells[-4:] == [f"{doc['kv_utilization']:.0%}", str(doc["kv_max"]),
                          str(doc["preemptions"]), f"{doc['recompute_fraction']:.1%}"]
    assert main(["run", "single", "--horizon", "60"]) == 0
    assert "KV used" not in capsys.readouterr().out


def test_the_text_table_counts_requests_that_can_never_fit(capsys):
    """Prompts of up to 2000 tokens and a cache of 1500: those with
    vp + vd > 1500 are ignored (SPEC 7.1), and the table says how many, in a
    column of its own and in a note beside the verdict."""
    argv = ["run", "single", "--set", "kv=1500", "--set", "vp=uniform:100:2000",
            "--set", "vd=uniform:1:100", "--horizon", "60"]
    with pytest.warns(UserWarning, match="can never fit"):
        assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    with pytest.warns(UserWarning):
        doc = run_json(capsys, *argv)["rows"][0]
    assert 0 < doc["ignored"] < doc["arrivals"]
    assert out[0].endswith("recomputed  ignored")
    assert out[2].split()[-1] == str(doc["ignored"])
    assert any(f"{doc['ignored']} of {doc['arrivals']} requests ignored" in line
               for line in out)


def test_networks_take_the_kv_keys_one_cache_per_engine(capsys):
    doc = run_json(capsys, "run", "parallel", "--set", "engines=2", "--set", "kv=20000",
                   "--horizon", "20")
    rows = {row["label"]: row for row in doc["rows"]}
    assert set(rows) == {"engine-0", "engine-1", "total"}
    for name in ("engine-0", "engine-1"):  # each replica reports its own cache
        assert MEMORY_KEYS <= set(rows[name]) and rows[name]["kv_max"] <= 20000
    e0, e1, total = rows["engine-0"], rows["engine-1"], rows["total"]
    assert total["preemptions"] == e0["preemptions"] + e1["preemptions"]
    # the two caches together: integrals add, utilization is of both caches'
    # blocks, per-request and per-iteration figures weigh each engine's counts
    assert total["kv_mean"] == pytest.approx(e0["kv_mean"] + e1["kv_mean"])
    assert total["kv_utilization"] == pytest.approx(
        (e0["kv_utilization"] + e1["kv_utilization"]) / 2)
    assert total["memory_area_mean"] == pytest.approx(
        (e0["memory_area_mean"] * e0["completed"] + e1["memory_area_mean"] * e1["completed"])
        / (e0["completed"] + e1["completed"]))
    assert total["preemptions_per_iteration"] == pytest.approx(
        total["preemptions"] / (e0["batches"] + e1["batches"]))
    assert "kv_max" not in total  # the maximum of a sum is not the engines' maxima
    plain = run_json(capsys, "run", "parallel", "--set", "engines=2", "--horizon", "20")
    assert not MEMORY_KEYS & set(plain["rows"][0])


def test_constant_iteration_time_with_a_zero(capsys):
    row = run_json(capsys, "run", "single", "--set", "a=0", "--set", "c=0.05",
                   "--horizon", "10")["rows"][0]
    assert row["busy_fraction"] > 0


def test_capacity_gives_the_memory_figures_with_kv(capsys):
    doc = run_json(capsys, "capacity", "--set", "kv=131000", "--set", "vp=805",
                   "--set", "vd=805", "--set", "chunked=false", "--set", "bmax=1000000",
                   "--set", "kmax=none", "--set", "c=0.0372", "--set", "a=0", "--set", "b0=1")
    # whole prompts: g = 806 * 805 + 805 * 806 / 2 = 973,245; mu = M / (tau g)
    assert doc["mu_mem"] == pytest.approx(131_000 / (0.0372 * 973_245))
    assert doc["binding"] == "memory" and doc["lambda_joint"] == doc["mu_mem"]
    plain = run_json(capsys, "capacity")
    assert "mu_mem" not in plain


def test_capacity_says_when_no_request_fits_or_no_wait_quota_fits(capsys):
    """Point C's requests hold 290 + 990 = 1,280 tokens: a cache of 1,000 can
    hold none, so every request is ignored and memory serves 0 req/s (not the
    fluid formula's 0.11, with a negative "stable side").  With 38,000 tokens
    they fit, but WAIT's one-request quota needs n g = 777,935 tokens in its
    steady state: no quota fits, so there is no lambda_WAIT to give."""
    doc = run_json(capsys, "capacity", "--set", "kv=1000")
    assert doc["fits"] is False and doc["binding"] == "memory"
    assert doc["mu_mem"] == doc["mu_mem_stable"] == doc["lambda_joint"] == 0.0
    assert doc["lambda_wait"] is None
    assert main(["capacity", "--set", "kv=1000"]) == 0
    assert "no request fits" in capsys.readouterr().out
    doc = run_json(capsys, "capacity", "--set", "kv=38000")
    assert "fits" not in doc and doc["mu_mem"] > 1.5
    assert doc["wait_kv"] == 777_935 and doc["lambda_wait"] is None


WAIT_ENGINE = ["--set", "kv=100000", "--set", "vp=20", "--set", "vd=200", "--set", "c=0.02",
               "--set", "a=2e-5", "--set", "b0=1", "--set", "bmax=1000000", "--set", "kmax=none",
               "--set", "chunked=false", "--set", "scheduler=wait"]


@pytest.mark.parametrize("quota", [None, 3, 5])
def test_capacity_takes_the_wait_quota_it_is_given(capsys, quota):
    """A request of (20, 200) holds g = 200 * 20 + 200 * 201 / 2 = 24,120
    token-iterations: the quota of M = 100,000 tokens is 4 (96,480); a quota
    of 3 steadies at 72,360, one of 5 at 120,600 > M (WAIT would preempt).
    ``wait_n`` was checked, then ignored (always 4)."""
    extra = [] if quota is None else ["--set", f"wait_n={quota}"]
    doc = run_json(capsys, "capacity", *WAIT_ENGINE, *extra)
    n = 4 if quota is None else quota
    assert (doc["wait_n"], doc["wait_kv"]) == (n, n * 24_120)
    assert (doc["lambda_wait"] is None) == (n == 5)
    assert main(["capacity", *WAIT_ENGINE, *extra]) == 0
    text = capsys.readouterr().out
    assert f"quota n = {n}," in text
    assert ("this quota does not fit" in text) == (n == 5)


def test_logs_carry_the_kv_columns(tmp_path, capsys):
    batches, requests = tmp_path / "b.csv", tmp_path / "r.csv"
    assert main(["run", "single", "--set", "kv=40000", "--horizon", "30",
                 "--batches", str(batches), "--requests", str(requests)]) == 0
    capsys.readouterr()
    header = next(csv.reader(open(batches)))
    assert header[-5:] == ["kv_tokens", "kv_blocks", "preemptions", "recomputed_tokens",
                           "new_starts"]
    header = next(csv.reader(open(requests)))
    assert header[-4:] == ["ignored", "preemptions", "recomputed_tokens", "memory_area"]


def test_capacity_prints_spec_7_8_3_closed_forms(capsys):
    """SPEC 7.8.3: (20, 200) tokens, M = 100,000, t = 0.02 + 2e-5 b: g = 24,120,
    b* = 912.1, mu_mem = lambda_joint = 108.41 (memory binds), WAIT(4) with KV
    at 96,480 and lambda_WAIT = 106.38 req/s."""
    from llmqueue.cli.main import main
    argv = ["capacity", "--json", "--set", "kv=100000", "--set", "vp=20", "--set", "vd=200",
            "--set", "c=0.02", "--set", "a=2e-5", "--set", "b0=1", "--set", "bmax=1000000",
            "--set", "kmax=none", "--set", "chunked=false"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kv_area"] == 24_120 and doc["b_star"] == pytest.approx(912.1, abs=0.05)
    assert doc["mu_mem"] == pytest.approx(108.41, abs=0.005)
    assert doc["lambda_joint"] == doc["mu_mem"] and doc["binding"] == "memory"
    assert doc["wait_n"] == 4 and doc["wait_kv"] == 96_480
    assert doc["lambda_wait"] == pytest.approx(106.38, abs=0.005)
    assert doc["delta"] == pytest.approx(220 / 100_000)
    assert main(argv[1:1] + ["capacity"] + argv[2:]) == 0
    text = capsys.readouterr().out
    assert "memory binds" in text and "lambda_WAIT = 106.4" in text


BOUND = ["--set", "scheduler=sarathi", "--set", "bmax=512", "--set", "kmax=none",
         "--set", "vp=129", "--set", "vd=112", "--set", "arrival=poisson", "--set", "rate=13"]


def test_the_prediction_counts_memory_where_it_binds(capsys):
    """13 req/s is 0.94 of sarathi-512's compute capacity (Theorem 2:
    stable), but a 20,000-token cache serves at most mu_mem = 12.73 req/s of
    these requests (SPEC 7.6: lambda <= mu_mem is necessary), so both
    ``capacity`` and ``run`` predict unstable, as the run measures; without
    the cache, or with a cache that binds above the rate, Theorem 2 stands."""
    doc = run_json(capsys, "capacity", *BOUND, "--set", "kv=20000")
    assert doc["binding"] == "memory" and 12.5 < doc["lambda_joint"] < 13
    assert doc["load"] < 0.95
    assert doc["verdicts"]["sarathi"]["predicted"] == "unstable"
    assert run_json(capsys, "capacity", *BOUND)["verdicts"]["sarathi"]["predicted"] == "stable"
    roomy = run_json(capsys, "capacity", *BOUND, "--set", "kv=200000")
    assert roomy["lambda_joint"] > 13 and roomy["verdicts"]["sarathi"]["predicted"] == "stable"
    row = run_json(capsys, "run", "single", *BOUND, "--set", "kv=20000", "--horizon", "30")
    assert row["rows"][0]["predicted"] == "unstable"
    assert main(["run", "single", *BOUND, "--set", "kv=20000", "--horizon", "30"]) == 0
    assert "theory: unstable (load 0.937; memory binds at 12.73 req/s)" in capsys.readouterr().out
