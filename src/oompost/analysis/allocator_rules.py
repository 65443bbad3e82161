"""The CUDA caching allocator's sizing rules and its configuration.

Kept apart from the replay simulator because snapshot metrics need the same
rules (which pool a request uses, what "Tried to allocate" was) without
running a replay.  Everything here follows reference/allocator.md §1–2 and
pytorch.md §1.6/§5.1 to the byte: an off-by-one in ``round_size`` or in the
1 MiB / 10 MiB thresholds changes whether a counterfactual OOMs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

KMIN_BLOCK = 512                  # kMinBlockSize
KSMALL_SIZE = 1 << 20             # kSmallSize: largest "small" request (rounded)
KSMALL_BUFFER = 2 << 20           # kSmallBuffer: small segments / small expandable page
KLARGE_BUFFER = 20 << 20          # kLargeBuffer: 1–10 MiB segments / large expandable page
KMIN_LARGE_ALLOC = 10 << 20       # kMinLargeAlloc
KROUND_LARGE = 2 << 20            # kRoundLarge
MiB = 1 << 20

# Block states as snapshots write them.
ALLOCATED = "active_allocated"
PENDING = "active_pending_free"
INACTIVE = "inactive"
N_INTERVALS = 16                  # roundup_power2_divisions intervals: [1 MiB, 2 MiB) ... [32 GiB, inf)


def ceil_to(n: int, step: int) -> int:
    return -(-n // step) * step


def _divisions_for(size: int, divisions: tuple[int, ...]) -> int:
    """``AllocatorConfig::roundup_power2_divisions(size)``: interval of floor(log2 size) − 20, clamped."""
    log_size = size.bit_length() - 1
    index = log_size - 20 if log_size > 20 else 0
    if index > N_INTERVALS - 1:
        index = N_INTERVALS - 1
    return divisions[index] if index < len(divisions) else 0


def round_size(size: int, divisions: tuple[int, ...] = ()) -> int:
    """``DeviceCachingAllocator::round_size``: the size the allocator actually looks for."""
    if size < KMIN_BLOCK:
        return KMIN_BLOCK
    d = _divisions_for(size, divisions) if divisions else 0
    if d > 1 and size > KMIN_BLOCK * d:
        return _roundup_power2_next_division(size, d)
    return KMIN_BLOCK * ((size + KMIN_BLOCK - 1) // KMIN_BLOCK)


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def should_split(rounded: int, remaining: int, small: bool, expandable: bool = False,
                 max_split: float = float("inf")) -> bool:
    """``should_split``: whether the rest of a block chosen for ``rounded`` bytes
    becomes a free block of its own (else it stays in the allocation as slack)."""
    if small or expandable:
        return remaining >= KMIN_BLOCK
    return rounded < max_split and remaining > KSMALL_SIZE


def is_small(rounded: int) -> bool:
    """Pool choice (``get_pool``): the rounded size, ≤ 1 MiB is small."""
    return rounded <= KSMALL_SIZE


def allocation_size(rounded: int, large_segment: int = KLARGE_BUFFER) -> int:
    """``get_allocation_size``: the new segment for a rounded request ("Tried to allocate")."""
    if rounded <= KSMALL_SIZE:
        return KSMALL_BUFFER
    if rounded < KMIN_LARGE_ALLOC:
        return large_segment
    return ceil_to(rounded, KROUND_LARGE)


_ROUNDERS: dict[tuple[int, ...], Callable[[int], int]] = {}
_ROUND_CACHE_MAX = 1 << 20


def _rounder(divisions: tuple[int, ...]) -> Callable[[int], int]:
    """A ``round_size`` for these divisions that remembers the sizes it has seen."""
    f = _ROUNDERS.get(divisions)
    if f is None:
        div = divisions if any(divisions) else ()
        cache: dict[int, int] = {}

        def f(size: int) -> int:
            r = cache.get(size)
            if r is None:
                if len(cache) >= _ROUND_CACHE_MAX:
                    cache.clear()
                r = cache[size] = round_size(size, div)
            return r

        _ROUNDERS[divisions] = f
    return f


# ----------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class AllocatorSettings:
    """What ``PYTORCH_CUDA_ALLOC_CONF`` (or a snapshot's ``allocator_settings``) says.

    ``max_split_size`` is None when unlimited (the default, SIZE_MAX).  Options
    that do not change device-side decisions (``pinned_*``, locks) are listed
    in ``ignored`` so a report can say they were seen but play no part."""

    max_split_size: int | None = None
    max_non_split_rounding: int = KLARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    roundup_power2_divisions: tuple[int, ...] = (0,) * N_INTERVALS
    large_segment_size: int = KLARGE_BUFFER
    backend: str = "native"
    per_process_memory_fraction: float | None = None
    ignored: tuple[str, ...] = field(default=(), compare=False)

    # ------------------------------------------------------------ builders
    @classmethod
    def parse(cls, conf: str, base: AllocatorSettings | None = None) -> AllocatorSettings:
        """Parse ``opt:val,opt2:[a:b,>:c]`` on top of ``base`` (defaults if None).

        Raises ValueError for values torch itself rejects at CUDA init."""
        s = base if base is not None else cls()
        changes: dict[str, Any] = {}
        ignored = list(s.ignored)
        for key, value in _split_conf(conf):
            k = key.strip()
            v = value.strip()
            if k == "max_split_size_mb":
                mb = int(float(v))
                if mb < KLARGE_BUFFER // MiB:
                    raise ValueError(f"max_split_size_mb too small, must be >= {KLARGE_BUFFER // MiB}")
                changes["max_split_size"] = mb * MiB
            elif k == "max_non_split_rounding_mb":
                changes["max_non_split_rounding"] = int(float(v)) * MiB
            elif k == "garbage_collection_threshold":
                x = float(v)
                if not 0.0 < x < 1.0:
                    raise ValueError("garbage_collection_threshold must be in (0.0, 1.0)")
                changes["garbage_collection_threshold"] = x
            elif k == "expandable_segments":
                changes["expandable_segments"] = _bool(v)
            elif k == "roundup_power2_divisions":
                changes["roundup_power2_divisions"] = _parse_divisions(v)
            elif k == "large_segment_size_mb":
                changes["large_segment_size"] = int(float(v)) * MiB
            elif k == "backend":
                changes["backend"] = v
            elif k == "per_process_memory_fraction":
                changes["per_process_memory_fraction"] = float(v)
            elif k:
                ignored.append(k)
        changes["ignored"] = tuple(dict.fromkeys(ignored))
        return replace(s, **changes)

    @classmethod
    def from_snapshot(cls, settings: Mapping[str, Any] | None) -> AllocatorSettings:
        """From a snapshot's ``allocator_settings`` dict (pytorch.md §1.6).

        The conf string is parsed first (it alone carries
        ``max_non_split_rounding_mb`` / ``large_segment_size_mb``); the explicit
        fields the allocator reported then win."""
        if not settings:
            return cls()
        conf = settings.get("PYTORCH_CUDA_ALLOC_CONF") or settings.get("PYTORCH_ALLOC_CONF") or ""
        try:
            s = cls.parse(str(conf))
        except ValueError:
            s = cls()
        changes: dict[str, Any] = {}
        if "max_split_size" in settings:
            ms = int(settings["max_split_size"])
            changes["max_split_size"] = None if ms < 0 or ms >= (1 << 63) - 1 else ms
        if "garbage_collection_threshold" in settings:
            changes["garbage_collection_threshold"] = float(settings["garbage_collection_threshold"] or 0.0)
        if "expandable_segments" in settings:
            changes["expandable_segments"] = bool(settings["expandable_segments"])
        rd = settings.get("roundup_power2_divisions")
        if isinstance(rd, Mapping):
            div = [0] * N_INTERVALS
            for k, v in rd.items():
                try:
                    mb = int(k)
                except (TypeError, ValueError):
                    continue
                idx = min(max(mb.bit_length() - 1, 0), N_INTERVALS - 1)
                div[idx] = int(v)
            changes["roundup_power2_divisions"] = tuple(div)
        return replace(s, **changes)

    @classmethod
    def coerce(cls, value: AllocatorSettings | str | Mapping[str, Any] | None) -> AllocatorSettings:
        if value is None:
            return cls()
        if isinstance(value, AllocatorSettings):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        return cls.from_snapshot(value)

    def with_conf(self, conf: str) -> AllocatorSettings:
        """These settings with ``conf`` applied on top (for counterfactuals)."""
        return AllocatorSettings.parse(conf, base=self)

    # ------------------------------------------------------------ queries
    @property
    def max_split(self) -> float:
        """max_split_size as a number comparable with sizes (inf when unlimited)."""
        return float("inf") if self.max_split_size is None else self.max_split_size

    def round(self, size: int) -> int:
        return _rounder(self.roundup_power2_divisions)(size)

    def rounder(self) -> Callable[[int], int]:
        """``round`` as a memoising function (traces repeat their sizes): for hot loops."""
        return _rounder(self.roundup_power2_divisions)

    def alloc_size(self, rounded: int) -> int:
        return allocation_size(rounded, self.large_segment_size)

    def to_conf(self) -> str:
        """The ``PYTORCH_CUDA_ALLOC_CONF`` string for the non-default options."""
        d = AllocatorSettings()
        parts: list[str] = []
        if self.backend != d.backend:
            parts.append(f"backend:{self.backend}")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.garbage_collection_threshold:
            parts.append(f"garbage_collection_threshold:{self.garbage_collection_threshold:g}")
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size // MiB}")
        if self.max_non_split_rounding != d.max_non_split_rounding:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MiB}")
        if any(self.roundup_power2_divisions):
            divs = self.roundup_power2_divisions
            if len(set(divs)) == 1:
                parts.append(f"roundup_power2_divisions:{divs[0]}")
            else:
                items = ",".join(f"{1 << i}:{v}" for i, v in enumerate(divs))
                parts.append(f"roundup_power2_divisions:[{items}]")
        if self.large_segment_size != d.large_segment_size:
            parts.append(f"large_segment_size_mb:{self.large_segment_size // MiB}")
        if self.per_process_memory_fraction is not None:
            parts.append(f"per_process_memory_fraction:{self.per_process_memory_fraction:g}")
        return ",".join(parts)


def _bool(v: str) -> bool:
    lv = v.lower()
    if lv in ("true", "1", "yes", "on"):
        return True
    if lv in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"expected True or False, got {v!r}")


def _split_conf(conf: str) -> list[tuple[str, str]]:
    """Split ``a:1,b:[x:1,y:2],c:3`` at top-level commas, then at the first colon."""
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in conf:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    out: list[tuple[str, str]] = []
    for it in items:
        it = it.strip()
        if not it:
            continue
        k, _, v = it.partition(":")
        out.append((k, v))
    return out


def _parse_divisions(v: str) -> tuple[int, ...]:
    """``N`` or the list form, with the fill rules of ``parseRoundUpPower2Divisions``."""
    v = v.strip()
    div = [0] * N_INTERVALS
    if not v.startswith("["):
        n = int(v)
        _check_pow2(n, allow_zero=True)
        return (n,) * N_INTERVALS
    body = v.strip("[]")
    last_index = 0
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        key, _, val = item.partition(":")
        value = int(val)
        _check_pow2(value, allow_zero=True)
        key = key.strip()
        if key == ">":
            for i in range(last_index + 1, N_INTERVALS):
                div[i] = value
        else:
            boundary = int(key)
            _check_pow2(boundary, allow_zero=False)
            index = min(max(boundary.bit_length() - 1, 0), N_INTERVALS - 1)
            if last_index == 0:
                for i in range(0, index):
                    div[i] = value
            div[index] = value
            last_index = index
    return tuple(div)


def _check_pow2(n: int, allow_zero: bool) -> None:
    if n == 0 and allow_zero:
        return
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{n} is not a power of two")
