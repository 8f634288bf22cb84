"""The reference experiments (docs/model.md §9), by name: each module declares
one :class:`~llmqueue.experiments.base.Experiment` and registers it.  The top
layer below the CLI and the plots; ``import llmqueue`` does not load it."""

from typing import Iterable, List, Tuple

from llmqueue.common import files
from llmqueue.common.params import Param
from llmqueue.experiments.base import REGISTRY, Check, Experiment, RunOptions, register

# Importing an experiment registers it; this order is the order of `llmqueue list`.
# isort: off
from llmqueue.experiments import point_c  # noqa: F401
from llmqueue.experiments import single  # noqa: F401
from llmqueue.experiments import trace  # noqa: F401
from llmqueue.experiments import offline  # noqa: F401
from llmqueue.experiments import azure  # noqa: F401
from llmqueue.experiments import blowup  # noqa: F401
from llmqueue.experiments import kmax_region  # noqa: F401
from llmqueue.experiments import sarathi_demo  # noqa: F401
from llmqueue.experiments import theorem2  # noqa: F401
from llmqueue.experiments import vertex_c  # noqa: F401
from llmqueue.experiments import agents  # noqa: F401
from llmqueue.experiments import disaggregated  # noqa: F401
from llmqueue.experiments import parallel  # noqa: F401
from llmqueue.experiments import rybko_stolyar  # noqa: F401
from llmqueue.experiments import goodput  # noqa: F401
from llmqueue.experiments import engines  # noqa: F401
from llmqueue.experiments import nie_table1  # noqa: F401
from llmqueue.experiments import memory_boundary  # noqa: F401
from llmqueue.experiments import storms  # noqa: F401
from llmqueue.experiments import limit_cycle  # noqa: F401
from llmqueue.experiments import coprime  # noqa: F401
from llmqueue.experiments import memory_waste  # noqa: F401
from llmqueue.experiments import theorem2_roofline  # noqa: F401
from llmqueue.experiments import prefix_mooncake  # noqa: F401
from llmqueue.experiments import prefix_capacity  # noqa: F401
from llmqueue.experiments import prefix_che  # noqa: F401
from llmqueue.experiments import prefix_routing  # noqa: F401
from llmqueue.experiments import prefix_sessions  # noqa: F401
from llmqueue.experiments import prefix_collapse  # noqa: F401
# isort: on

#: Parameters whose value names a file an experiment writes (a figure): outputs.
#: Every other parameter value that names a file is an input.
WRITTEN = ("cdf", "figure")


def files_named(values: Iterable[Tuple[str, object]]
                ) -> Tuple[List[files.Named], List[files.Named]]:
    """``(written, read)``: the files that parameter values ``(name, value)``
    name, split into those the experiment writes (:data:`WRITTEN`, whether they
    exist or not, as :func:`files.figure_path` names them: ``PATH.png`` for a
    name without an ending) and the existing files it may read
    (:func:`files.named_files`)."""
    values = list(values)
    written = [(k, files.figure_path(str(v), k)) for k, v in values if k in WRITTEN and v]
    return written, files.named_files((k, v) for k, v in values if k not in WRITTEN)


def get(name: str) -> Experiment:
    """The experiment registered as ``name``, or a ``ValueError`` listing the names."""
    found = REGISTRY.get(name)
    if found is None:
        raise ValueError(f"scenario must be one of {', '.join(REGISTRY)}; got {name!r}")
    return found


__all__ = ["REGISTRY", "WRITTEN", "Check", "Experiment", "Param", "RunOptions", "files_named",
           "get", "register"]
