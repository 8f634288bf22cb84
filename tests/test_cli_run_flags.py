"""``llmqueue run NAME --help`` lists the flags ``run`` takes, ``--warmup``
among them (issue #33: it listed ``warmup`` and refused ``--warmup``)."""

import json

from conftest import cli_error
from llmqueue.cli.main import main


def test_help_lists_flags_that_run_takes(capsys):
    assert main(["run", "single", "--help"]) == 0
    out = capsys.readouterr().out
    honoured = out.split("options it honours:")[1].split(";")[0]
    flags = [part.split()[0] for part in honoured.split(",")]
    assert "--warmup" in flags and all(flag.startswith("--") for flag in flags)
    for flag in flags:
        assert f"[{flag}" in out.split("options:")[0]  # in the usage line: a flag run takes


def test_warmup_leaves_the_start_out(capsys):
    base = ["run", "single", "--horizon", "200", "--seed", "1", "--json"]
    assert main(base) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main(base + ["--warmup", "100"]) == 0
    late = json.loads(capsys.readouterr().out)
    assert late["params"]["warmup"] == 100 and "warmup" not in whole["params"]
    assert 0 < late["rows"][0]["arrivals"] < whole["rows"][0]["arrivals"]


def test_a_bad_warmup_is_one_line():
    assert "--warmup" in cli_error(["run", "single", "--warmup", "-1"])
    assert "below the horizon" in cli_error(["run", "single", "--horizon", "50",
                                             "--warmup", "50"])
    assert "needs a horizon" in cli_error(["run", "sarathi-demo", "--warmup", "5"])
    assert "does not support warmup" in cli_error(["run", "parallel", "--warmup", "5"])
