"""Multi-turn conversations reuse their own transcripts: with a prefix cache a
chat's next turn computes little more than its new message.

A thousand sessions arrive, one every two seconds on average.  Each is a
conversation of about five turns: a message of about 64 tokens, an answer of
about 128, ten seconds of thinking, the next message.  Each turn's prompt is
the whole conversation so far, so turn k + 1 repeats every token of turn k's
prompt and answer.  The engine (sarathi at bmax = 512 on the CodeLlama-34B
staircase, no kmax, KV blocks of 16 tokens) runs the same sessions with the
prefix cache on and off:

* with a KV cache of 10^6 tokens nothing is ever evicted: about 92% of the
  prompt tokens are found cached, a request computes about 8% of the prefill
  it would without the cache, and TTFT p90 falls about tenfold;
* with 20,000 tokens the residents fill the cache: a conversation's blocks
  are evicted while it thinks, the hit ratio falls to about 8%, and some two
  thousand preemptions per run restart requests that find part of their own
  earlier work still cached (the restarts' hits).

Three seeds; about half a minute.

Run:  python scenarios/prefix_sessions.py   (table, checks, plots/prefix_sessions.png)
"""

from __future__ import annotations

import os

from llmqueue.cli.report import report
from llmqueue.cli.script import script
from llmqueue.engine.options import RunOptions
from llmqueue.experiments import prefix_sessions as sessions
from llmqueue.plotting import plot_sessions, save

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots",
                    "prefix_sessions.png")
SEEDS = 3           # runs per row, from seed 0
SESSIONS = 1_000    # sessions per run, 0.5 per second
LARGE, SMALL = 1_000_000, 20_000   # the two KV caches (tokens)


def main() -> None:
    """Run both caches with and without prefix caching, print the table and checks, draw."""
    params = sessions.EXPERIMENT.resolve({"seeds": str(SEEDS), "sessions": str(SESSIONS),
                                          "large": str(LARGE), "small": str(SMALL)})
    print(f"Multi-turn sessions: {SESSIONS:,} sessions at {sessions.RATE:g}/s, "
          f"{SEEDS} seeds, KV caches of {LARGE:,} and {SMALL:,} tokens\n")
    rows = sessions.run(params, RunOptions(seed=0))
    print(report(sessions.EXPERIMENT, rows, params))
    save(plot_sessions(rows, f"Multi-turn sessions ({SESSIONS:,} at {sessions.RATE:g}/s, "
                             "about 5 turns each): prefix caching with a large and a small "
                             "KV cache"), PLOT)
    print(f"\nplot: {os.path.normpath(PLOT)}")


if __name__ == "__main__":
    script(main)
