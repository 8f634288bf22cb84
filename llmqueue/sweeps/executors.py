"""Where a sweep's runs go: this process, a local process pool, or a Dask cluster.

All three come out as a ``concurrent.futures.Executor`` (or ``None`` for this
process), so :func:`llmqueue.sweep.sweep` has one code path for them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Optional

from llmqueue.common import validation

if TYPE_CHECKING:
    from distributed import Client  # optional: only dask= needs it


def die_with_parent() -> None:
    """In a pool worker: ask the kernel to end this process when its parent
    dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGTERM)``), so a sweep killed with
    ``kill -9`` leaves no orphaned workers.  Elsewhere it does nothing: the
    pool's own shutdown ends the workers of a parent that exits normally."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@contextmanager
def open_executor(workers: Optional[int] = None, dask: Optional[str] = None
                  ) -> Iterator[Optional[Executor]]:
    """An executor for ``workers`` processes (``None``: one per CPU; 1: no pool,
    runs in this process), or for the Dask scheduler at ``dask`` (``"local"``
    starts a local cluster of ``workers`` processes).  Closed on exit."""
    if workers is not None:
        validation.positive_int("workers", workers)
    if dask is None:
        if workers == 1:
            yield None
            return
        pool = ProcessPoolExecutor(workers or os.cpu_count() or 1, initializer=die_with_parent)
        try:
            yield pool
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    with _dask_client(workers, dask) as client:
        yield client.get_executor()


@contextmanager
def _dask_client(workers: Optional[int], address: str) -> Iterator["Client"]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ValueError("dask needs the optional extra: pip install -e '.[dask]'") from None
    if address == "local":
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    else:
        if workers is not None:
            raise ValueError("workers sizes a local cluster only (dask=local); a remote "
                             f"cluster has its own workers; got workers={workers}")
        cluster = None
        try:
            client = Client(address, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ValueError(f"dask: cannot reach a scheduler at {address!r}: {exc}") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
