"""report.json: DESIGN.md's ``oompost.report/1`` contract, as ``Report.to_json()`` builds it."""

from __future__ import annotations

from enum import Enum
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # pragma: no cover
    from ..report import Report


def _default(obj: Any) -> Any:
    # orjson handles dataclasses, enums and tuples itself; these are what slip through.
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, (PurePath, bytes)):
        return str(obj) if isinstance(obj, PurePath) else obj.decode("utf-8", "replace")
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def render_json(report: "Report") -> str:
    """Indented JSON (2 spaces), keys in contract order, newline-terminated."""
    data = report.to_json()
    return orjson.dumps(data, default=_default,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"


def report_data(report: "Report") -> Any:
    """The JSON document as Python values (what the HTML's data island holds)."""
    return orjson.loads(render_json(report))
