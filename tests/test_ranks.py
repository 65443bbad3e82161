"""First failing rank and the per-rank table (reference/nccl.md §5.2).

Log excerpts are verbatim from /work/shared/reference/nccl.md and deepspeed.md (sources named per
test); where a test needs a variant (a second rank, a swapped Root Cause), the comment says what was
changed.  Pure-function tests build Evidence directly.
"""

from __future__ import annotations

from datetime import datetime

from oompost.analysis.ranks import RankRow, first_failing_rank, is_victim, line_time, rank_table
from oompost.model import (Evidence, Failure, FailureKind as K, MemoryReading, OomEvent, OomKind, RankExit,
                           SourceRef)
from oompost.parsers import parse_text

R = SourceRef("run.log", 1, "")


def row(rows: tuple[RankRow, ...], rank: int) -> RankRow:
    return next(r for r in rows if r.rank == rank)


# nccl.md §6.1, NVIDIA/nccl#1235 (public issue)
NCCL_1235 = """\
ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'
ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes
ng30903:3063028:3066152 [3] NCCL INFO transport/p2p.cc:204 -> 1
ng30903:3063028:3066152 [3] proxy.cc:1519 NCCL WARN [Proxy Service 3] Failed to execute operation Set…
ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer ng30903-ib…
"""


def test_nccl1235_calloc_rank_is_root_peer_close_is_victim():
    ev = parse_text(NCCL_1235)
    assert first_failing_rank(ev) == 3
    rows = rank_table(ev)
    assert [r.rank for r in rows] == [0, 3]
    r3, r0 = row(rows, 3), row(rows, 0)
    assert r3.first and r3.failed and not r3.victim
    assert "6.00 MiB" in r3.cause_hint
    assert r3.first_failure_line is not None and r3.first_failure_line.line == 1
    assert r0.failed and r0.victim and not r0.first


def test_victim_reported_first_in_the_file_still_loses():
    # the same two processes with the victim's line first in the file
    lines = NCCL_1235.splitlines()
    ev = parse_text("\n".join([lines[4]] + lines[:4]) + "\n")
    assert first_failing_rank(ev) == 3


from excerpts import SIGKILL_RUN  # noqa: E402


def test_measured_sigkill_run():
    ev = parse_text(SIGKILL_RUN)
    assert first_failing_rank(ev) == 1
    rows = rank_table(ev)
    assert row(rows, 1).exitcode == -9 and row(rows, 1).first
    assert row(rows, 0).exitcode == -15 and row(rows, 0).victim


def test_root_cause_on_a_sigterm_survivor_is_overruled():
    # The measured block with both entries in the same second and torchrun's "Root Cause" on the
    # SIGTERM'd rank 0 -- the 1-second tie nccl.md §4.2/§5.2 warns about.  Rank 1 (-9) must win.
    text = SIGKILL_RUN.replace("2026-12-02_15:12:59", "2026-12-02_15:13:00")
    text = text.replace("Failures:\n[1]:", "Failures:\n[X]:").replace("Root Cause (first observed failure):\n[0]:",
                                                                     "Root Cause (first observed failure):\n[1]:")
    lines = text.splitlines()
    # swap the two entries' bodies so that Root Cause holds rank 0 (-15) and Failures holds rank 1 (-9)
    a = lines.index("[X]:")
    b = lines.index("[1]:")
    body_a, body_b = lines[a + 1:a + 7], lines[b + 1:b + 7]
    lines[a + 1:a + 7], lines[b + 1:b + 7] = body_b, body_a
    lines[a] = "[1]:"
    lines[b] = "[0]:"
    ev = parse_text("\n".join(lines) + "\n")
    root = [e for e in ev.exits if e.reported_root_cause]
    assert [e.rank for e in root] == [0]                  # torchrun blames rank 0 ...
    assert first_failing_rank(ev) == 1                    # ... the SIGKILL on rank 1 is the cause


