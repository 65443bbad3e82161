"""A ceiling on the memory one untrusted load may claim.

A pickle is a program for a stack machine, and the restricted unpickler only
stops it from reaching code: a 100 KB pickle whose ``LONG_BINPUT`` names memo
slot 1,260,480,601 makes CPython's unpickler grow its memo table to that size
(19 GB resident, found by the sniff fuzzer), and a length field can ask for
any buffer.  ``address_space_budget`` lowers the process's address-space
limit (``RLIMIT_AS``) to what it maps now plus a budget for the duration of
the load, so such a request fails at once with ``MemoryError`` (reported as a
clear input error) instead of taking the machine down; the limit is restored
afterwards.  Where ``RLIMIT_AS`` or ``/proc`` is unavailable it does nothing.
The limit is per process: in a threaded Dask worker, another job's thread
that allocates more than the budget in the same moment fails too (its row
says so), which the budget's size makes rare."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

GiB = 1 << 30


def mapped_bytes() -> int | None:
    """This process's current virtual size (``VmSize``), or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def load_budget(file_bytes: int, compressed: bool) -> int:
    """Room for decoding a snapshot of ``file_bytes``: a full ``pickle.load``
    peaks at about 4x the uncompressed file; gzip shrinks snapshots 10-15x."""
    expanded = file_bytes * (20 if compressed else 1)
    return max(4 * GiB, 10 * expanded)


@contextlib.contextmanager
def address_space_budget(extra_bytes: int) -> Iterator[None]:
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    now = mapped_bytes()
    if now is None or os.environ.get("OOMPOST_NO_MEMGUARD"):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = now + int(extra_bytes)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft <= want:
        yield                                   # an existing, tighter limit stays in force
        return
    try:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
