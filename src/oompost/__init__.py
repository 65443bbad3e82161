"""oompost: postmortem analyzer for GPU out-of-memory crashes in large-model training.

    import oompost
    report = oompost.analyze(["run.log", "snapshot.pickle"])
    print(report.cause, report.summary)

Heavy modules (pandas, jinja2, torch, deepspeed) are imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["analyze", "record", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .report import Report


def analyze(paths: Any, ds_config: Any = None) -> "Report":
    """Analyze crash artifacts (log files, snapshot pickles, directories) into a Report.

    ``paths``: one path or an iterable of paths (``str`` or ``os.PathLike``)."""
    from .pipeline import analyze as _analyze

    return _analyze(paths, ds_config=ds_config)


def __getattr__(name: str) -> Any:
    # ``oompost.record(dir=...)``: the submodule is callable (see record.py); imported on first use
    if name == "record":
        import importlib

        return importlib.import_module(".record", __name__)
    raise AttributeError(f"module 'oompost' has no attribute {name!r}")
