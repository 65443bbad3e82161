"""Per-rank view of a multi-GPU failure and the first failing rank (reference/nccl.md §5.2).

Pure functions of an ``Evidence``.  Every OOM, Failure and RankExit that can be tied to a rank is
sorted into a class:

* **local** -- the rank's own failure: a CUDA OOM (``evidence.ooms``), NCCL unable to allocate, a
  Python exception, SIGKILL, duplicate GPU, /dev/shm, host OOM kill...;
* **neutral** -- an exit that says little by itself (SIGABRT -6 is the normal watchdog teardown);
* **victim** -- a consequence of another rank's death: ``ncclRemoteError``, "Connection closed by
  remote peer", IB completion errors, watchdog timeouts / hangs, SIGTERM (-15) from the launcher.

A rank's class is the best class among its strong evidence (failure lines, OOMs, signal exits);
exit codes such as 1 or -6 only decide for ranks that have nothing else.  The first failing rank is
picked among the ranks of the best class, ordered by the earliest timestamp of their deciding
evidence (all of them compared at the coarsest resolution present), then by torchrun's
``Root Cause`` flag (a tie-break only: 1-second resolution, agent wall time), then by file position.
For pure hangs (every candidate a victim) ranks that enqueued fewer collectives -- the laggards --
come first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..model import Evidence, Failure, FailureKind, RankExit, SourceRef
from ..units import fmt_bytes

K = FailureKind

LOCAL, NEUTRAL, VICTIM = 3, 2, 1

VICTIM_KINDS = frozenset({K.NCCL_REMOTE, K.NCCL_TIMEOUT, K.NCCL_HEARTBEAT})
_PEER_WORDS = ("remote peer", "connection closed", "connection reset", "got completion from peer",
               "remote process exited")
_VICTIM_TEXT = ("ncclRemoteError", "remote process exited", "Connection closed by remote peer",
                "Watchdog caught collective operation timeout", "Socket recv failed", "Got completion from peer",
                "NCCL communicator was aborted", "Signal 15 (SIGTERM)")
_SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
                 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
_LAUNCHER_PREF = {"torchrun": 0, "mp.spawn": 1, "deepspeed": 2, "slurm": 3, "shell": 4}

# timestamps: NCCL "[YYYY-MM-DD HH:MM:SS(.f)]", DeepSpeed "[YYYY-MM-DD HH:MM:SS,ms]", ChildFailedError
# "YYYY-MM-DD_HH:MM:SS", c10 "[E1202 15:09:46.188373665 file:line]", torchrun glog "E1202 15:13:00.030000 pid"
TS_FULL_RE = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d+))?")
TS_GLOG_RE = re.compile(
    r"(?:^|[\s\[:])[IWEF](?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d+))?(?!\d)")
TS_MMDD_RE = re.compile(r"^(?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d+))?$")
DEFAULT_YEAR = 2000          # a leap year, so "0229" parses when no line states the year
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: int
    failed: bool
    first: bool
    cause_hint: str
    exitcode: int | None
    first_failure_line: SourceRef | None
    peak_bytes: int | None
    victim: bool = False                  # its failure is a consequence of another rank's

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "failed": self.failed, "first": self.first, "peak_bytes": self.peak_bytes,
                "victim": self.victim, "cause_hint": self.cause_hint, "exitcode": self.exitcode,
                "first_failure_line": self.first_failure_line.to_json() if self.first_failure_line else None}


# ------------------------------------------------------------ classes


def is_victim(failure: Failure) -> bool:
    """True when the failure is a symptom of another rank's failure (nccl.md §5.2 step 3)."""
    if failure.kind in VICTIM_KINDS:
        return True
    if failure.kind is K.NCCL_SYSTEM:
        # only what NCCL actually saw: the interpretation line of ncclSystemError (NCCL < 2.13) merely
        # says a remote exit *can* cause it
        text = (failure.last_error or "").lower()
        return failure.peer is not None or any(w in text for w in _PEER_WORDS)
    return False


def exit_is_victim(e: RankExit) -> bool:
    return _exit_class(e)[0] == VICTIM