def _two_rank_exception_block(root_rank: int, t0: str = "2026-12-02_15:08:56", t1: str = "2026-12-02_15:08:56") -> str:
    # ChildFailedError laid out by _FAILURE_FORMAT_TEMPLATE (nccl.md §4.2) for the measured
    # duplicate-GPU run: "both ranks failed in the same second and 'root cause' was rank 1"
    entry = """\
[{idx}]:
  time      : {time}
  host      : localhost
  rank      : {rank} (local_rank: {rank})
  exitcode  : 1 (pid: {pid})
  error_file: /tmp/torchelastic_XXXX/none_XXXX/attempt_0/{rank}/error.json
  traceback : Traceback (most recent call last):
    File "probe.py", line 30, in main
      dist.all_reduce(t)
  torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9
  ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
  Last error:
  Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60
"""
    other = 1 - root_rank
    times = {0: t0, 1: t1}
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 54 + "\nprobe.py FAILED\n"
            + "-" * 54 + "\nFailures:\n" + entry.format(idx=1, rank=other, pid=516 + other, time=times[other])
            + "-" * 54 + "\nRoot Cause (first observed failure):\n"
            + entry.format(idx=0, rank=root_rank, pid=516 + root_rank, time=times[root_rank]) + "=" * 54 + "\n")


def test_same_second_tie_falls_back_to_root_cause():
    ev = parse_text(_two_rank_exception_block(root_rank=1))
    assert {f.rank for f in ev.failures if f.kind is K.DUPLICATE_GPU} == {0, 1}
    assert first_failing_rank(ev) == 1
    ev0 = parse_text(_two_rank_exception_block(root_rank=0))
    assert first_failing_rank(ev0) == 0


def test_earlier_timestamped_failure_beats_root_cause():
    # Root Cause says rank 1, but rank 0's own NCCL WARN (≥2.26 timestamp, measured line of §1.1, tied to
    # rank 0 through a [default0]: torchrun --tee prefix) is a second earlier than anything of rank 1's
    warn0 = ("[default0]:[2026-12-02 15:08:55] vm:516:516 [0] init.cc:904 NCCL WARN Duplicate GPU detected : "
             "rank 0 and rank 1 both on CUDA device 60\n")
    warn1 = ("[default1]:[2026-12-02 15:08:56] vm:517:517 [0] init.cc:904 NCCL WARN Duplicate GPU detected : "
             "rank 1 and rank 0 both on CUDA device 60\n")
    ev = parse_text(warn1 + warn0 + _two_rank_exception_block(root_rank=1))
    assert first_failing_rank(ev) == 0


def test_local_failure_beats_an_earlier_victim():
    # rank 0: the measured watchdog timeout (nccl.md §3.3) at 15:09:46; rank 1: the measured init OOM
    # block (§2.3) re-prefixed [rank1] with the measured WARN (timestamp moved after the timeout)
    text = """\
[rank0]:[E1202 15:09:46.188373665 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
[default1]:[2026-12-02 15:09:50] vm:598:598 [0] misc/strongstream.cc:131 NCCL WARN Cuda failure 'out of memory'
[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9
[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank1]: Last error:
[rank1]: Cuda failure 'out of memory'
"""
    ev = parse_text(text)
    assert first_failing_rank(ev) == 1
    assert row(rank_table(ev), 0).victim


def test_deepspeed_last_spawned_local_rank_is_not_blamed():
    # nccl.md §4.4 / deepspeed.md §1.6: the cmd's --local_rank=3 is the last spawned rank
    text = """\
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438139
[2024-06-14 01:51:54,038] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'fix.py', '--local_rank=3'] exits with return code = 1
"""
    ev = parse_text(text)
    assert first_failing_rank(ev) is None
    assert rank_table(ev) == ()


def test_hang_laggard_is_first():
    # two ranks time out (nccl.md §3.3 measured lines for rank 0; rank 1's copy shows a lower
    # "last enqueued work", i.e. it never issued collective 2: §5.2 step 4)
    text = """\
[rank0]:[E1202 15:09:46.188373665 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
[rank0]:[E1202 15:09:46.188708870 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 2 PG status: last enqueued work: 2, last completed work: 1
[rank1]:[E1202 15:09:47.188373665 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
[rank1]:[E1202 15:09:47.188708870 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 1]  failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 1, last completed work: 0
"""
    ev = parse_text(text)
    assert first_failing_rank(ev) == 1
    assert all(r.failed for r in rank_table(ev))


