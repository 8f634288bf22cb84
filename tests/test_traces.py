"""Trace readers: generic CSV and Azure 2023, good and broken files, the real files."""

import os

import numpy as np
import pytest

import llmqueue as q
from llmqueue.models.traces import parse_timestamp, read_trace

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_generic_csv_with_classes_is_sorted_by_time(tmp_path):
    path = write(tmp_path, "arrival,prefill,decode,class\n0.5,10,2,chat\n0.1,300,7,code\n")
    trace = read_trace(path)
    assert trace.format == "generic"
    assert list(trace.workload()) == [q.Arrival(0.1, 300, 7, "code"), q.Arrival(0.5, 10, 2, "chat")]


def test_azure_timestamps_with_seven_digits_are_seconds_since_the_first_row(tmp_path):
    path = write(tmp_path, AZURE + "2023-11-16 18:17:03.9799600,4808,10\n"
                 "2023-11-16 18:17:04.0319600,3180,8\n"
                 "2023-11-16 18:18:03.0000001,12,1\n"
                 "2023-11-17 00:00:00,5,5\n")
    trace = read_trace(path)
    assert trace.format == "azure-2023"
    expected = [0.0, 0.052, 59.0200401, 5 * 3600 + 42 * 60 + 56.02004]
    assert trace.times.tolist() == pytest.approx(expected, abs=1e-9)
    assert trace.prefill.tolist() == [4808, 3180, 12, 5]
    assert trace.decode.tolist() == [10, 8, 1, 5]


def test_parse_timestamp_keeps_every_digit():
    whole, frac = parse_timestamp("2023-11-16 18:17:03.9799600")
    assert frac == pytest.approx(0.97996, abs=1e-12) and whole % 60 == 3


@pytest.mark.parametrize("text, line, fragment", [
    ("arrival,prefill,decode\n0.1,10,2\n0.2,ten,2\n", 3, "prefill must be a whole number"),
    ("arrival,prefill,decode\n0.1,10\n", 2, "expected 3 fields"),
    ("arrival,prefill,decode\n-1,10,2\n", 2, "arrival must be a finite number >= 0"),
    ("arrival,prefill,decode\n0,1,1\n1e308,10,2\n", 3, "arrival must be a finite number >= 0 and"),
    ("arrival,prefill,decode\n0.1,2.5,2\n", 2, "whole number"),
    (AZURE + "2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:xx,1,1\n", 3, "TIMESTAMP must look"),
    (AZURE + "2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:02.00,1,1\n", 3, "earlier than"),
    (AZURE + "2023-02-30 18:17:03.97,10,2\n", 2, "day is out of range"),
    (AZURE + "2023-11-16 18:17:03.97,-4,2\n", 2,
     "ContextTokens must be a whole number of tokens from 0"),
])
def test_a_malformed_row_names_the_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ValueError) as err:
        read_trace(path)
    assert f"{path}:{line}:" in str(err.value) and fragment in str(err.value)


def test_an_unknown_header_is_refused_naming_both_formats(tmp_path):
    with pytest.raises(ValueError, match=r":1: header must be arrival,prefill,decode.*TIMESTAMP"):
        read_trace(write(tmp_path, "time,in,out\n1,2,3\n"))


@pytest.mark.parametrize("mode, decodes", [("one", [1, 4]), ("drop", [4])])
def test_zero_generated_tokens(tmp_path, mode, decodes):
    path = write(tmp_path, AZURE + "2023-11-16 18:17:03.0,10,0\n2023-11-16 18:17:04.0,10,4\n")
    trace = read_trace(path, zero_decode=mode)
    assert trace.decode.tolist() == decodes and trace.zero_decode_rows == 1
    with pytest.raises(ValueError, match=f"{path}:2: decode must be an integer >= 1"):
        read_trace(path, zero_decode="error")


def test_read_csv_reads_azure_files_too(tmp_path):
    path = write(tmp_path, AZURE + "2023-11-16 18:17:03.5,10,3\n2023-11-16 18:17:04.0,20,4\n")
    r = q.simulate(q.read_csv(path), "sarathi", latency=q.Constant(0.01))
    assert r.summary["completed"] == 2


def test_workload_rescales_and_limits(tmp_path):
    path = write(tmp_path, "arrival,prefill,decode\n0,1,1\n1,1,1\n2,1,1\n4,1,1\n")
    trace = read_trace(path)
    assert trace.arrival_law().rate == pytest.approx(3 / 4)  # 3 gaps over 4 s
    assert [a.time for a in trace.workload(rate=3 / 8)] == pytest.approx([0, 2, 4, 8])
    assert len(list(trace.workload(limit=2))) == 2


def test_the_real_azure_files(traces_dir):
    conv = read_trace(os.path.join(traces_dir, "AzureLLMInferenceTrace_conv.csv"))
    code = read_trace(os.path.join(traces_dir, "AzureLLMInferenceTrace_code.csv"))
    for trace, n in ((conv, 19366), (code, 8819)):
        assert len(trace) == n and trace.format == "azure-2023"
        assert trace.times[0] == 0 and np.all(np.diff(trace.times) >= 0)
        assert trace.zero_decode_rows == 0 and trace.decode.min() >= 1
    # first rows of the files, as printed by `head`
    assert conv.times[1] == pytest.approx(50.9951690 - 46.6805900)
    assert (conv.prefill[0], conv.decode[0]) == (374, 44)
    # the conversation trace spans just under an hour
    assert 3400 < conv.times[-1] < 3600
    # empirical laws resample the trace's own values
    law = conv.decode_law()
    assert law.mean == pytest.approx(conv.decode.mean())


def test_a_late_starting_clock_keeps_the_true_rate(tmp_path):
    # found in review: n / last_time made a trace in epoch seconds look idle
    late = tmp_path / "late.csv"
    late.write_text("arrival,prefill,decode\n" +
                    "".join(f"{100000 + 0.05 * i},500,200\n" for i in range(200)))
    assert q.read_csv(str(late)).rate == pytest.approx(20.0)


def test_speedup_multiplies_the_rate_of_the_replayed_part(traces_dir):
    # found in review: with a limit, the target rate came from the whole trace
    import os

    from llmqueue.models.traces import read_trace
    trace = read_trace(os.path.join(traces_dir, "AzureLLMInferenceTrace_conv.csv"))
    for limit in (100, 2000):
        base = [a.time for a in trace.workload(limit=limit)]
        fast = [a.time for a in trace.workload(limit=limit, speedup=0.25)]
        assert fast[-1] == pytest.approx(base[-1] / 0.25)
