"""Content fingerprints: a job whose inputs did not change is not analysed again.

A file's digest is BLAKE2b over its bytes; the (size, mtime_ns, inode) it was
computed at is remembered, so an unchanged file is not read again, and a
file that was only touched (same bytes) keeps its digest.  A job's
fingerprint is the digest of its sorted (relative path, file digest) pairs
plus the oompost version and the report options, so an upgrade or another
``--format`` re-analyses.
"""

from __future__ import annotations

import hashlib
import os
from typing import Callable

from .. import __version__

CHUNK = 1 << 20
StatKey = tuple[int, int, int]


def stat_key(path: str) -> StatKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def file_digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def job_fingerprint(root: str, files: tuple[str, ...], options: str,
                    cached: Callable[[str, StatKey], str | None],
                    remember: Callable[[str, StatKey, str], None]) -> str:
    """Fingerprint of a job's inputs.  ``cached(path, key)`` returns a digest
    known for that stat key; ``remember`` stores a new one.  Unreadable files
    count by their error, so a job that becomes readable is re-analysed."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"oompost {__version__}\0{options}\0".encode())
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        key = stat_key(path)
        if key is None:
            digest = "missing"
        else:
            digest = cached(path, key) or ""
            if not digest:
                try:
                    digest = file_digest(path)
                    remember(path, key, digest)
                except OSError as e:
                    digest = f"error:{e.errno}"
        h.update(f"{rel}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()