def test_hang_without_laggard_uses_time():
    # the measured rank-0 line, and a rank-1 copy stamped a second earlier but printed later
    text = """\
[rank0]:[E1202 15:09:46.188373665 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
[rank1]:[E1202 15:09:45.100000000 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
"""
    assert first_failing_rank(parse_text(text)) == 1


def test_host_oom_kill_attributed_by_pid():
    ev = parse_text(SIGKILL_RUN + "Out of memory: Killed process 1323 (python) total-vm:…kB, anon-rss:…kB\n")
    assert first_failing_rank(ev) == 1
    r1 = row(rank_table(ev), 1)
    assert r1.cause_hint == "killed by the host OOM killer"      # the stated cause, not the bare -9
    assert r1.exitcode == -9


# ------------------------------------------------------------- pure functions


def test_cuda_oom_in_evidence_ooms_is_local():
    ev = Evidence(
        ooms=(OomEvent(OomKind.CACHING_ALLOCATOR, SourceRef("r.log", 50, "torch.OutOfMemoryError: ..."), rank=2,
                       requested_bytes=20 * 2**20),),
        failures=(Failure(K.NCCL_REMOTE, SourceRef("r.log", 10, "NCCL WARN ... closed by remote peer"), rank=0),
                  Failure(K.NCCL_TIMEOUT, SourceRef("r.log", 11, "Watchdog caught ..."), rank=1, seq_num=5)),
        exits=(RankExit(SourceRef("r.log", 60, "exitcode  : -15 (pid: 7)"), -15, rank=3, pid=7),),
    )
    assert first_failing_rank(ev) == 2
    rows = rank_table(ev)
    assert [r.rank for r in rows] == [0, 1, 2, 3]
    assert row(rows, 2).cause_hint.startswith("CUDA out of memory (tried to allocate 20.00 MiB")
    assert [r.rank for r in rows if r.victim] == [0, 1, 3]


def test_exit_code_only_decides_when_nothing_else_does():
    # exit 1 of a rank whose only failure is a victim symptom stays a victim; a bare exit 1 is local
    ev = Evidence(
        failures=(Failure(K.NCCL_REMOTE, R, rank=0),),
        exits=(RankExit(R, 1, rank=0), RankExit(R, 1, rank=1, message="ValueError: bad shape")),
    )
    assert first_failing_rank(ev) == 1
    assert row(rank_table(ev), 0).victim and row(rank_table(ev), 0).exitcode == 1


def test_sigabrt_is_neutral_and_loses_to_sigkill():
    ev = Evidence(exits=(RankExit(SourceRef("a", 1, ""), -6, rank=0), RankExit(SourceRef("a", 2, ""), -9, rank=1)))
    assert first_failing_rank(ev) == 1
    ev2 = Evidence(exits=(RankExit(SourceRef("a", 1, ""), -6, rank=0), RankExit(SourceRef("a", 2, ""), -15, rank=1)))
    assert first_failing_rank(ev2) == 0


def test_peak_bytes_from_memory_readings():
    ev = Evidence(memory=(MemoryReading(R, rank=0, allocated=10, max_reserved=30),
                          MemoryReading(R, rank=0, max_allocated=50),
                          MemoryReading(R, rank=1, reserved=7),
                          MemoryReading(R, rank=None, reserved=10**12)))
    rows = rank_table(ev)
    assert [(r.rank, r.peak_bytes, r.failed) for r in rows] == [(0, 50, False), (1, 7, False)]
    assert first_failing_rank(ev) is None


def test_local_rank_only_exits_count_on_one_node():
    ev = Evidence(exits=(RankExit(R, -9, local_rank=1, pid=5),))
    assert first_failing_rank(ev) == 1
    from oompost.model import Fact
    multi = Evidence(exits=(RankExit(R, -9, local_rank=1, pid=5),), facts=(Fact("nnodes", 2, R),))
    assert first_failing_rank(multi) is None


