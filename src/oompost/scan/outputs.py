"""Files a scan writes: every one atomically (a temporary file in the same
directory, then ``os.replace``), under names that cannot leave the output
directory whatever the input names are."""

from __future__ import annotations

import hashlib
import os
import re

from ..atomic import write_atomic  # noqa: F401  (the scan's writes; re-exported)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(job: str) -> str:
    """A directory name for a job's reports: one path component of safe
    characters (no separators, no ``..``, no leading dot, bounded length);
    when anything had to change, a short hash of the original keeps two
    jobs apart."""
    clean = _UNSAFE.sub("_", job).strip("._-")[:80] or "job"
    if clean != job:
        clean = f"{clean}-{hashlib.blake2b(job.encode('utf-8', 'surrogateescape'), digest_size=4).hexdigest()}"
    return clean


def inside(output: str, name: str) -> str:
    """``output/name``, refusing anything that would resolve outside ``output``."""
    base = os.path.realpath(output)
    path = os.path.realpath(os.path.join(base, name))
    if os.path.dirname(path) != base:
        raise ValueError(f"refusing to write outside the output directory: {name!r}")
    return path


