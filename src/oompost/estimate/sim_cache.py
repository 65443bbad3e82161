"""A disk cache of the allocation program's results, shared by a scan's workers and its later nights.

Why: a nightly scan meets the same few training set-ups over and over (a team
runs one model with one config for weeks), and replaying a set-up's
allocation program through the allocator model costs ≈0.1 s — in a scan of
log-only jobs that was an eighth of all the CPU, paid again by every worker
process and every night.  The in-process memo (``program._simulate``) cannot
be shared across processes; this cache can: one small JSON file per set-up,
written atomically, named by a digest of everything the result depends on —
the model spec, the set-up, the device bytes, the cap, the calibration, the
replay lengths, *and the source of the estimator and the allocator model*, so
a changed rule never reads an old result.

Off unless a directory is given (``use_dir``; ``oompost scan`` puts it under
its output directory).  The files are data only (JSON, never pickle), checked
field by field when read; anything unexpected is a miss, and the result is
computed as if there were no cache.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import orjson

from ..atomic import write_atomic

_DIR: str | None = None
_CODE: str | None = None
SCHEMA = 1


def use_dir(path: str | os.PathLike[str] | None) -> None:
    """Cache under ``path`` (created when needed); ``None`` turns the disk cache off."""
    global _DIR
    _DIR = os.fspath(path) if path is not None else None


@contextmanager
def using(path: str | os.PathLike[str] | None) -> Iterator[None]:
    """Cache under ``path`` for the duration (a scan's job), then back to what it was."""
    before = _DIR
    use_dir(path)
    try:
        yield
    finally:
        use_dir(before)


def enabled() -> bool:
    return _DIR is not None


def _code_fingerprint() -> str:
    """Digest of the sources whose change could change a result: the estimator and the allocator model."""
    global _CODE
    if _CODE is None:
        here = Path(__file__).resolve().parent
        files = sorted(here.glob("*.py")) + sorted((here.parent / "analysis").glob("allocator*.py"))
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        _CODE = h.hexdigest()[:16]
    return _CODE


def _plain(obj: Any) -> Any:
    """``orjson`` default: dataclasses by field (in order), sets sorted — the same key in every process
    (``repr`` of a frozenset of strings depends on the string hash seed)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return [type(obj).__name__, {f.name: getattr(obj, f.name) for f in fields(obj)}]
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise TypeError(f"not cacheable: {type(obj).__name__}")


def digest(key: tuple[Any, ...]) -> str | None:
    """The file name for ``key``; ``None`` when some part cannot be encoded (then there is no disk cache
    for it, e.g. an integer beyond 64 bits read from a hostile config)."""
    try:
        blob = orjson.dumps([SCHEMA, _code_fingerprint(), key], default=_plain,
                            option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS)
    except (TypeError, orjson.JSONEncodeError):
        return None
    return hashlib.sha256(blob).hexdigest()


def load(name: str) -> dict[str, Any] | None:
    if _DIR is None:
        return None
    try:
        with open(os.path.join(_DIR, name[:2], name + ".json"), "rb") as f:
            data = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def store(name: str, data: dict[str, Any]) -> None:
    """Atomic (temporary file + rename): a reader never sees half a file; a failure only loses the cache."""
    if _DIR is None:
        return
    d = os.path.join(_DIR, name[:2])
    try:
        os.makedirs(d, exist_ok=True)
        write_atomic(os.path.join(d, name + ".json"), orjson.dumps(data))
    except OSError:
        pass