def test_is_victim():
    assert is_victim(Failure(K.NCCL_REMOTE, R))
    assert is_victim(Failure(K.NCCL_TIMEOUT, R))
    assert is_victim(Failure(K.NCCL_HEARTBEAT, R))
    assert not is_victim(Failure(K.NCCL_CUDA_OOM, R))
    assert not is_victim(Failure(K.SIGKILL, R))
    assert not is_victim(Failure(K.DUPLICATE_GPU, R))
    # ncclSystemError: a victim only when what NCCL saw was a peer going away
    assert is_victim(Failure(K.NCCL_SYSTEM, R, last_error="socketProgress: Connection closed by remote peer x<1>"))
    assert not is_victim(Failure(K.NCCL_SYSTEM, R, message="ncclSystemError: System call (e.g. socket, malloc) "
                                 "or external library call failed or device error. It can be also caused by "
                                 "unexpected exit of a remote peer."))


def test_line_time_formats():
    # nccl.md §5.2 step 2: one clock for every format
    assert line_time("[2026-12-02 15:08:56] vm:516:516 [0] init.cc:904 NCCL WARN x") == (datetime(2026, 12, 2, 15, 8, 56), 1.0)
    t, res = line_time("[rank0]:[E1202 15:09:46.188373665 ProcessGroupNCCL.cpp:689] [Rank 0] x", year=2026)
    assert t == datetime(2026, 12, 2, 15, 9, 46, 188373) and res == 1e-6
    t, res = line_time("E1202 15:13:00.030000 1301 torch/distributed/elastic/multiprocessing/api.py:986] failed")
    assert (t.month, t.day, t.second, t.microsecond, res) == (12, 2, 0, 30000, 1e-6)
    assert line_time("2026-12-02_15:12:59") == (datetime(2026, 12, 2, 15, 12, 59), 1.0)
    t, res = line_time("[2024-06-14 01:51:54,038] [ERROR] [launch.py:325:sigkill_handler] x")
    assert t == datetime(2024, 6, 14, 1, 51, 54, 38000) and res == 1e-3
    assert line_time("1202 15:13:00.030000", year=2026)[0] == datetime(2026, 12, 2, 15, 13, 0, 30000)
    assert line_time("step 10 loss 2.3") is None
    assert line_time("I1399 99:99:99.1 x") is None


def test_year_of_c10_lines_taken_from_other_lines():
    # the c10 line (no year) would sort before a 2026 line if read as year 2000
    ev = Evidence(failures=(
        Failure(K.NCCL_CUDA_OOM, SourceRef("a", 2, "[2026-12-02 15:09:50] h:1:1 [0] x.cc:1 NCCL WARN Cuda failure"),
                rank=1),
        Failure(K.NCCL_CUDA_OOM, SourceRef("a", 3, "[rank0]:[E1202 15:09:51.0 ProcessGroupNCCL.cpp:1] y"), rank=0),
    ))
    assert first_failing_rank(ev) == 1


def test_real_capture_kernel_log_in_another_file():
    # sample_logs/host_oom_offload_cgroup: real capture; the OOM kill of pid 653 is in kernel.log, the
    # DeepSpeed spawn line naming pid 653 as local rank 0 in run.log
    from pathlib import Path

    from oompost.parsers import parse_paths

    d = Path(__file__).resolve().parents[1] / "sample_logs" / "host_oom_offload_cgroup"
    ev = parse_paths([str(d / "run.log"), str(d / "kernel.log")])
    (oom,) = [f for f in ev.failures if f.kind is K.HOST_OOM_KILL]
    assert oom.pid == 653 and oom.rank is None          # not attributable within kernel.log alone
    assert first_failing_rank(ev) == 0
    assert row(rank_table(ev), 0).cause_hint == "killed by the host OOM killer"


def test_real_capture_watchdog_timeout():
    # sample_logs/nccl_watchdog_timeout/run.log: real capture, torchrun, one rank, SIGABRT teardown
    from pathlib import Path

    from oompost.parsers import parse_paths

    d = Path(__file__).resolve().parents[1] / "sample_logs" / "nccl_watchdog_timeout"
    ev = parse_paths([str(p) for p in sorted(d.glob("*.log"))])
    (t,) = [f for f in ev.failures if f.kind is K.NCCL_TIMEOUT]
    assert (t.rank, t.seq_num, t.op_type, t.timeout_ms) == (0, 9, "ALLREDUCE", 15000)
    (e,) = ev.exits
    assert e.exitcode == -6 and e.rank == 0 and e.reported_root_cause
    r0 = row(rank_table(ev), 0)
    assert r0.first and r0.exitcode == -6
