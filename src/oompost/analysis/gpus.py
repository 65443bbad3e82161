"""Usable memory of common GPUs, as torch reports ``total_memory`` (GiB).

Used only when no OOM message states the capacity (a host OOM, a config
error) and the log names the GPU; the OOM message always wins.
"""

from __future__ import annotations

from ..units import GiB

# (substring of the device name, GiB torch reports)
_TABLE: tuple[tuple[str, float], ...] = (
    ("H200", 139.80), ("B200", 178.35), ("GB200", 184.0), ("H100 NVL", 93.1), ("H100", 79.10), ("H800", 79.10),
    ("H20", 95.0), ("A100-SXM4-80GB", 79.15), ("A100 80GB", 79.15), ("A100-PCIE-80GB", 79.15), ("A800", 79.15),
    ("A100-SXM4-40GB", 39.39), ("A100-PCIE-40GB", 39.39), ("A100", 39.39), ("L40S", 44.52), ("L40", 44.52),
    ("A6000", 47.53), ("A40", 44.35), ("A10G", 22.30), ("A10", 22.06), ("L4", 22.06), ("RTX 4090", 23.65),
    ("RTX 3090", 23.69), ("V100-SXM2-32GB", 31.74), ("V100", 15.77), ("T4", 14.75),
)


def capacity_from_name(name: str | None) -> int | None:
    if not name:
        return None
    for key, gib in _TABLE:
        if key in name:
            return int(gib * GiB)
    return None
