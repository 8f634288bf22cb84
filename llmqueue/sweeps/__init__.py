"""Parameter sweeps: grids, seeds, replications run on any executor (serial,
process pool, Dask), crash-safe result files and summaries with confidence
intervals.  Sweeps take experiment objects; they never import the
experiments."""

from llmqueue.sweeps.runner import (execute, plan, read_frame, read_rows, run_task, summarize,
                                    sweep, to_dataframe, write_rows)

__all__ = ["execute", "plan", "read_frame", "read_rows", "run_task", "summarize", "sweep",
           "to_dataframe", "write_rows"]
