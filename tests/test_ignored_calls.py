"""A call that can never fit its engine's KV cache (SPEC 7.1) in a network:
the request is ignored (counted, warned once) and the call's event fails at
once with ``RequestIgnored``, so a workflow learns of it: one that does not
catch it ends unfinished and is counted in ``jobs_failed``; one that catches
it goes on.  Before, the event never fired and the job waited for ever."""

import json
import warnings

import pytest

import llmqueue as q
from llmqueue.network import Network, job_summary, start_jobs

SMALL = q.KV(capacity_tokens=1000)  # 1,000 tokens: a (5000, 10) request never fits


def network() -> Network:
    net = Network()
    net.add_engine("small", "sarathi", kv=SMALL)
    net.add_engine("large", "sarathi", kv=q.KV(capacity_tokens=100_000))
    net.add_replicas("pool", 2, kv=SMALL)
    return net


def run_quietly(net: Network):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return net.run()


def test_an_engine_call_that_never_fits_fails_at_once_naming_engine_and_request():
    net = network()
    seen = []

    def job(ctx):
        yield ctx.call("small", 100, 10)
        before = ctx.now
        try:
            yield ctx.call("small", 5000, 10)
        except q.RequestIgnored as error:
            seen.append((ctx.now, error.engine, error.rid, str(error)))
        assert ctx.now == before  # failed at the instant it was sent, not later

    start_jobs(net, job, times=[0.0])
    with pytest.warns(UserWarning, match="can never fit"):
        result = net.run()
    assert len(seen) == 1
    _, engine, rid, text = seen[0]
    assert (engine, rid) == ("small", 1)  # the engine's second arrival
    assert "request 1 of engine 'small' can never fit" in text
    summary = result.engines["small"].summary
    assert (summary["completed"], summary["ignored"]) == (1, 1)


def test_a_job_that_does_not_catch_it_ends_unfinished_and_counts_as_failed():
    net = network()

    def job(ctx):
        yield ctx.call("small", 100, 10)
        if ctx.record.jid == 1:
            yield ctx.call("small", 5000, 10)  # job 1 only
        yield ctx.call("small", 100, 10)

    jobs = start_jobs(net, job, times=[0.0, 0.5, 1.0])
    result = run_quietly(net)
    figures = job_summary(jobs)
    assert (figures["jobs"], figures["jobs_completed"], figures["jobs_failed"]) == (3, 2, 1)
    failed = jobs[1]
    assert failed.end is None and "can never fit" in failed.failed
    assert [r.failed for r in (jobs[0], jobs[2])] == [None, None]
    assert len(failed.calls) == 2  # its third call was never made
    # every request is accounted for: 5 finished, 1 ignored, none left
    summary = result.engines["small"].summary
    assert (summary["completed"], summary["ignored"], summary["pending_final"]) == (5, 1, 0)


def test_a_job_that_catches_it_can_send_the_call_elsewhere_and_finish():
    net = network()

    def job(ctx):
        try:
            yield ctx.call("small", 5000, 10)
        except q.RequestIgnored:
            yield ctx.call("large", 5000, 10)

    jobs = start_jobs(net, job, times=[0.0])
    result = run_quietly(net)
    assert job_summary(jobs)["jobs_completed"] == 1 and jobs[0].failed is None
    assert [c.target for c in jobs[0].calls] == ["small", "large"]
    assert result.engines["large"].summary["completed"] == 1


def test_through_a_pool_and_in_a_fork_join_the_failure_reaches_the_job():
    net = network()

    def job(ctx):
        yield ctx.all([ctx.call("pool", 100, 10), ctx.call("pool", 5000, 10)])

    jobs = start_jobs(net, job, times=[0.0])
    run_quietly(net)
    assert jobs[0].end is None and "can never fit" in jobs[0].failed
    assert job_summary(jobs)["jobs_failed"] == 1


def test_a_call_nobody_waits_for_does_not_end_the_run():
    net = network()
    with pytest.warns(UserWarning, match="can never fit"):
        net.call("small", 5000, 10)  # sent, never yielded
    net.call("pool", 5000, 10)
    net.call("small", 100, 10)
    result = run_quietly(net)
    assert result.total.summary["ignored"] == 2
    assert result.total.summary["completed"] == 1


def test_disaggregated_serving_with_a_cache_too_small_for_some_requests_reports_them(capsys):
    # its whole-request figures read each job's calls: an ignored first call has no request
    from llmqueue.cli.main import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["run", "disaggregated", "--set", "kv=500", "--horizon", "20", "--json"]) == 0
    rows = {row["label"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["disaggregated/prefill"]["ignored"] > 0
    total = rows["disaggregated/total"]
    assert total["requests_failed"] > 0
    assert total["requests_completed"] + total["requests_failed"] <= total["requests"]
