"""Per-step memory series and the leak test on them.

A leak is allocated memory *at the same point of the step* rising step after
step (DESIGN.md: over ≥3 consecutive steps, after step 2, until the limit).
Peaks (max_allocated / max_reserved) ratchet up for benign reasons (a longer
batch) and are not used for the test; reserved memory is the allocator's
cache and is not either.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import MemoryReading
from ..units import MiB


@dataclass(frozen=True, slots=True)
class StepPoint:
    step: int
    allocated: int | None
    reserved: int | None
    max_allocated: int | None
    max_reserved: int | None
    reading: MemoryReading


@dataclass(frozen=True, slots=True)
class LeakTrend:
    first_step: int
    last_step: int
    rising_steps: int              # consecutive increases at the end of the series
    per_step_bytes: int            # median increase per step over the rising run
    start_bytes: int
    end_bytes: int
    points: tuple[StepPoint, ...]


def step_series(readings: tuple[MemoryReading, ...], rank: int | None) -> tuple[StepPoint, ...]:
    """The readings of one rank that carry a step number, one per step (the
    last printed), in step order.  Readings without a rank count for any."""
    by_step: dict[int, MemoryReading] = {}
    for r in readings:
        if r.step is None:
            continue
        if rank is not None and r.rank is not None and r.rank != rank:
            continue
        by_step[r.step] = r
    return tuple(StepPoint(s, r.allocated, r.reserved, r.max_allocated, r.max_reserved, r)
                 for s, r in sorted(by_step.items()))


def leak_trend(points: tuple[StepPoint, ...], min_rising: int = 3, min_step_bytes: int = 8 * MiB) -> LeakTrend | None:
    """The rising run at the end of the series of current allocated memory
    (steps ≥ 2), or None when there is no sustained rise."""
    pts = [p for p in points if p.step >= 2 and p.allocated is not None]
    if len(pts) < min_rising + 1:
        return None
    run = 0
    for a, b in zip(reversed(pts[:-1]), reversed(pts)):
        assert a.allocated is not None and b.allocated is not None
        if b.allocated - a.allocated >= min_step_bytes:
            run += 1
        else:
            break
    if run < min_rising:
        return None
    tail = pts[-(run + 1):]
    deltas = sorted((b.allocated or 0) - (a.allocated or 0) for a, b in zip(tail, tail[1:]))
    median = deltas[len(deltas) // 2]
    return LeakTrend(tail[0].step, tail[-1].step, run, median, tail[0].allocated or 0, tail[-1].allocated or 0,
                     tuple(tail))


def flat(points: tuple[StepPoint, ...], limit: int | None, min_points: int = 5) -> bool:
    """Allocated memory at the same point of at least ``min_points`` steps (after step 1) that does
    not grow: the last within 2 % of the limit (at least 64 MiB) of the lowest.  No leak of the
    kind DESIGN.md defines can hide in such a series."""
    vals = [p.allocated for p in points if p.step >= 2 and p.allocated is not None]
    if len(vals) < min_points:
        return False
    slack = max(64 * MiB, int(0.02 * limit) if limit else 0)
    return vals[-1] <= min(vals) + slack


def noun(points: tuple[StepPoint, ...]) -> str:
    """What a point of the series is: a ``step`` when the lines number their steps, a ``print``
    when they do not (the points are the loop's memory prints, numbered in order)."""
    return "print" if points and points[0].reading.label == "print" else "step"


def max_peak_allocated(points: tuple[StepPoint, ...]) -> int | None:
    """The largest allocated peak the run reached in completed steps."""
    peaks = [p.max_allocated for p in points if p.max_allocated is not None]
    peaks += [p.allocated for p in points if p.allocated is not None]
    return max(peaks) if peaks else None


LARGER_STEP = 1.3       # live memory at the OOM over every earlier step's peak: one larger batch


def larger_step(points: tuple[StepPoint, ...], allocated: int | None) -> float | None:
    """How many times the peak of every completed step the live memory at the OOM is, when that is more than
    ``LARGER_STEP`` (the failing step was one larger batch, not the configured one); None otherwise."""
    prior = max_peak_allocated(points)
    if not prior or allocated is None or allocated <= LARGER_STEP * prior:
        return None
    return allocated / prior