def _exit_class(e: RankExit) -> tuple[int | None, bool]:
    """(class, strong) of a launcher-reported exit."""
    c = e.exitcode
    if e.killed_by_launcher or c in (-15, 143):
        return VICTIM, True
    if c in (-9, 137):
        return LOCAL, True
    if c == 0:
        return None, False
    text = f"{e.message}\n{e.traceback}"
    if any(v in text for v in _VICTIM_TEXT):
        return VICTIM, False
    if c > 0 or c in (-4, -7, -8, -11):
        return LOCAL, False
    return NEUTRAL, False


# ------------------------------------------------------------ timestamps


def line_time(text: str, year: int | None = None) -> tuple[datetime, float] | None:
    """The first timestamp in a log line (any format above) and its resolution in seconds."""
    best: tuple[int, datetime, float] | None = None
    for rx in (TS_FULL_RE, TS_GLOG_RE, TS_MMDD_RE):
        m = rx.search(text)
        if not m:
            continue
        g = m.groupdict()
        y = int(g["y"]) if g.get("y") else (year or DEFAULT_YEAR)
        frac = g.get("f") or ""
        try:
            dt = datetime(y, int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"]), int(g["s"]),
                          int((frac + "000000")[:6]) if frac else 0)
        except ValueError:
            continue
        res = 10.0 ** -min(len(frac), 6) if frac else 1.0
        if best is None or m.start() < best[0]:
            best = (m.start(), dt, res)
    return None if best is None else (best[1], best[2])


def _year_of(ev: Evidence) -> int | None:
    texts: list[str] = [f.ref.text for f in ev.failures] + [e.time or "" for e in ev.exits] \
        + [e.ref.text for e in ev.exits]
    for t in texts:
        m = TS_FULL_RE.search(t)
        if m:
            return int(m.group("y"))
    return None


# ------------------------------------------------------------ evidence items


@dataclass(slots=True)
class _Item:
    rank: int
    cls: int
    strong: bool
    ref: SourceRef
    when: str | None
    hint: str
    pos: tuple[int, int, int]
    exitcode: int | None = None
    launcher: str = ""
    root: bool = False
    seq_num: int | None = None
    is_timeout: bool = False
    specificity: int = 0                  # for the cause hint: 0 a stated cause, 1 a bare SIGKILL, 2 an exit code


def _failure_hint(f: Failure) -> str:
    base = {
        K.NCCL_CUDA_OOM: "NCCL could not allocate GPU memory",
        K.NCCL_HOST_ALLOC: "NCCL could not allocate host memory",
        K.NCCL_REMOTE: "NCCL peer exited / network error (a consequence)",
        K.NCCL_SYSTEM: "NCCL system error",
        K.NCCL_INTERNAL: "NCCL internal error",
        K.NCCL_INVALID_USAGE: "NCCL invalid usage",
        K.NCCL_TIMEOUT: "NCCL watchdog timeout (a consequence)",
        K.NCCL_HEARTBEAT: "NCCL watchdog hang",
        K.NCCL_OTHER: "NCCL error",
        K.DUPLICATE_GPU: "two ranks on one GPU",
        K.SHM: "/dev/shm (shared memory) exhausted",
        K.HOST_OOM_KILL: "killed by the host OOM killer",
        K.SIGKILL: "SIGKILL (-9), cause not stated",
        K.KILLED: "Killed (SIGKILL)",
        K.CONFIG_VALIDATION: "configuration error",
        K.PYTHON_EXCEPTION: "Python exception",
        K.PINNED_HOST: "pinned host memory allocation failed",
    }.get(f.kind, f.kind.value.replace("_", " "))
    extra = []
    if f.bytes is not None:
        extra.append(fmt_bytes(f.bytes))
    if f.site:
        extra.append(f.site)
    if f.op_type or f.seq_num is not None:
        extra.append(" ".join(x for x in (f.op_type or "", f"SeqNum {f.seq_num}" if f.seq_num is not None else "")
                              if x))
    if f.exception and f.kind in (K.PYTHON_EXCEPTION, K.CONFIG_VALIDATION):
        extra.append(f.exception)
    return base + (f" ({', '.join(extra)})" if extra else "")


def _exit_hint(e: RankExit) -> str:
    c = e.exitcode
    sig = _SIGNAL_NAMES.get(-c) if c < 0 else (_SIGNAL_NAMES.get(c - 128) if c > 128 else None)
    who = e.launcher or "launcher"
    if e.killed_by_launcher or c in (-15, 143):
        return f"{sig or 'terminated'} from {who} (a consequence)"
    s = f"exit {c}" + (f" ({sig})" if sig else "")
    if c > 0 and e.message:
        s += f": {e.message[:160]}"
    return s


