"""Byte sizes: parse the units torch, DeepSpeed and NCCL print, and format them back."""

from __future__ import annotations

import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_UNITS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": KiB, "kb": KiB, "k": KiB,
    "mib": MiB, "mb": MiB, "m": MiB,
    "gib": GiB, "gb": GiB, "g": GiB,
    "tib": TiB, "tb": TiB, "t": TiB,
    "pib": 1024**5, "pb": 1024**5,
    "eib": 1024**6, "eb": 1024**6,
}

SIZE_RE = re.compile(r"(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGTPE]i?B|bytes?|B)\b", re.IGNORECASE)
_FULL_RE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")

# NVML sometimes reports 2**64 bytes ("17179869184.00 GiB") for a process; treat as unknown.
GARBAGE_LIMIT = 2**60


def parse_size(text: str) -> int:
    """'20.00 MiB' -> 20971520.  Torch and DeepSpeed both print binary units
    ("GB" in DeepSpeed's see_memory_usage is GiB), so every unit is binary.
    A bare number is bytes.  Raises ValueError on anything else."""
    m = _FULL_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    unit = m.group("unit").lower() or "b"
    if unit not in _UNITS:
        raise ValueError(f"unknown unit in {text!r}")
    return int(round(float(m.group("num")) * _UNITS[unit]))


def parse_size_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = parse_size(text)
    except ValueError:
        return None
    return None if value >= GARBAGE_LIMIT else value


def fmt_bytes(n: int | float | None, precision: int = 2) -> str:
    """Format like torch's format_size: '0 bytes', '256.00 KiB', '139.80 GiB'."""
    if n is None:
        return "n/a"
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < KiB:
        return f"{sign}{int(n)} bytes"
    for unit, size in (("KiB", KiB), ("MiB", MiB), ("GiB", GiB)):
        if n < size * 1024 or unit == "GiB":
            return f"{sign}{n / size:.{precision}f} {unit}"
    raise AssertionError("unreachable")


def printed_rounding(n: int | float, precision: int = 2) -> float:
    """Half of the last digit ``fmt_bytes`` (torch's format) prints for ``n``, in bytes: 0.005 GiB for "1.91 GiB".
    Two figures of a message closer than their roundings are equal as far as the message can say."""
    if n < KiB:
        return 0.5
    for size in (KiB, MiB, GiB):
        if n < size * 1024 or size == GiB:
            return 0.5 * 10**-precision * size
    raise AssertionError("unreachable")


def gib(n: int | float | None) -> str:
    return "n/a" if n is None else f"{n / GiB:.2f} GiB"


def parse_human_size_arg(text: str) -> int:
    """CLI sizes such as '24GiB', '24GB', '80G', '40 GiB' (always binary)."""
    return parse_size(text.replace("_", ""))
