"""Independent checks of a run against the model's rules, from its logs alone."""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, Optional


def check_run(result, bmax: Optional[int], kmax: Optional[int],
              work_conserving: bool = False) -> Dict[str, int]:
    """Assert rules 6a-6d, kmax, token conservation and full accounting.

    Returns the number of batches found not work-conserving (SPEC 3), computed
    from the logs, so callers can assert on it.
    """
    s = result.summary
    reqs = {r.rid: r for r in result.request_log}
    assert len(reqs) == s["arrivals"] == s["completed"] + s["residents_final"] + s["waiting_final"]
    assert s["pending_final"] == s["residents_final"] + s["waiting_final"]
    prefill_seen: Dict[int, int] = defaultdict(int)
    decode_seen: Dict[int, int] = defaultdict(int)
    first_decode: Dict[int, int] = {}
    last_decode: Dict[int, int] = {}
    violations = 0
    processed = 0
    for start, t, p, d, n, decoders, chunks in result.batch_log:
        end = start + t
        ids = list(decoders) + [rid for rid, _ in chunks]
        assert len(ids) == len(set(ids)) == n, "a request twice in one batch (6a/6c)"
        assert d == len(decoders) and p == sum(c for _, c in chunks)
        assert p + d <= (bmax or 10**18), "token budget (6d)"
        resident = [r for r in reqs.values() if r.admitted is not None and r.admitted <= start
                    and (r.finished is None or r.finished > start)]
        assert len(resident) <= (kmax or 10**18), "kmax"
        demand = 0
        for r in resident:
            left = r.vp - prefill_seen[r.rid]
            demand += left if left > 0 else (1 if decode_seen[r.rid] < r.vd else 0)
        if p + d < min(bmax or 10**18, demand):
            violations += 1
        for rid in decoders:
            r = reqs[rid]
            assert prefill_seen[rid] == r.vp, "decode before prefill is done (6a)"
            assert r.prefill_done <= start, "decode in the batch that ends the prefill (6a)"
            decode_seen[rid] += 1
            first_decode.setdefault(rid, end)
            last_decode[rid] = end
        for rid, c in chunks:
            assert 1 <= c <= reqs[rid].vp - prefill_seen[rid], "chunk beyond the prompt (6b)"
            prefill_seen[rid] += c
            if prefill_seen[rid] == reqs[rid].vp:
                assert reqs[rid].prefill_done == end
        processed += p + d
    for rid, r in reqs.items():
        assert decode_seen[rid] <= r.vd
        if r.finished is not None:
            assert prefill_seen[rid] == r.vp and decode_seen[rid] == r.vd, "tokens conserved"
            assert r.finished == last_decode[rid]
        if rid in first_decode:
            assert r.first_token == first_decode[rid]
        assert r.admitted is None or r.admitted >= r.arrival
    total = sum(r.vp + r.vd for r in reqs.values())
    assert s["backlog_final"] == total - processed, "backlog = tokens in - tokens out"
    if work_conserving:
        assert violations == 0
    assert s["non_work_conserving_batches"] == violations
    return {"violations": violations, "processed": processed}
