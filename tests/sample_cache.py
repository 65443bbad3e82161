"""The bundled captures analysed once per test session (the analysis is pure, so
tests that only read a report can share it)."""

from __future__ import annotations

import functools
from pathlib import Path

SAMPLES = Path(__file__).parent.parent / "sample_logs"


@functools.lru_cache(maxsize=None)
def analyzed(case: str):  # type: ignore[no-untyped-def]
    """The Report of ``sample_logs/<case>`` (or of a directory path given whole)."""
    import oompost

    p = Path(case)
    return oompost.analyze([str(p if p.is_absolute() else SAMPLES / case)])
