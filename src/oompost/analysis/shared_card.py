"""What of the card the failing process could never use: memory other processes (or other libraries in
this process) hold, read off the OOM message's figures.

Two readings, one definition each:

- ``other_processes_bytes``: what the message *names* ("Process N has X memory in use" beside "this
  process has Y"); the process's limit is the capacity less that.
- ``held_elsewhere``: capacity − free − what this process holds, when that is most of the card (old
  messages name no process; TensorFlow or JAX preallocating inside the same process are never named), or when
  one other process the message names holds more than a third of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import OomEvent

GiB = 1 << 30
SHARE = 0.5          # of the card held outside this process's PyTorch allocator
NAMED_SHARE = 0.35   # ... or by one other process the message names (a foreign workload by any reading: on the
                     # dev fold every such message was a shared GPU, 5 of 5; between 0.2 and 0.35 causes mix)
MIN_BYTES = 2 * GiB  # more than a CUDA context and a desktop's display ever take


@dataclass(frozen=True, slots=True)
class HeldElsewhere:
    elsewhere: int                             # bytes held outside this process's PyTorch allocator
    capacity: int
    own: int                                   # what this process holds (its "memory in use", else reserved)
    named: tuple[tuple[int, int], ...]         # (pid, bytes) of the other processes the message names


def other_processes_bytes(oom: OomEvent) -> int:
    """What the other processes the message names hold; 0 when it does not tell them from this one."""
    if oom.process_in_use_bytes is None or not oom.other_processes or oom.capacity_bytes is None:
        return 0
    others = sum(b for _, b in oom.other_processes)
    return others if others < oom.capacity_bytes else 0


def held_elsewhere(oom: OomEvent | None) -> HeldElsewhere | None:
    """The card mostly held outside this process's PyTorch allocator; None otherwise, when the figures are
    missing, or under a memory fraction (its "free" is the whole card's)."""
    o = oom
    if o is None or not o.capacity_bytes or o.free_bytes is None or o.allowed_bytes is not None:
        return None
    own = o.process_in_use_bytes or o.reserved_bytes
    if own is None:
        return None
    if len(o.other_processes) == 1 and o.process_in_use_bytes is None:
        own = max(own, o.other_processes[0][1])        # the one process listed may be this one
    elsewhere = o.capacity_bytes - o.free_bytes - own
    named = tuple((pid, n) for pid, n in o.other_processes if n >= MIN_BYTES) \
        if o.process_in_use_bytes is not None else ()
    big_named = any(n >= NAMED_SHARE * o.capacity_bytes for _, n in named)
    if elsewhere < MIN_BYTES or (elsewhere < SHARE * o.capacity_bytes and not big_named):
        return None
    return HeldElsewhere(elsewhere, o.capacity_bytes, own, named)
