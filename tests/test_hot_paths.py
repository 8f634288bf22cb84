"""The engine's hot code stays in the forms CPython 3.11 runs fast
(docs/guide/performance.md): no closure cells in a method run on every iteration, and
objects read on every iteration either slotted or under 30 attributes (the
interpreter specializes attribute reads only then).  Losing either costs a
few percent of every run without changing a figure, so only these catch it."""

import simpy

import llmqueue as q
from llmqueue.engine import context_runs, kv_recorder, kv_residents, kv_scheduler, recorder
from llmqueue.engine import processes, residents
from llmqueue.engine.processes import Engine
from llmqueue.policies import make_policy

#: Functions run once or more per batch choice.
HOT = [recorder.Recorder.commit, recorder.Recorder.start_run, recorder.Recorder.finish,
       recorder.Recorder._count, residents.Residents.apply, residents.Residents.repeats,
       processes.Engine.submit, processes.Engine.wake, processes.Engine.repeats,
       context_runs.context_run, kv_recorder.MemoryRecorder.book,
       kv_recorder.MemoryRecorder.commit, kv_recorder.MemoryRecorder.level,
       kv_residents.MemoryResidents.apply, kv_residents.MemoryResidents.release,
       kv_scheduler.choose_roomy, kv_scheduler.repeats, kv_scheduler.memory_scheduler]


def test_hot_functions_hold_no_closure_cells():
    # a generator or comprehension reading a local makes it a cell, built on every call
    assert {f.__qualname__: f.__code__.co_cellvars for f in HOT
            if f.__code__.co_cellvars} == {}


def test_a_recorder_is_slotted():
    assert not hasattr(recorder.Recorder(128), "__dict__")


def test_an_engine_keeps_under_30_attributes():
    for kv in (None, q.KV(capacity_tokens=1000, block_size=16),
               q.KV(capacity_tokens=1000, block_size=16, prefix=True),
               q.KV(capacity_tokens=1000, preemption="swap", swap_tokens=100)):
        engine = Engine(simpy.Environment(), make_policy("sarathi"), kv=kv)
        assert len(vars(engine)) < 30, sorted(vars(engine))
        assert len(vars(engine.residents)) < 30, sorted(vars(engine.residents))
