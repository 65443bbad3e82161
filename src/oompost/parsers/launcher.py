"""Launcher, scheduler and kernel lines: how each rank's process ended.

* torchrun / torch.distributed.elastic agent lines (glog ``E1202 15:13:00.030000 1301 path:986] ...``
  in torch ≥2.2, stdlib ``ERROR:torch.distributed.elastic...`` before): ``failed (exitcode: N)
  local_rank: L (pid: P)``, ``Sending process P closing signal SIGTERM`` (a *survivor* being shut
  down), ``Unable to shutdown process P via SIGTERM, forcefully exiting via SIGKILL``.
* The ``ChildFailedError`` summary block (``[idx]:`` entries; ``Root Cause (first observed failure)``
  -> ``reported_root_cause=True``, which has 1-second resolution and is often wrong).
* DeepSpeed's launcher: ``[launch.py:N:sigkill_handler] [...cmd...] exits with return code = N``.  The
  cmd is the *last spawned* local rank's, not the failing one's: the exit is recorded with rank=None.
* ``torch.multiprocessing.spawn``: ``process 1 terminated with signal SIGKILL`` / ``-- Process 1
  terminated with the following error:``.
* Slurm ``srun: error: node: task(s) N: ...`` and ``slurmstepd: error: Detected N oom-kill event(s)``;
  kernel / cgroup OOM-killer lines; a bare ``Killed``; ``Bus error`` and DataLoader shared-memory
  errors; exit status 137.

Everything becomes ``RankExit`` / ``Failure`` records (appended in file order, finalised at
``finish()``: one RankExit per process, pids resolved to ranks) plus run-shape facts.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field

from ..model import Failure, FailureKind, RankExit, SourceRef
from ..sources import LogLine
from .base import literal_trigger, EvidenceBuilder, TracebackTracker, ref

K = FailureKind

# --------------------------------------------------------------- regexes

GLOG_PREFIX_RE = re.compile(r"^[IWEF](?P<mmdd>\d{4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?)\s+\d+ \S+?:\d+\] ")
DS_PREFIX_RE = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)?)\]")
PDSH_HOST_RE = re.compile(r"^(?P<host>[A-Za-z][\w.-]{0,62}): (?=\[\d{4}-)")

AGENT_FAILED_RE = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\) of binary")
CLOSING_SIGNAL_RE = re.compile(r"Sending process (?P<pid>\d+) closing signal (?:Signals\.)?(?P<sig>SIG\w+)")
FORCE_KILL_RE = re.compile(
    r"Unable to shutdown process (?P<pid>\d+) via (?:Signals\.)?SIG\w+, forcefully exiting via (?:Signals\.)?SIG\w+")

CFE_BORDER_RE = re.compile(r"^\s*(?:={10,}|-{10,})\s*$")
CFE_INDEX_RE = re.compile(r"^\s*\[(?P<idx>\d+)\]:\s*$")
CFE_FIELD_RE = re.compile(r"^\s{1,4}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<val>.*)$")
CFE_RANK_RE = re.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<lr>-?\d+)\)")
CFE_EXIT_RE = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
CFE_ROOT_HEADER = "Root Cause (first observed failure):"

DS_EXIT_RE = re.compile(r"(?P<cmd>\[.*\]|\S.*?) exits with return code = (?P<rc>-?\d+)")
DS_KILLING_RE = re.compile(r"Killing subprocess (?P<pid>\d+)")
DS_SPAWNED_RE = re.compile(r"process (?P<pid>\d+) spawned with command: (?P<cmd>.*)$")
LOCAL_RANK_ARG_RE = re.compile(r"--local[_-]rank[= ]'?(?P<lr>\d+)")
DS_WORLD_SIZE_RE = re.compile(r"\bdist_world_size=(?P<n>\d+)")
DS_WORLD_INFO_RE = re.compile(r"WORLD INFO DICT: (?P<d>\{.*\})")
DS_NNODES_RE = re.compile(r"\bnnodes=(?P<nnodes>\d+), num_local_procs=(?P<local>\d+)(?:, node_rank=(?P<node>\d+))?")
NPROC_RE = re.compile(r"nproc[_-]per[_-]node['\"]?\s*[:=]?\s*['\"]?(?P<n>\d+)\b")
GLOBAL_WORLD_SIZES_RE = re.compile(r"global_world_sizes=\[(?P<n>\d+)")
GROUP_WORLD_SIZE_RE = re.compile(r"\bgroup_world_size=(?P<n>\d+)")

SPAWN_EXITED_RE = re.compile(
    r"process (?P<idx>\d+) terminated with (?:signal (?P<sig>SIG\w+)|exit code (?P<code>-?\d+))")
SPAWN_RAISED_RE = re.compile(r"^\s*-- Process (?P<idx>\d+) terminated with the following error:")
EXCEPTION_LINE_RE = re.compile(r"^\s*(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b:?")

SRUN_RE = re.compile(r"srun: error: (?P<node>\S+?): tasks? (?P<tasks>[\d\[\]\-, ]+?): (?P<what>.+?)\s*$")
SRUN_EXIT_CODE_RE = re.compile(r"Exited with exit code (?P<code>-?\d+)")
SLURM_OOM_RE = re.compile(r"Detected (?P<n>\d+) oom[-_]kill event")
SLURM_CANCELLED_RE = re.compile(r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<why>[A-Z][A-Z ]*?))? \*\*\*")

KERNEL_OOM_RE = re.compile(
    r"(?P<cg>Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]*)\)")
KERNEL_OOM_KILL_RE = re.compile(r"oom-kill:.*?\btask=(?P<comm>[^,]*),pid=(?P<pid>\d+)")
# the task table the kernel's OOM killer dumps (dump_tasks) before it picks a victim, one row per task:
# "[17798674.374495] [ 202779]  1000 202779 274650088 243385180 1957441536     7930          -998 python"
# ([ pid ] uid tgid total_vm rss pgtables_bytes swapents oom_score_adj name; rss in 4 KiB pages).  Only the
# OOM killer prints it, so an excerpt that kept the table but not the "Killed process" line still shows
# that host memory ran out.
KERNEL_TASK_ROW_RE = re.compile(r"^\s*(?:\[\s*\d+\.\d+\]\s*)?\[\s*(?P<pid>\d+)\]\s+\d+\s+\d+\s+\d+\s+(?P<rss>\d+)\s+"
                                r"\d+\s+\d+\s+-?\d+\s+(?P<comm>\S.*?)\s*$")
KERNEL_TASK_ROWS_MIN = 3
# zsh's job line for a SIGKILLed foreground job ("[1]    26478 killed     python test.py"), often glued
# to the end of a progress bar the kill interrupted
ZSH_KILLED_RE = re.compile(r"\[\d+\]\s+(?:[+-]\s+)?(?P<pid>\d+)\s+killed\s+(?P<cmd>\S.*?)\s*$")
SHELL_SIGNAL_RE = re.compile(
    r"line \d+:\s+(?P<pid>\d+) (?P<what>Killed|Bus error)(?: +\(core dumped\))?(?:\s+(?P<cmd>.*))?$")
# the pid as printed, or a placeholder a poster put in its place ("pid <worker_pid>", "pid(s) ...")
# (also as retyped in posts: "DataLoader worker(pid xxxxx) is killed by signal:killed.")
DATALOADER_SIGNAL_RE = re.compile(r"DataLoader worker ?\(pid (?P<pid>[^)]{1,40})\) is killed by signal: ?(?P<sig>[\w ]+)")
SHM_ERROR_RE = re.compile(
    r"out of shared memory|insufficient shared memory|raise your shared memory limit"
    r"|unable to (?:open|allocate|mmap) shared memory|Unexpected bus error"
    r"|No space left on device.*(?:/dev/shm|torch_)|(?:/dev/shm|</torch_)\S*.*No space left on device",
    re.IGNORECASE)
EXIT_137_RE = re.compile(r"(?:exit(?:ed)? (?:with )?(?:code|status)|return(?:ed)? code|exit status)[ :=]*137\b",
                         re.IGNORECASE)

SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7,
           "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13,
           "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24}
SRUN_SIGNAL_WORDS = {"Killed": -9, "Terminated": -15, "Aborted": -6, "Segmentation fault": -11,
                     "Bus error": -7, "Hangup": -1, "Interrupt": -2}

MAX_TRACEBACK_CHARS = 6000
MAX_TRACEBACK_LINES = 80
CFE_IDLE_LINES = 60          # lines without any block structure before a ChildFailedError block is abandoned
SPAWN_ERROR_LINES = 400      # how far an mp.spawn "-- Process N terminated" looks for its exception line
MAX_SRUN_TASKS = 4096


def expand_tasks(spec: str) -> list[int]:
    """Slurm task lists: '3', '0-3', '0,2-3', '[0-3]'."""
    out: list[int] = []
    for part in spec.replace("[", "").replace("]", "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, _, b = part.partition("-")
            if a.isdigit() and b.isdigit() and int(b) >= int(a):
                out.extend(range(int(a), min(int(b), int(a) + MAX_SRUN_TASKS) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out[:MAX_SRUN_TASKS]


def signal_number(name: str) -> int | None:
    return SIGNALS.get(name.strip().upper())


# ------------------------------------------------------------- records


@dataclass(eq=False)
class _Exit:
    ref: SourceRef
    exitcode: int
    launcher: str
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    host: str | None = None
    time: str | None = None
    message: str = ""
    reported_root_cause: bool = False
    error_file: str | None = None
    traceback: str = ""
    killed_by_launcher: bool = False
    authoritative: bool = False                   # from a ChildFailedError entry
    task: int | None = None                       # Slurm task id (kept apart from rank until finish)
    placeholder: RankExit | None = None
    sigkill_placeholder: Failure | None = None

    def to_exit(self) -> RankExit:
        return RankExit(ref=self.ref, exitcode=self.exitcode, rank=self.rank, local_rank=self.local_rank,
                        pid=self.pid, host=self.host, time=self.time, message=self.message,
                        launcher=self.launcher, reported_root_cause=self.reported_root_cause,
                        error_file=self.error_file, traceback=self.traceback,
                        killed_by_launcher=self.killed_by_launcher)


@dataclass(eq=False)
class _Fail:
    kind: FailureKind
    ref: SourceRef
    rank: int | None = None
    pid: int | None = None
    host: str | None = None
    message: str = ""
    exception: str = ""
    placeholder: Failure | None = None

    def to_failure(self) -> Failure:
        return Failure(kind=self.kind, ref=self.ref, rank=self.rank, message=self.message,
                       exception=self.exception, host=self.host, pid=self.pid)


@dataclass
class _CfeEntry:
    idx: int
    root: bool
    first: SourceRef
    fields: dict[str, str] = field(default_factory=dict)
    refs: dict[str, SourceRef] = field(default_factory=dict)
    tb: list[str] = field(default_factory=list)
    in_tb: bool = False


@dataclass
class _Cfe:
    section: str = ""                              # "" | "failures" | "root"
    entry: _CfeEntry | None = None
    idle: int = 0
    root_seen: bool = False


@dataclass
class _SpawnPending:
    exit: _Exit
    left: int = SPAWN_ERROR_LINES


# --------------------------------------------------------------- parser


class LauncherParser:
    """Parses launcher / scheduler / kernel lines into RankExits, Failures and run-shape facts."""

    def __init__(self, path: str, out: EvidenceBuilder, *, rank_hint: int | None = None,
                 tracebacks: TracebackTracker | None = None) -> None:
        self.path = path
        self.out = out
        self.rank_hint = rank_hint
        self._exits: list[_Exit] = []
        self._by_pid: dict[int, list[_Exit]] = {}
        self._other_keys: dict[tuple, _Exit] = {}
        self._fails: list[_Fail] = []
        self._fail_keys: dict[tuple, _Fail] = {}
        self._survivors: set[int] = set()
        self._spawned: dict[int, int] = {}             # DeepSpeed: pid -> local rank
        self._cfe: _Cfe | None = None
        self._spawn: _SpawnPending | None = None
        self._launchers: set[str] = set()
        self._facts_seen: set[str] = set()
        self._nnodes: int | None = None
        self._hosts: set[str] = set()
        self._task_fails: list[tuple[_Fail, int | None]] = []
        self._num_local: int | None = None
        self._killing: list[int] = []                 # DeepSpeed "Killing subprocess" pids, in order
        self._pid_ref: SourceRef | None = None
        self._task_rows: list[tuple[LogLine, int, int, str]] = []   # kernel OOM-killer table: (line, pid, rss, comm)

    # ------------------------------------------------------------ feed

    SENTINELS = ("ChildFailedError", "exitcode", "closing signal", "forcefully exiting", "exits with return code",
                 "Killing subprocess", "spawned with command", "terminated with", "srun: error", "slurmstepd",
                 "ut of memory: Kill", "oom-kill", "cgroup out of memory", "OOMKilled", "Killed", "us error",
                 "shared memory", "No space left", " code", " status", "ProcessExitedException", "-- Process",
                 "DataLoader worker", "world_size", "WORLD INFO", "nnodes=", "nproc", "launch.py", "] [ ",
                 " killed ")
    # " code" / " status", not "137": every text EXIT_137_RE reads has one of them, and "137" is in
    # every 1370th step number of a long run (each such line would be decoded for nothing)
    TRIGGER = literal_trigger(SENTINELS)

    @property
    def busy(self) -> bool:
        return self._cfe is not None or self._spawn is not None

    def feed(self, ln: LogLine) -> None:
        t = ln.text
        if self._cfe is not None and self._cfe_feed(ln, t):
            return
        if self._spawn is not None:
            self._spawn_feed(t)
        # Cheap gate (each `in` costs ~60 ns a line): every trigger below contains one of these.
        # "xit": exitcode / exits with / Exited / exit status / forcefully exiting; "ill": Killed /
        # Killing / oom-kill / OOMKilled / "Out of memory: Kill"; "ign": closing signal, "terminated
        # with signal"; "rror": srun/slurmstepd "error:", Bus error, RuntimeError/OSError shm texts;
        # "aunch": DeepSpeed [launch.py:...] lines (WORLD INFO, nnodes=, spawned with command)
        if not ("xit" in t or "ill" in t or "ign" in t or "rror" in t or "rminated" in t or "Child" in t
                or "aunch" in t or "orld" in t or "nproc" in t):
            if "] [ " in t and len(self._task_rows) < 100_000 and (m := KERNEL_TASK_ROW_RE.match(t)):
                self._task_rows.append((ln, int(m.group("pid")), int(m.group("rss")), m.group("comm")))
            return
        self._dispatch(ln, t)

    def _dispatch(self, ln: LogLine, t: str) -> None:
        if "ChildFailedError" in t:
            self._cfe = _Cfe()
            self._launcher_seen("torchrun", ln)
            return
        if "exitcode" in t:
            m = AGENT_FAILED_RE.search(t)
            if m:
                self._agent_failed(ln, t, m)
                return
        if "closing signal" in t:
            m = CLOSING_SIGNAL_RE.search(t)
            if m:
                self._closing_signal(ln, m)
                return
        if "forcefully exiting" in t:
            m = FORCE_KILL_RE.search(t)
            if m:
                pid = int(m.group("pid"))
                self._survivors.add(pid)
                for e in self._by_pid.get(pid, ()):
                    e.killed_by_launcher = True
                return
        if "exits with return code" in t:
            m = DS_EXIT_RE.search(t)
            if m:
                self._ds_exit(ln, t, m)
                return
        if "Killing subprocess" in t:
            m = DS_KILLING_RE.search(t)
            if m:
                self._launcher_seen("deepspeed", ln)
                pid = int(m.group("pid"))
                self._fact_once("launcher.killed_pid", pid, ln, per_value=True)
                if pid not in self._killing:
                    self._killing.append(pid)
                    self._pid_ref = self._pid_ref or ref(self.path, ln)
                return
        if "spawned with command" in t:
            m = DS_SPAWNED_RE.search(t)
            if m:
                self._launcher_seen("deepspeed", ln)
                ml = LOCAL_RANK_ARG_RE.search(m.group("cmd"))
                if ml:
                    self._spawned[int(m.group("pid"))] = int(ml.group("lr"))
                    self._pid_ref = self._pid_ref or ref(self.path, ln)
                return
        if "terminated with" in t:
            if self._spawn_line(ln, t):
                return
        if "srun: error:" in t or "slurmstepd" in t:
            if self._slurm(ln, t):
                return
        if "ut of memory: Kill" in t or "oom-kill:" in t or "cgroup out of memory" in t:
            if self._kernel_oom(ln, t):
                return
        if "OOMKilled" in t:
            self._fail(K.HOST_OOM_KILL, ln, self._line_rank(ln), None,
                       "container OOMKilled (memory limit reached)")
            return
        if ("Killed" in t or " killed " in t) and self._killed(ln, t):
            return
        if ("us error" in t or "shared memory" in t or "No space left" in t) and self._shm(ln, t):
            return
        if "137" in t and "xit" in t and self._exit_137(ln, t):
            return
        self._facts(ln, t)

    # --------------------------------------------------------- torchrun

    def _agent_failed(self, ln: LogLine, t: str, m: re.Match[str]) -> None:
        self._launcher_seen("torchrun", ln)
        pid = int(m.group("pid"))
        code = int(m.group("code"))
        mg = GLOG_PREFIX_RE.match(t)
        when = f"{mg.group('mmdd')} {mg.group('hms')}" if mg else None
        e = self._exit_for_pid(pid, host=None)
        if e is None:
            e = self._new_exit(ref(self.path, ln), code, "torchrun", pid=pid, local_rank=int(m.group("lr")),
                               time=when, message=f"failed (exitcode: {code}) local_rank: {m.group('lr')} (pid: {pid})")
        else:
            if not e.authoritative:
                e.exitcode = code
                e.time = e.time or when
            e.local_rank = e.local_rank if e.local_rank is not None else int(m.group("lr"))
        self._maybe_sigkill(e)

    def _closing_signal(self, ln: LogLine, m: re.Match[str]) -> None:
        self._launcher_seen("torchrun", ln)
        pid = int(m.group("pid"))
        self._survivors.add(pid)
        sig = signal_number(m.group("sig")) or 15
        e = self._exit_for_pid(pid, host=None)
        if e is None:
            self._new_exit(ref(self.path, ln), -sig, "torchrun", pid=pid, killed_by_launcher=True,
                           message=f"the launcher sent {m.group('sig')} to process {pid} while shutting down "
                                   "(a survivor, not the failing rank)")
        else:
            e.killed_by_launcher = True

    # ChildFailedError block ------------------------------------------

    def _cfe_feed(self, ln: LogLine, t: str) -> bool:
        """Consume a line of a ChildFailedError block.  Returns True when the line was part of it."""
        cfe = self._cfe
        assert cfe is not None
        s = t.strip()
        entry = cfe.entry
        if CFE_BORDER_RE.match(t):
            self._cfe_close_entry()
            if s[0] == "=" and cfe.root_seen:
                self._cfe = None
            cfe.idle = 0
            return True
        if s == CFE_ROOT_HEADER or s.endswith(CFE_ROOT_HEADER):
            self._cfe_close_entry()
            cfe.section = "root"
            cfe.idle = 0
            return True
        if s == "Failures:":
            self._cfe_close_entry()
            cfe.section = "failures"
            cfe.idle = 0
            return True
        m = CFE_INDEX_RE.match(t)
        if m:
            self._cfe_close_entry()
            cfe.entry = _CfeEntry(int(m.group("idx")), cfe.section == "root", ref(self.path, ln))
            if cfe.section == "root":
                cfe.root_seen = True
            cfe.idle = 0
            return True
        if entry is not None:
            mf = None if entry.in_tb else CFE_FIELD_RE.match(t)
            if mf and mf.group("key") not in entry.fields:
                key = mf.group("key")
                entry.fields[key] = mf.group("val").strip()
                entry.refs[key] = ref(self.path, ln)
                if key == "traceback":
                    entry.in_tb = True
                    entry.tb.append(mf.group("val").rstrip())
                cfe.idle = 0
                return True
            if entry.in_tb:
                if len(entry.tb) < MAX_TRACEBACK_LINES:
                    entry.tb.append(t[2:].rstrip() if t.startswith("  ") else t.rstrip())
                return False          # other parsers (torch OOM, NCCL) still read traceback lines
        if s.endswith(" FAILED") or s == "<NO_OTHER_FAILURES>":
            cfe.idle = 0
            return True
        cfe.idle += 1
        if cfe.idle > CFE_IDLE_LINES:
            self._cfe_close_entry()
            self._cfe = None
        return False

    def _cfe_close_entry(self) -> None:
        cfe = self._cfe
        if cfe is None or cfe.entry is None:
            return
        en, cfe.entry = cfe.entry, None
        mx = CFE_EXIT_RE.search(en.fields.get("exitcode", ""))
        if not mx:
            return
        code, pid = int(mx.group("code")), int(mx.group("pid"))
        mr = CFE_RANK_RE.search(en.fields.get("rank", ""))
        rank = int(mr.group("rank")) if mr else None
        lr = int(mr.group("lr")) if mr else None
        host = en.fields.get("host") or None
        if host:
            self._hosts.add(host)
        ef = en.fields.get("error_file") or None
        if ef in ("<N/A>", "N/A"):
            ef = None
        tb = "\n".join(en.tb).strip()
        if len(tb) > MAX_TRACEBACK_CHARS:
            tb = tb[:MAX_TRACEBACK_CHARS - 1] + "…"
        message = _exception_line(en.tb) or (en.tb[0].strip() if en.tb else "")
        r = en.refs.get("exitcode", en.first)
        e = self._exit_for_pid(pid, host=host)
        if e is None:
            e = self._new_exit(r, code, "torchrun", pid=pid)
        else:
            e.ref = r
        e.exitcode, e.rank, e.local_rank = code, rank, lr
        e.host, e.time = host, en.fields.get("time") or e.time
        e.error_file, e.traceback, e.message = ef, tb, message or e.message
        e.reported_root_cause = e.reported_root_cause or en.root
        e.authoritative = True
        e.killed_by_launcher = e.killed_by_launcher or pid in self._survivors
        self._maybe_sigkill(e)

    # --------------------------------------------------------- DeepSpeed

    def _ds_exit(self, ln: LogLine, t: str, m: re.Match[str]) -> None:
        self._launcher_seen("deepspeed", ln)
        rc = int(m.group("rc"))
        mh = PDSH_HOST_RE.match(t)
        host = mh.group("host") if mh else ln.host
        md = DS_PREFIX_RE.match(t[mh.end():] if mh else t)
        key = ("deepspeed", host, rc, m.group("cmd"))
        if key in self._other_keys:
            return
        # the printed cmd (and its --local_rank) is the last *spawned* rank's, not the failing one's
        e = self._new_exit(ref(self.path, ln), rc, "deepspeed", host=host, time=md.group("ts") if md else None,
                           message=f"DeepSpeed launcher: a local rank exited with return code {rc} "
                                   "(the command shown is the last spawned rank's, not the failing one's)")
        self._other_keys[key] = e
        self._maybe_sigkill(e)

    # ------------------------------------------------------- mp.spawn

    def _spawn_line(self, ln: LogLine, t: str) -> bool:
        m = SPAWN_RAISED_RE.match(t)
        if m:
            e = self._spawn_exit(ln, int(m.group("idx")), 1, "raised an exception")
            self._spawn = _SpawnPending(e)
            return True
        m2 = SPAWN_EXITED_RE.search(t)
        if m2 and ("ProcessExitedException" in t or t.lstrip().startswith("process ")
                   or "multiprocessing" in t):
            if m2.group("sig"):
                n = signal_number(m2.group("sig"))
                code = -n if n else -1
                what = f"terminated with signal {m2.group('sig')}"
            else:
                code = int(m2.group("code"))
                what = f"terminated with exit code {code}"
            e = self._spawn_exit(ln, int(m2.group("idx")), code, what)
            self._maybe_sigkill(e)
            return True
        return False

    def _spawn_exit(self, ln: LogLine, idx: int, code: int, what: str) -> _Exit:
        self._launcher_seen("mp.spawn", ln)
        key = ("mp.spawn", idx)
        e = self._other_keys.get(key)
        if e is None:
            e = self._new_exit(ref(self.path, ln), code, "mp.spawn", local_rank=idx,
                               message=f"torch.multiprocessing.spawn: process {idx} {what}")
            self._other_keys[key] = e
        return e

    def _spawn_feed(self, t: str) -> None:
        sp = self._spawn
        assert sp is not None
        sp.left -= 1
        if sp.left <= 0:
            self._spawn = None
            return
        if t.startswith((" ", "\t")) or t.startswith("Traceback") or "-- Process" in t:
            return
        m = EXCEPTION_LINE_RE.match(t)
        if m:
            sp.exit.message = f"{sp.exit.message}: {t.strip()}"[:600]
            self._spawn = None

    # ------------------------------------------------------------ Slurm

    def _slurm(self, ln: LogLine, t: str) -> bool:
        if "srun: error:" in t:
            m = SRUN_RE.search(t)
            if not m:
                return False
            self._launcher_seen("slurm", ln)
            node, what = m.group("node"), m.group("what")
            self._hosts.add(node)
            tasks = expand_tasks(m.group("tasks"))
            mc = SRUN_EXIT_CODE_RE.search(what)
            if mc:
                code: int | None = int(mc.group("code"))
            else:
                code = next((c for w, c in SRUN_SIGNAL_WORDS.items() if what.startswith(w)), None)
            for task in tasks:
                if "Out Of Memory" in what or "out-of-memory" in what.lower():
                    self._fail(K.HOST_OOM_KILL, ln, task, None, f"Slurm: task {task} on {node}: {what}",
                               host=node, task=True)
                    continue
                if code is None:
                    continue
                key = ("slurm", node, task)
                if key in self._other_keys:
                    continue
                e = self._new_exit(ref(self.path, ln), code, "slurm", host=node, task=task,
                                   message=f"Slurm: task {task} on {node}: {what}")
                self._other_keys[key] = e
                if code == -7:
                    self._fail(K.SHM, ln, task, None, f"Slurm: task {task} died of SIGBUS (Bus error): "
                               "usually /dev/shm exhausted", host=node, task=True)
                self._maybe_sigkill(e)
            return True
        if "slurmstepd" in t:
            m = SLURM_OOM_RE.search(t)
            if m:
                self._launcher_seen("slurm", ln)
                self._fail(K.HOST_OOM_KILL, ln, None, None,
                           f"Slurm detected {m.group('n')} oom-kill event(s): host memory (cgroup limit) ran out")
                return True
            mc = SLURM_CANCELLED_RE.search(t)
            if mc:
                self._fact_once("slurm.cancelled", (mc.group("why") or "CANCELLED").strip(), ln)
                return True
        return False

    # ------------------------------------------------ host memory / signals

    def _kernel_oom(self, ln: LogLine, t: str) -> bool:
        m = KERNEL_OOM_RE.search(t)
        if m:
            what = "cgroup memory limit" if m.group("cg") else "host RAM"
            self._fail(K.HOST_OOM_KILL, ln, None, int(m.group("pid")),
                       f"kernel OOM killer ({what}) killed process {m.group('pid')} ({m.group('comm')})")
            return True
        m = KERNEL_OOM_KILL_RE.search(t)
        if m:
            self._fail(K.HOST_OOM_KILL, ln, None, int(m.group("pid")),
                       f"kernel OOM killer killed process {m.group('pid')} ({m.group('comm')})")
            return True
        if "Memory cgroup out of memory" in t:
            self._fail(K.HOST_OOM_KILL, ln, None, None, "cgroup memory limit reached (Memory cgroup out of memory)")
            return True
        return False

    def _kernel_task_table(self) -> None:
        """The OOM killer's task table without its verdict line: a host OOM, the largest task named."""
        rows = self._task_rows
        if len(rows) < KERNEL_TASK_ROWS_MIN or any(f.kind is K.HOST_OOM_KILL for f in self._fails):
            return
        ln, pid, rss, comm = max(rows, key=lambda r: r[2])
        self._fail(K.HOST_OOM_KILL, ln, None, pid,
                   f"the kernel's OOM killer listed {len(rows)} tasks (it dumps them only when memory ran out); "
                   f"the largest, {comm} (pid {pid}), held {rss * 4096 / 2**30:.1f} GiB resident")

    def _killed(self, ln: LogLine, t: str) -> bool:
        s = t.strip()
        if s == "Killed":
            self._fail(K.KILLED, ln, self._line_rank(ln), None, "process killed (SIGKILL): 'Killed' from the shell")
            return True
        if " killed " in t and (mz := ZSH_KILLED_RE.search(t)):
            self._fail(K.KILLED, ln, self._line_rank(ln), int(mz.group("pid")),
                       f"process {mz.group('pid')} ({mz.group('cmd')[:60]}) killed (SIGKILL): zsh's job line")
            return True
        if "line " in t and self._shell_signal(ln, t):
            return True
        if "DataLoader worker" in t:
            m = DATALOADER_SIGNAL_RE.search(t)
            if m and "killed" in m.group("sig").lower():
                self._fail(K.KILLED, ln, self._line_rank(ln), None,
                           f"DataLoader worker (pid {m.group('pid')}) was SIGKILLed (host memory?)")
                return True
            if m and "Terminated" in m.group("sig"):
                # a host process ended from outside: the host's memory (a container or a job limit), or a
                # scheduler's time limit; every worker kill in the corpus was host memory
                self._fail(K.KILLED, ln, self._line_rank(ln), None,
                           f"DataLoader worker (pid {m.group('pid')}) was terminated (SIGTERM): host memory or "
                           "the job's scheduler")
                return True
        return False

    def _shell_signal(self, ln: LogLine, t: str) -> bool:
        m = SHELL_SIGNAL_RE.search(t)
        if not m:
            return False
        pid = int(m.group("pid"))
        if m.group("what") == "Killed":
            self._fail(K.KILLED, ln, self._line_rank(ln), pid, f"the shell reports process {pid} Killed (SIGKILL)")
        else:
            self._fail(K.SHM, ln, self._line_rank(ln), pid,
                       f"process {pid} died of SIGBUS (Bus error): usually /dev/shm exhausted")
        return True

    def _shm(self, ln: LogLine, t: str) -> bool:
        if "NCCL" in t or "segment" in t:
            return False          # NCCL's shared-memory transport: the NCCL parser owns those
        if "line " in t and "Bus error" in t and self._shell_signal(ln, t):
            return True
        s = t.strip()
        m = DATALOADER_SIGNAL_RE.search(t) if "DataLoader worker" in t else None
        if (s.startswith("Bus error") and len(s) < 40) or (m and "Bus error" in m.group("sig")) \
                or SHM_ERROR_RE.search(t):
            me = EXCEPTION_LINE_RE.match(t)
            self._fail(K.SHM, ln, self._line_rank(ln), None,
                       f"shared memory (/dev/shm) exhausted: {s[:300]}", exception=me.group("exc") if me else "")
            return True
        return False

    def _exit_137(self, ln: LogLine, t: str) -> bool:
        if not EXIT_137_RE.search(t):
            return False
        rank = self._line_rank(ln)
        key = ("shell", rank, ln.text.strip())
        if key in self._other_keys:
            return True
        e = self._new_exit(ref(self.path, ln), 137, "shell", rank=rank,
                           message="exit status 137 = 128 + SIGKILL (OOM killer, memory limit or a kill)")
        self._other_keys[key] = e
        self._maybe_sigkill(e)
        return True

    # ------------------------------------------------------------ facts

    def _facts(self, ln: LogLine, t: str) -> None:
        if "dist_world_size=" in t:
            m = DS_WORLD_SIZE_RE.search(t)
            if m:
                self._fact_once("world_size", int(m.group("n")), ln)
            return
        if "WORLD INFO DICT" in t:
            m = DS_WORLD_INFO_RE.search(t)
            if m:
                info = _world_info(m.group("d"))
                if isinstance(info, dict):
                    clean = {str(k): [int(x) for x in v] for k, v in info.items()
                             if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v)}
                    self._fact_once("launcher.world_info", clean, ln)
                    self._fact_once("launcher.world_info_size", sum(len(v) for v in clean.values()), ln)
            return
        if "nnodes=" in t:
            m = DS_NNODES_RE.search(t)
            if m:
                self._nnodes = int(m.group("nnodes"))
                self._fact_once("nnodes", self._nnodes, ln)
                self._num_local = int(m.group("local"))
                self._fact_once("num_local_procs", self._num_local, ln)
                if m.group("node") is not None:
                    self._fact_once("node_rank", int(m.group("node")), ln)
            return
        if "nproc" in t:
            m = NPROC_RE.search(t)
            if m:
                self._fact_once("nproc_per_node", int(m.group("n")), ln)
            return
        if "world_size" in t:
            m = GLOBAL_WORLD_SIZES_RE.search(t)
            if m:
                self._fact_once("world_size", int(m.group("n")), ln)
                return
            m = GROUP_WORLD_SIZE_RE.search(t)
            if m:
                self._nnodes = self._nnodes or int(m.group("n"))
                self._fact_once("nnodes", int(m.group("n")), ln)

    # ------------------------------------------------------- helpers

    def _line_rank(self, ln: LogLine) -> int | None:
        if ln.rank is not None:
            return ln.rank
        if ln.local_rank is not None:
            return ln.local_rank
        cfe = self._cfe
        if cfe is not None and cfe.entry is not None and cfe.entry.in_tb:
            mr = CFE_RANK_RE.search(cfe.entry.fields.get("rank", ""))
            if mr:
                return int(mr.group("rank"))      # an error-file traceback reprinted by torchrun
        return self.rank_hint

    def _launcher_seen(self, name: str, ln: LogLine) -> None:
        if name not in self._launchers:
            self._launchers.add(name)
            self._fact_once("launcher", name, ln, per_value=True)

    def _fact_once(self, name: str, value: object, ln: LogLine, per_value: bool = False) -> None:
        key = f"{name}={value!r}" if per_value else name
        if key in self._facts_seen:
            return
        self._facts_seen.add(key)
        self.out.fact(name, value, ref(self.path, ln))

    def _exit_for_pid(self, pid: int, host: str | None) -> _Exit | None:
        for e in self._by_pid.get(pid, ()):
            if e.launcher == "torchrun" and (host is None or e.host is None or e.host == host):
                return e
        return None

    def _new_exit(self, r: SourceRef, code: int, launcher: str, **kw: object) -> _Exit:
        e = _Exit(ref=r, exitcode=code, launcher=launcher, **kw)  # type: ignore[arg-type]
        e.placeholder = RankExit(r, code)
        self.out.exits.append(e.placeholder)
        self._exits.append(e)
        if e.pid is not None:
            self._by_pid.setdefault(e.pid, []).append(e)
        return e

    def _maybe_sigkill(self, e: _Exit) -> None:
        """Reserve the slot of the SIGKILL Failure a -9 / 137 exit implies (decided at finish)."""
        if e.exitcode in (-9, 137) and e.sigkill_placeholder is None:
            e.sigkill_placeholder = Failure(K.SIGKILL, e.ref)
            self.out.failures.append(e.sigkill_placeholder)

    def _fail(self, kind: FailureKind, ln: LogLine, rank: int | None, pid: int | None, message: str, *,
              host: str | None = None, exception: str = "", task: bool = False) -> None:
        key = (kind, rank, pid, host)
        if key in self._fail_keys:
            return
        f = _Fail(kind, ref(self.path, ln), rank=rank, pid=pid, host=host, message=message, exception=exception)
        if task:
            f.rank = None
            self._task_fails.append((f, rank))
        f.placeholder = Failure(kind, f.ref)
        self.out.failures.append(f.placeholder)
        self._fails.append(f)
        self._fail_keys[key] = f

    # ------------------------------------------------------------ finish

    def finish(self) -> None:
        if self._cfe is not None:
            self._cfe_close_entry()
            self._cfe = None
        self._kernel_task_table()
        pid_lr = self._pid_local_ranks()
        if not self._exits and not self._fails:
            return
        # Slurm task ids are ranks only when srun started the ranks itself
        tasks_are_ranks = not (self._launchers & {"torchrun", "deepspeed", "mp.spawn"})
        for e in self._exits:
            if e.task is not None and tasks_are_ranks:
                e.rank = e.task
        for f, task in self._task_fails:
            if tasks_are_ranks:
                f.rank = task
        single_node = self._nnodes == 1 or (self._nnodes is None and len(self._hosts) <= 1)
        pid_rank: dict[int, int] = {}
        for e in self._exits:
            if e.pid is None:
                continue
            if e.rank is not None:
                pid_rank[e.pid] = e.rank
            elif e.local_rank is not None and single_node:
                pid_rank.setdefault(e.pid, e.local_rank)
        if single_node:
            for pid, lr in pid_lr.items():
                pid_rank.setdefault(pid, lr)
        if self._num_local == 1:
            # one child: the failing process can only be local rank 0 (the --local_rank trap needs >1)
            for e in self._exits:
                if e.launcher == "deepspeed" and e.local_rank is None:
                    e.local_rank = 0
                    if self._nnodes == 1:
                        e.rank = 0
        final: dict[int, object | None] = {}
        for f in self._fails:
            if f.rank is None and f.pid is not None and f.pid in pid_rank:
                f.rank = pid_rank[f.pid]
            assert f.placeholder is not None
            final[id(f.placeholder)] = f.to_failure()
        for e in self._exits:
            e.killed_by_launcher = e.killed_by_launcher or (e.pid is not None and e.pid in self._survivors
                                                            and e.launcher == "torchrun")
            assert e.placeholder is not None
            final[id(e.placeholder)] = e.to_exit()
            sk = e.sigkill_placeholder
            if sk is not None:
                if e.exitcode in (-9, 137) and not e.killed_by_launcher:
                    rank = e.rank if e.rank is not None else (e.local_rank if single_node else None)
                    final[id(sk)] = Failure(
                        K.SIGKILL, e.ref, rank=rank, pid=e.pid, host=e.host,
                        message=f"{e.launcher or 'the launcher'} reports exit {e.exitcode} (SIGKILL) "
                                "with no stated cause: host OOM killer, a memory limit, or a kill")
                else:
                    final[id(sk)] = None
        _commit(self.out.exits, final)
        _commit(self.out.failures, final)


    def _pid_local_ranks(self) -> dict[int, int]:
        """DeepSpeed child pid -> local rank: from "spawned with command" lines, else from the order of
        "Killing subprocess" lines (sigkill_handler walks its children in spawn = local-rank order).
        Published as the fact ``launcher.pid_local_rank`` so a kernel log in another file can use it."""
        pid_lr = dict(self._spawned)
        if not pid_lr and self._killing and (self._num_local is None or len(self._killing) == self._num_local):
            pid_lr = {pid: i for i, pid in enumerate(self._killing)}
        if pid_lr and self._pid_ref is not None:
            self.out.fact("launcher.pid_local_rank", {str(p): lr for p, lr in pid_lr.items()}, self._pid_ref)
        return pid_lr


def _exception_line(lines: list[str]) -> str:
    for s in reversed(lines):
        if EXCEPTION_LINE_RE.match(s) and not s.lstrip().startswith("Traceback"):
            return s.strip()
    return ""


def _commit(target: list, final: dict[int, object | None]) -> None:  # type: ignore[type-arg]
    new = []
    for x in target:
        k = id(x)
        if k in final:
            v = final[k]
            if v is not None:
                new.append(v)
        else:
            new.append(x)
    target[:] = new


@functools.lru_cache(maxsize=64)
def _world_info(text: str) -> object:
    """The WORLD INFO DICT, parsed once per distinct text (a log that restarts a job prints it again and again)."""
    try:
        info = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return info if isinstance(info, dict) else None
