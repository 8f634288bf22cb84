"""The SimPy engine and its state: the processes of one inference server
(GPU resource, slot container, request processes, scheduler process), the
residents structure, the recorder of metric streams, the results schema,
:func:`simulate`, and a plain reference stepper for equivalence tests.
Imports common, models, policies and theory."""

from llmqueue.engine.errors import Diverged, InvariantError, RequestIgnored, Stalled
from llmqueue.engine.gate import KVOverflow
from llmqueue.engine.kv import KV
from llmqueue.engine.kv_recorder import KVBatch
from llmqueue.engine.processes import Engine
from llmqueue.engine.results import Batch, RequestMemory, RequestTimes, Result, Summary
from llmqueue.engine.simulate import simulate

__all__ = ["Batch", "Diverged", "Engine", "InvariantError", "KV", "KVBatch", "KVOverflow",
           "RequestIgnored", "RequestMemory", "RequestTimes", "Result", "Stalled", "Summary",
           "simulate"]
