"""Every figure of llmqueue, in one place: pending over time and latency CDFs
(:mod:`.pending`), multi-engine runs (:mod:`.network`), Theorem 10's region
(:mod:`.region`), Theorem 2 (:mod:`.theorem2`), capacity plans
(:mod:`.capacity`), the Sarathi chunk sweep (:mod:`.chunks`), the KV-cache
experiments (:mod:`.memory`), prefix caching (:mod:`.prefix`; multi-turn
sessions, :mod:`.sessions`; a cache started empty and with a backlog,
:mod:`.collapse`), routing over prefix caches (:mod:`.routing`), greedy
admission under KV memory (:mod:`.storms`) and sweeps (:mod:`.sweep`), all in
the style of :mod:`.style`.

The rules, the same for every figure function:

* **Drawing.**  A one-panel function takes ``ax=None``: it draws into that
  matplotlib Axes when given, else into a new figure of its own.  A function
  of several panels takes ``axes=None`` instead (a sequence of as many Axes
  as it has panels, named in its docstring).
* **Return value.**  Every figure function returns the
  :class:`~matplotlib.figure.Figure` it drew on (``ax.figure`` when given an
  ``ax``), never the axes.  The exceptions, the animations
  :func:`animate_pending` and :func:`animate_storm`, return their animation.
* **Saving.**  No figure function writes a file.  The caller writes one with
  ``save(figure, path)`` (here, from :mod:`.style`), which creates the folder,
  writes the image (or a GIF for an animation), closes the figure and returns
  the path.
* **Backend.**  Nothing here picks a matplotlib backend: matplotlib uses Agg
  by itself where there is no display, and ``MPLBACKEND`` chooses one
  explicitly.

Importing this package imports matplotlib; nothing else in llmqueue does at
import time (the experiments and the command line import it inside the
functions that draw).
"""

from llmqueue.plotting.capacity import plot_capacity
from llmqueue.plotting.chunks import plot_chunk_sweep
from llmqueue.plotting.collapse import plot_collapse
from llmqueue.plotting.memory import (plot_coprime, plot_memory_boundary, plot_memory_waste,
                                      plot_table1)
from llmqueue.plotting.network import plot_against_load, plot_agents, plot_backlogs
from llmqueue.plotting.pending import (animate_pending, plot_latency_cdfs, plot_pending,
                                       plot_pending_zoom)
from llmqueue.plotting.plans import plot_plans
from llmqueue.plotting.prefix import (plot_prefix_capacity, plot_prefix_che,
                                      plot_prefix_mooncake)
from llmqueue.plotting.region import plot_region
from llmqueue.plotting.routing import plot_prefix_routing
from llmqueue.plotting.sessions import plot_sessions
from llmqueue.plotting.storms import animate_storm, plot_limit_cycle, plot_storm
from llmqueue.plotting.style import save
from llmqueue.plotting.sweep import plot_heat, plot_lines
from llmqueue.plotting.theorem2 import plot_theorem2
from llmqueue.plotting.validation import plot_validation

__all__ = ["animate_pending", "animate_storm", "plot_against_load", "plot_agents", "plot_backlogs",
           "plot_capacity", "plot_chunk_sweep", "plot_collapse", "plot_coprime", "plot_heat",
           "plot_latency_cdfs", "plot_limit_cycle", "plot_lines", "plot_memory_boundary",
           "plot_memory_waste", "plot_pending", "plot_pending_zoom", "plot_plans",
           "plot_prefix_capacity", "plot_prefix_che", "plot_prefix_mooncake", "plot_prefix_routing",
           "plot_region", "plot_sessions", "plot_storm", "plot_table1", "plot_theorem2",
           "plot_validation", "save"]