def _items(ev: Evidence) -> list[_Item]:
    src_index = {inp.path: i for i, inp in enumerate(ev.inputs)}
    n_inputs = len(ev.inputs)

    def pos(r: SourceRef, k: int) -> tuple[int, int, int]:
        return (src_index.get(r.source, n_inputs), r.line if r.line is not None else 1 << 40, k)

    single_node = _single_node(ev)

    def exit_rank(e: RankExit) -> int | None:
        if e.rank is not None:
            return e.rank
        return e.local_rank if single_node else None

    pid_rank: dict[tuple[str | None, int], int] = {}
    for e in ev.exits:
        r = exit_rank(e)
        if e.pid is not None and r is not None:
            pid_rank.setdefault((e.host, e.pid), r)
            pid_rank.setdefault((None, e.pid), r)
    if single_node:
        for fact in ev.facts_named("launcher.pid_local_rank"):     # DeepSpeed children, maybe another file
            if isinstance(fact.value, dict):
                for pid, lr in fact.value.items():
                    if str(pid).isdigit() and isinstance(lr, int):
                        pid_rank.setdefault((None, int(pid)), lr)
    rank_map = ev.fact_value("nccl.rank_map") or {}
    if isinstance(rank_map, dict):
        for key, r in rank_map.items():
            host, _, pid = str(key).rpartition(":")
            if pid.isdigit() and isinstance(r, int):
                pid_rank.setdefault((host, int(pid)), r)

    out: list[_Item] = []
    k = 0
    for o in ev.ooms:
        k += 1
        if o.rank is None:
            continue
        hint = "CUDA out of memory" if o.kind.value != "host" else "host allocation failed (DefaultCPUAllocator)"
        if o.requested_bytes is not None:
            hint += f" (tried to allocate {fmt_bytes(o.requested_bytes)})"
        out.append(_Item(o.rank, LOCAL, True, o.ref, None, hint, pos(o.ref, k)))
    for f in ev.failures:
        k += 1
        rank = f.rank
        if rank is None and f.pid is not None:
            rank = pid_rank.get((f.host, f.pid), pid_rank.get((None, f.pid)))
        if rank is None:
            continue
        out.append(_Item(rank, VICTIM if is_victim(f) else LOCAL, True, f.ref, None, _failure_hint(f),
                         pos(f.ref, k), seq_num=f.seq_num, is_timeout=f.kind is K.NCCL_TIMEOUT,
                         specificity=1 if f.kind is K.SIGKILL else 0))
    for e in ev.exits:
        k += 1
        rank = exit_rank(e)
        cls, strong = _exit_class(e)
        if rank is None or cls is None:
            continue
        out.append(_Item(rank, cls, strong, e.ref, e.time, _exit_hint(e), pos(e.ref, k), exitcode=e.exitcode,
                         launcher=e.launcher, root=e.reported_root_cause, specificity=2))
    return out


def _single_node(ev: Evidence) -> bool:
    nn = ev.fact_value("nnodes")
    if isinstance(nn, int):
        return nn == 1
    hosts = {e.host for e in ev.exits if e.host}
    return len(hosts) <= 1


# ------------------------------------------------------------ per-rank decision


@dataclass(slots=True)
class _RankState:
    rank: int
    items: list[_Item]
    cls: int | None
    deciding: list[_Item]


def _states(ev: Evidence) -> dict[int, _RankState]:
    by_rank: dict[int, list[_Item]] = {}
    for it in _items(ev):
        by_rank.setdefault(it.rank, []).append(it)
    states: dict[int, _RankState] = {}
    for rank, items in by_rank.items():
        strong = [i for i in items if i.strong]
        pool = strong or items
        cls = max(i.cls for i in pool)
        states[rank] = _RankState(rank, items, cls, [i for i in pool if i.cls == cls])
    return states


def _item_time(it: _Item, year: int | None) -> tuple[datetime, float] | None:
    if it.when:
        t = line_time(it.when, year)
        if t is not None:
            return t
    return line_time(it.ref.text, year)


