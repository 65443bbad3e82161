"""Where jobs run: worker processes on this machine, or a Dask cluster.

Both take chunks of job tasks and yield each chunk's rows as it completes;
the parent process alone writes the history and the index, so the output is
the same whichever executor ran the jobs.  With Dask, the roots and the
output directory must be on a filesystem every worker sees (workers write
the per-job reports), and oompost must be installed on the workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from .worker import analyze_chunk

Chunk = list[tuple[Any, ...]]


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS
        return max(1, os.cpu_count() or 1)


def run_local(chunks: list[Chunk], jobs: int) -> Iterator[list[dict[str, Any]]]:
    if jobs <= 1 or len(chunks) <= 1:
        for c in chunks:
            yield analyze_chunk(c)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawned, not forked: safe in multi-threaded callers (and the same on every OS)
    with ProcessPoolExecutor(max_workers=min(jobs, len(chunks)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(analyze_chunk, c) for c in chunks]
        try:
            for f in as_completed(futures):
                yield f.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def run_dask(chunks: list[Chunk], scheduler: str | None, jobs: int) -> Iterator[list[dict[str, Any]]]:
    """On an existing cluster (``scheduler`` = its address), or, without one,
    a LocalCluster of ``jobs`` worker processes (what CI runs)."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as e:
        raise RuntimeError("--executor dask needs dask.distributed: pip install 'oompost[dask]'") from e
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = client.map(analyze_chunk, chunks, pure=False)
        for f in as_completed(futures):
            yield f.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