def _rank_time(st: _RankState, year: int | None) -> tuple[datetime, float] | None:
    times = [t for t in (_item_time(i, year) for i in st.deciding) if t is not None]
    return min(times, key=lambda t: t[0]) if times else None


def _first_item(st: _RankState, year: int | None, by_specificity: bool = False) -> _Item:
    """The earliest deciding item (or, for the cause hint, the most specific one first)."""
    def key(i: _Item) -> tuple[int, int, float, tuple[int, int, int]]:
        t = _item_time(i, year)
        spec = i.specificity if by_specificity else 0
        return (spec, 0, (t[0] - _EPOCH).total_seconds(), i.pos) if t else (spec, 1, 0.0, i.pos)
    return min(st.deciding, key=key)


def _laggards(ev: Evidence, cands: list[_RankState]) -> list[_RankState]:
    """Among victims of a hang, the ranks that enqueued the fewest collectives (nccl.md §5.2 step 4)."""
    metric: dict[int, int] = {}
    for f in ev.facts_named("nccl.work_status"):
        v = f.value
        if isinstance(v, dict) and isinstance(v.get("rank"), int) and isinstance(v.get("last_enqueued"), int):
            r = v["rank"]
            metric[r] = min(metric.get(r, v["last_enqueued"]), v["last_enqueued"])
    if len(metric) < 2:
        for st in cands:
            seqs = [i.seq_num for i in st.items if i.is_timeout and i.seq_num is not None]
            if seqs:
                metric[st.rank] = min(seqs)
    known = [metric[st.rank] for st in cands if st.rank in metric]
    if len(known) < 2 or min(known) == max(known):
        return cands
    low = min(known)
    return [st for st in cands if metric.get(st.rank) == low]


def _order(ev: Evidence, states: dict[int, _RankState]) -> list[_RankState]:
    cands = [st for st in states.values() if st.cls is not None]
    if not cands:
        return []
    top = max(st.cls for st in cands if st.cls is not None)
    best = [st for st in cands if st.cls == top]
    if top == VICTIM:
        best = _laggards(ev, best)
    year = _year_of(ev)
    times = {st.rank: _rank_time(st, year) for st in best}
    use_time = len(best) > 1 and all(t is not None for t in times.values())
    coarse = max((t[1] for t in times.values() if t is not None), default=1.0)

    def key(st: _RankState) -> tuple[int, int, tuple[int, int, int]]:
        t = times[st.rank]
        tk = math.floor((t[0] - _EPOCH).total_seconds() / coarse + 1e-9) if use_time and t else 0
        root = 0 if any(i.root for i in st.items) else 1
        return (tk, root, min(i.pos for i in st.deciding))

    return sorted(best, key=key)


# ------------------------------------------------------------ public API


def first_failing_rank(evidence: Evidence) -> int | None:
    """The rank whose own failure started the cascade, or None when no failure names a rank."""
    order = _order(evidence, _states(evidence))
    return order[0].rank if order else None


def rank_table(evidence: Evidence) -> tuple[RankRow, ...]:
    """One row per rank seen in failures, OOMs, exits or memory readings, sorted by rank."""
    states = _states(evidence)
    order = _order(evidence, states)
    first = order[0].rank if order else None
    year = _year_of(evidence)
    peaks: dict[int, int] = {}
    for m in evidence.memory:
        if m.rank is None:
            continue
        vals = [v for v in (m.allocated, m.max_allocated, m.reserved, m.max_reserved) if v is not None]
        if vals:
            peaks[m.rank] = max(peaks.get(m.rank, 0), max(vals))
    rows: list[RankRow] = []
    for rank in sorted(set(states) | set(peaks)):
        st = states.get(rank)
        if st is None or st.cls is None:
            rows.append(RankRow(rank, False, False, "", None, None, peaks.get(rank)))
            continue
        it = _first_item(st, year)
        hint = _first_item(st, year, by_specificity=True).hint
        exits = sorted((i for i in st.items if i.exitcode is not None),
                       key=lambda i: (_LAUNCHER_PREF.get(i.launcher, 9), i.pos))
        rows.append(RankRow(rank=rank, failed=True, first=rank == first, cause_hint=hint,
                            exitcode=exits[0].exitcode if exits else None, first_failure_line=it.ref,
                            peak_bytes=peaks.get(rank), victim=st.cls == VICTIM and rank != first))
    return tuple(rows)
