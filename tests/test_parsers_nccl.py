"""NcclParser on real NCCL / ProcessGroupNCCL output.

Excerpts are verbatim from /work/shared/reference/nccl.md (measured runs on 1xH200, torch 2.11,
NCCL 2.28.9, and public bug reports it quotes); each test names its source.  Where a message
generation has no verbatim example there, the line is built from the NCCL/PyTorch format string the
reference quotes, and the comment says so.
"""

from __future__ import annotations

from oompost.model import FailureKind as K
from oompost.parsers import parse_text


def kinds(ev, kind):
    return [f for f in ev.failures if f.kind is kind]


def facts(ev, name):
    return [f.value for f in ev.facts if f.name == name]


# nccl.md §2.3, measured: NCCL init OOM with NCCL_DEBUG=WARN (torch 2.11, NCCL 2.28.9)
INIT_OOM_WARN = """\
OOM-probe rank0: hogged 142624 MiB, free now 5.1 MiB, reserved 142624 MiB
NCCL version 2.28.9+cuda13.0

[2026-12-02 15:09:14] vm:598:598 [0] misc/strongstream.cc:131 NCCL WARN Cuda failure 'out of memory'
[rank0]: Traceback (most recent call last):
[rank0]:   File "<site-packages>/torch/distributed/distributed_c10d.py", line 3068, in all_reduce
[rank0]:     work = group.allreduce([tensor], opts)
[rank0]:            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9
[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.
[rank0]: Last error:
[rank0]: Cuda failure 'out of memory'
"""


def test_init_oom_warn_and_distbackenderror_are_one_failure():
    ev = parse_text(INIT_OOM_WARN)
    fs = kinds(ev, K.NCCL_CUDA_OOM)
    assert len(fs) == 1, ev.failures
    f = fs[0]
    assert f.rank == 0                       # WARN line has no prefix: tied to rank 0 via "Last error:"
    assert (f.host, f.pid, f.device) == ("vm", 598, 0)
    assert f.site == "stream"                # misc/strongstream.cc = stream creation
    assert "strongstream.cc:131" in f.message
    assert f.nccl_result == "ncclUnhandledCudaError"
    assert f.last_error == "Cuda failure 'out of memory'"
    assert f.exception == "torch.distributed.DistBackendError"
    assert f.stack.frames and f.stack.frames[-1].name == "all_reduce"
    assert f.ref.line == 4                   # the earliest line (it carries NCCL's timestamp)
    assert len(ev.failures) == 1
    assert facts(ev, "nccl.version") == ["2.28.9"]
    assert facts(ev, "nccl.cuda_version") == ["13.0"]


def test_init_oom_with_nccl_debug_unset_still_found():
    # nccl.md §2.3: "With NCCL_DEBUG unset, the DistBackendError text was identical ... Only the NCCL
    # WARN line was missing."
    text = "\n".join(l for l in INIT_OOM_WARN.splitlines() if "NCCL WARN" not in l and "NCCL version 2.28.9+" not in l)
    ev = parse_text(text)
    fs = kinds(ev, K.NCCL_CUDA_OOM)
    assert len(fs) == 1
    assert fs[0].rank == 0 and fs[0].pid is None and fs[0].site is None
    assert facts(ev, "nccl.version") == ["2.28.9"]   # PyTorch's ", NCCL version 2.28.9"


# nccl.md §6.1, NVIDIA/nccl#1235 (public issue, NCCL WARN lines of two processes interleaved)
NCCL_1235 = """\
ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'
ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes
ng30903:3063028:3066152 [3] NCCL INFO transport/p2p.cc:204 -> 1
ng30903:3063028:3066152 [3] proxy.cc:1519 NCCL WARN [Proxy Service 3] Failed to execute operation Set…
ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer ng30903-ib…
"""


def test_nccl1235_calloc_failure_and_peer_close_are_separate_processes():
    ev = parse_text(NCCL_1235)
    oom = kinds(ev, K.NCCL_CUDA_OOM)
    assert len(oom) == 1                     # "Cuda failure" + "Failed to CUDA calloc" = one allocation
    assert oom[0].bytes == 6291456 and oom[0].site == "buffer"
    assert oom[0].pid == 3063028 and oom[0].device == 3
    assert oom[0].rank == 3                  # one host, one distinct [dev] per process: dev as rank
    remote = [f for f in kinds(ev, K.NCCL_REMOTE) if f.pid == 3063025]
    assert len(remote) == 1 and remote[0].rank == 0
    assert remote[0].peer == "ng30903-ib…"
    assert not [f for f in ev.failures if f.kind is K.NCCL_CUDA_OOM and f.pid == 3063025]


def test_device_is_not_used_as_rank_when_every_process_shows_dev0():
    # nccl.md §1.1: "With one GPU per process it is usually [0] for every rank." Lines: the measured
    # duplicate-GPU excerpt (two processes, pids 516 and 558, both [0]).
    text = """\
[2026-12-02 15:08:56] vm:516:516 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60
vm:558:558 [0] NCCL INFO init.cc:1582 -> 5
vm:558:558 [0] NCCL INFO group.cc:76 -> 5 [Async thread]
"""
    ev = parse_text(text)
    dup = kinds(ev, K.DUPLICATE_GPU)
    assert len(dup) == 1
    assert dup[0].rank is None               # no prefix, no Init map, dev 0 is not a rank
    assert dup[0].nccl_result == "ncclInvalidUsage"


# nccl.md §1.1 (measured) + §3.2 (measured ncclInvalidUsage block)
DUPLICATE = """\
[2026-12-02 15:08:56] vm:516:516 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60
vm:558:558 [0] NCCL INFO init.cc:1582 -> 5
vm:558:558 [0] NCCL INFO group.cc:76 -> 5 [Async thread]
[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9
[rank0]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
[rank0]: Last error:
[rank0]: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60
"""


def test_duplicate_gpu_warn_and_block_merge_into_rank0():
    ev = parse_text(DUPLICATE)
    dup = kinds(ev, K.DUPLICATE_GPU)
    assert len(dup) == 1
    assert dup[0].rank == 0 and dup[0].pid == 516
    assert dup[0].nccl_result == "ncclInvalidUsage"
    assert not kinds(ev, K.NCCL_INVALID_USAGE)


# nccl.md §2 / §6.2, sglang-project/sglang#1116 (public issue): no rank prefixes at all
SGLANG_1116 = """\
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:76, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Failed to CUDA calloc 67108864 bytes
"""


def test_sglang1116_last_error_calloc_bytes():
    ev = parse_text(SGLANG_1116)
    fs = kinds(ev, K.NCCL_CUDA_OOM)
    assert len(fs) == 1
    assert fs[0].bytes == 67108864 and fs[0].rank is None
    assert fs[0].last_error == "Failed to CUDA calloc 67108864 bytes"
    assert fs[0].site == "buffer"
    assert facts(ev, "nccl.version") == ["2.20.5"]


def test_rank_hint_from_file_name_attributes_unprefixed_block():
    ev = parse_text(SGLANG_1116, name="worker_rank2.log")
    assert [f.rank for f in kinds(ev, K.NCCL_CUDA_OOM)] == [2]


# nccl.md §1.1 (older-style WARN, public NCCL 2.20.5 log) and §3.2 (the watchdog's ncclRemoteError of
# the same log: same peer): C++ continuation lines carry no [rank1]: prefix
REMOTE_2_20 = """\
gpu-node2:2985003:2985024 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>
gpu-node2:2985003:2985024 [0] NCCL INFO misc/socket.cc:752 -> 6
gpu-node2:2985003:2985024 [0] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]
gpu-node2:2985003:2985016 [0] NCCL INFO comm 0x8e01d00 rank 1 nranks 2 cudaDev 0 busId 100000 - Abort COMPLETE
[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 1] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5
ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
Last error:
socketProgress: Connection closed by remote peer gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>
"""


def test_watchdog_remote_error_with_unprefixed_continuation():
    ev = parse_text(REMOTE_2_20)
    fs = kinds(ev, K.NCCL_REMOTE)
    assert len(fs) == 1, fs
    f = fs[0]
    assert f.rank == 1 and f.pid == 2985003 and f.host == "gpu-node2"
    assert f.nccl_result == "ncclRemoteError"
    assert f.peer == "gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>"
    assert f.last_error.startswith("socketProgress: Connection closed")
    assert f.ref.line == 1
    assert not facts(ev, "nccl.rank_map")     # "Abort COMPLETE" is not an Init line


# nccl.md §3.3, measured watchdog timeout (torch 2.11): the timeout is printed three times
WATCHDOG_2_11 = """\
[rank0]:[E1202 15:09:46.188373665 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
[rank0]:[E1202 15:09:46.188708870 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 2 PG status: last enqueued work: 2, last completed work: 1
[rank0]:[E1202 15:09:50.173571941 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective:
#0 all_reduce from <site-packages>/torch/distributed/distributed_c10d.py:3068
#1 wrapper from <site-packages>/torch/distributed/c10d_logger.py:83
#2 main from probe.py:61
[rank0]:[E1202 15:09:50.173699035 ProcessGroupNCCL.cpp:2636] [PG ID 0 PG GUID 0(default_pg) Rank 0] First PG on this rank to signal dumping.
[rank0]:[E1202 15:09:51.875062425 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 2, last completed NCCL work: 1.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.
[rank0]:[E1202 15:09:51.875311100 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1, only active collectives: 0
[rank0]:[E1202 15:10:51.699015168 ProcessGroupNCCL.cpp:750] [Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[rank0]:[E1202 15:10:51.699061691 ProcessGroupNCCL.cpp:764] [Rank 0] To avoid data inconsistency, we are taking the entire process down.
[rank0]:[E1202 15:10:51.700195260 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:692 (most recent call first):
frame #0: c10::Error::Error(...) ...
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=10000) ran for 10068 milliseconds before timing out.
Fatal Python error: Aborted
"""


def test_watchdog_timeout_printed_three_times_is_one_failure():
    # the what(): line (no [rank0]: prefix) is the full text the measured run printed; nccl.md
    # abbreviates it with "..." after "timeout:"
    ev = parse_text(WATCHDOG_2_11)
    fs = kinds(ev, K.NCCL_TIMEOUT)
    assert len(fs) == 1, fs
    f = fs[0]
    assert (f.rank, f.seq_num, f.op_type, f.timeout_ms) == (0, 2, "ALLREDUCE", 10000)
    assert f.ref.line == 1
    assert facts(ev, "nccl.work_status") == [{"rank": 0, "pg": "0", "last_enqueued": 2, "last_completed": 1}]
    assert len(ev.failures) == 1


def test_old_watchdog_generations():
    # nccl.md §3.3 "Older wording of the same event, from public logs"
    text = """\
[E ProcessGroupNCCL.cpp:474] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1800000) ran for 1800646 milliseconds before timing out.
[PG 0 Rank 2] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: …
[PG ID 1 PG GUID 1 Rank 1]  failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 547, last completed work: -1
"""
    ev = parse_text(text)
    t = sorted((f.rank, f.seq_num, f.timeout_ms) for f in kinds(ev, K.NCCL_TIMEOUT))
    assert t == [(0, 1, 1800000), (2, 1, None)]   # ≤2.1: [Rank 0] of the default PG is the rank
    # "[PG ID 1 ... Rank 1]" is a rank inside process group 1, not a global rank
    assert facts(ev, "nccl.work_status") == [{"rank": None, "pg": "1", "last_enqueued": 547, "last_completed": -1}]


def test_rank_prefixed_c10_timeout_lines_of_two_ranks():
    # ≈torch 2.2-2.4 form "[rank2]:[E ProcessGroupNCCL.cpp:523] ..." (nccl.md §3.1), with the ≤2.1
    # message text; two ranks interleaved
    text = """\
[rank2]:[E ProcessGroupNCCL.cpp:523] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1800000) ran for 1800646 milliseconds before timing out.
[rank3]:[E ProcessGroupNCCL.cpp:523] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1800000) ran for 1800646 milliseconds before timing out.
[rank2]:[E ProcessGroupNCCL.cpp:523] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=2, NumelOut=2, Timeout(ms)=1800000) ran for 1800646 milliseconds before timing out.
"""
    ev = parse_text(text)
    assert sorted(f.rank for f in kinds(ev, K.NCCL_TIMEOUT)) == [2, 3]


def test_heartbeat_monitor():
    # nccl.md §3.4, public log
    text = """\
[Rank 3] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone behaviors.If you suspect the watchdog is not actually stuck and a longer timeout would help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of aforementioned helps, feel free to file an issue to PyTorch about the short timeout or false positive abort; otherwise, please attempt to debug the hang.
[rank2]:[F1229 20:37:13.091528310 ProcessGroupNCCL.cpp:1306] [PG ID 0 PG GUID 0(default_pg) Rank 2] [PG ID 0 PG GUID 0(default_pg) Rank 2] Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.
"""
    ev = parse_text(text)
    hb = {f.rank: f for f in kinds(ev, K.NCCL_HEARTBEAT)}
    assert set(hb) == {2, 3}
    assert hb[3].timeout_ms == 480_000


def test_interleaved_blocks_of_two_ranks_keep_their_own_enum():
    # the measured OOM block (§2.3) and the measured invalid-usage block (§3.2, re-prefixed as rank 1),
    # interleaved line by line as two processes writing to one terminal do
    a = INIT_OOM_WARN.splitlines()[8:]
    b = [l.replace("[rank0]", "[rank1]") for l in DUPLICATE.splitlines()[3:]]
    text = "\n".join(x for pair in zip(a, b) for x in pair) + "\n"
    ev = parse_text(text)
    by_rank = {f.rank: f for f in ev.failures}
    assert set(by_rank) == {0, 1}
    assert by_rank[0].kind is K.NCCL_CUDA_OOM and by_rank[0].last_error == "Cuda failure 'out of memory'"
    assert by_rank[1].kind is K.DUPLICATE_GPU and by_rank[1].nccl_result == "ncclInvalidUsage"


# nccl.md §1.1, measured INFO lines (NCCL_DEBUG=INFO)
INFO = """\
vm:466:466 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:466:466 [0] NCCL INFO ncclCommInitRankConfig comm 0x34805750 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0xb3934ecf1627daf6 - Init START
vm:466:466 [0] NCCL INFO channel.cc:42 Cuda Alloc Size 608 pointer 0x7f8ded400000
vm:466:466 [0] NCCL INFO 64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, 64 p2p channels per peer
vm:466:466 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 0.40 (kernels 0.37, alloc 0.00, bootstrap 0.00, allgathers 0.00, topo 0.00, graphs 0.00, connections 0.02, rest 0.00)
"""


def test_info_lines_give_version_init_map_and_channels():
    ev = parse_text(INFO)
    assert facts(ev, "nccl.version") == ["2.28.9"]
    assert facts(ev, "nccl.communicators") == [1]
    assert facts(ev, "nccl.nranks") == [1]
    assert facts(ev, "nccl.rank_map") == [{"vm:466": 0}]
    assert facts(ev, "nccl.channels") == [{"coll": 64, "collnet": 64, "nvls": 0, "p2p": 64, "p2p_peer": 64}]
    assert not ev.failures


def test_communicator_count_and_init_map_resolve_warn_rank():
    # Init START lines in the measured format (§1.1) for 3 communicators of one process and one of
    # another; the WARN is the §6.8 TensorRT-LLM#1670 text re-hosted on pid 467
    text = """\
vm:466:466 [0] NCCL INFO ncclCommInitRankConfig comm 0x34805750 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xb3934ecf1627daf6 - Init START
vm:466:466 [0] NCCL INFO ncclCommInitRankConfig comm 0x34805750 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0xb3934ecf1627daf6 - Init COMPLETE
vm:466:466 [0] NCCL INFO ncclCommInitRankConfig comm 0x44805750 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0xc3934ecf1627daf6 - Init COMPLETE
vm:466:466 [0] NCCL INFO ncclCommInitRankConfig comm 0x54805750 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0xd3934ecf1627daf6 - Init COMPLETE
vm:467:467 [0] NCCL INFO ncclCommInitRankConfig comm 0x64805750 rank 1 nranks 2 cudaDev 0 nvmlDev 1 busId 70 commId 0xb3934ecf1627daf6 - Init COMPLETE
vm:467:494 [0] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'
"""
    ev = parse_text(text)
    assert facts(ev, "nccl.communicators") == [3]
    assert facts(ev, "nccl.nranks") == [2]
    assert facts(ev, "nccl.rank_map") == [{"vm:466": 0, "vm:467": 1}]
    (f,) = kinds(ev, K.NCCL_CUDA_OOM)
    assert f.rank == 1 and f.site == "launch"


def test_tensorrt_llm_1670_enqueue_oom():
    # nccl.md §6.8, NVIDIA/TensorRT-LLM#1670 (public), repeated on 8xV100
    line = "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n"
    ev = parse_text(line * 3)
    fs = kinds(ev, K.NCCL_CUDA_OOM)
    assert len(fs) == 1                      # the same process repeating itself
    assert fs[0].site == "launch" and fs[0].pid == 392 and fs[0].rank is None


def test_nccl_2_30_func_field_and_driver_api_code():
    # NCCL 2.30 WARN format "[%d] %s:%d (%s) NCCL WARN %s" and the CUCHECK text "Cuda failure %d '%s'"
    # (nccl.md §1.1, §1.3); file/line/func values from the §6.1 excerpt
    text = """\
[2026-12-02 15:09:14] ng30903:3063028:3066152 [3] include/alloc.h:178 (ncclCuMemAlloc) NCCL WARN Cuda failure 2 'out of memory'
[2026-12-02 15:09:14] ng30903:3063028:3066152 [3] include/alloc.h:185 (ncclCudaCallocDebug) NCCL WARN Failed to CUDA calloc async 10485760 bytes
"""
    ev = parse_text(text)
    (f,) = ev.failures
    assert f.kind is K.NCCL_CUDA_OOM and f.bytes == 10485760 and f.site == "buffer"


def test_host_alloc_is_host_memory_not_gpu():
    # "Failed to CUDA host alloc %ld bytes" (nccl.md §1.3 table, src/include/alloc.h format string)
    text = "node1:100:101 [0] include/alloc.h:90 NCCL WARN Failed to CUDA host alloc 9633792 bytes\n"
    ev = parse_text(text)
    (f,) = ev.failures
    assert f.kind is K.NCCL_HOST_ALLOC and f.bytes == 9633792 and f.site == "host"
    assert not kinds(ev, K.NCCL_CUDA_OOM)


def test_shm_segment_error_is_shm():
    # "Error while creating shared memory segment /dev/shm/nccl-… (size …)" (nccl.md §6 counter-examples,
    # NVIDIA/nccl#1683); the WARN prefix is the ≤2.29 format
    text = ("node1:100:101 [0] include/shm.cc:94 NCCL WARN Error while creating shared memory segment "
            "/dev/shm/nccl-… (size …)\n")
    ev = parse_text(text)
    (f,) = ev.failures
    assert f.kind is K.SHM


def test_nvls_bind_failure_merges_with_its_cuda_failure():
    # nccl.md §1.3 (transport/nvls.cc format string) and §6 ("Cuda failure 401 'the operation cannot be
    # performed in the present state'" / "Failed to bind NVLink SHARP (NVLS) Multicast memory")
    text = """\
node1:100:101 [0] transport/nvls.cc:120 NCCL WARN Cuda failure 401 'the operation cannot be performed in the present state'
node1:100:101 [0] transport/nvls.cc:121 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1610612736 : CUDA error 401 'the operation cannot be performed in the present state'.
"""
    ev = parse_text(text)
    (f,) = ev.failures
    assert f.kind is K.NCCL_NVLS and f.bytes == 1610612736
    assert not kinds(ev, K.NCCL_CUDA_OOM)


def test_ib_completion_error_is_remote():
    # NCCL 2.28 format string (nccl.md §1.3): "NET/IB: Got completion from peer %s with
    # status=%s(%d) opcode=%s(%d) reqSize=%d vendor_err=%u req_type=%s…hca %s"; status 12 = retry exceeded
    text = ("[2026-12-02 15:08:56] node2:200:230 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB: Got completion "
            "from peer 10.0.0.1<51234> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=4096 "
            "vendor_err=129 req_type=Send localGid ::ffff:10.0.0.2 remoteGids::ffff:10.0.0.1 hca mlx5_0\n")
    ev = parse_text(text)
    (f,) = ev.failures
    assert f.kind is K.NCCL_REMOTE and f.peer == "10.0.0.1<51234>"


def test_nvls_size_and_env_facts():
    # INFO format strings quoted in nccl.md §2.1 ("NVLS comm %p headRank %d nHeads %d ... nvlsTotalSize
    # %zu") and NCCL's "%s set by environment to %s"; values = the ≥2.23 8-GPU figures of §2.1
    text = """\
vm:466:466 [0] NCCL INFO NVLS comm 0x34805750 headRank 0 nHeads 8 nvlsRanks 8 buffSize 1048576 memSize 2097152 nvlsPerRankSize 33554432 nvlsTotalSize 268435456
vm:466:466 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0
"""
    ev = parse_text(text)
    assert facts(ev, "nccl.nvls_total_bytes") == [268435456]
    assert facts(ev, "nccl.env.NCCL_NVLS_ENABLE") == ["0"]


def test_torchrun_reprinted_error_file_traceback_is_deduped():
    # nccl.md §2.3: "torchrun reports exitcode: 1 with an error_file whose traceback is the
    # DistBackendError".  Block laid out by torch's _FAILURE_FORMAT_TEMPLATE (§4.2), traceback lines
    # indented as torch's .replace("\n", "\n  ") does; the error text is the measured one.
    cfe = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
probe.py FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_15:09:14
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 598)
  error_file: /tmp/torchelastic_XXXX/none_XXXX/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "<site-packages>/torch/distributed/distributed_c10d.py", line 3068, in all_reduce
      work = group.allreduce([tensor], opts)
  torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9
  ncclUnhandledCudaError: Call to CUDA function failed.
  Last error:
  Cuda failure 'out of memory'
======================================================
"""
    ev_cfe_only = parse_text(cfe)
    (f,) = kinds(ev_cfe_only, K.NCCL_CUDA_OOM)
    assert f.rank == 0                       # from the entry's "rank : 0 (local_rank: 0)"
    ev = parse_text(INIT_OOM_WARN + cfe)
    assert len(kinds(ev, K.NCCL_CUDA_OOM)) == 1


def test_old_style_nccl_error_code():
    # "Older torch/CuPy print `NCCL Error 1: unhandled cuda error`" (nccl.md §3.2)
    ev = parse_text("RuntimeError: NCCL Error 1: unhandled cuda error\n")
    (f,) = ev.failures
    assert f.nccl_result == "ncclUnhandledCudaError" and f.kind is K.NCCL_OTHER
    assert f.exception == "RuntimeError"


def test_irrelevant_lines_produce_nothing():
    text = ("step 10 loss 2.31\n"
            "vm:466:466 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
            "vm:466:466 [0] NCCL INFO init.cc:1582 -> 5\n"
            "Watch out: nothing here\n") * 50
    ev = parse_text(text)
    assert not ev.failures and not [f for f in ev.facts if f.name.startswith("nccl")]


# vLLM's pynccl wrapper raises ncclGetErrorString()'s text without PyTorch's ", NCCL version" tail:
# https://github.com/vllm-project/vllm/issues/6201 (tests/corpus/vllm-project__vllm__6201); the same log
# opens with vLLM's advice "If you are running out of memory, consider decreasing ...", which is no OOM
VLLM_PYNCCL = ("(VllmWorkerProcess pid=116058) INFO 07-08 13:05:31 model_runner.py:928] CUDA graphs can take "
               "additional 1~3 GiB memory per GPU. If you are running out of memory, consider decreasing "
               "`gpu_memory_utilization` or enforcing eager mode. You can also reduce the `max_num_seqs` as needed "
               "to decrease memory usage.\n"
               "(VllmWorkerProcess pid=116058) ERROR 07-08 13:05:36 multiproc_worker_utils.py:226] Exception in "
               "worker VllmWorkerProcess while processing method initialize_cache: NCCL error: invalid usage (run "
               "with NCCL_DEBUG=WARN for details), Traceback (most recent call last):\n")


def test_pynccl_error_text_names_the_nccl_result_and_advice_is_no_oom():
    from oompost.model import FailureKind
    from oompost.parsers import parse_text

    ev = parse_text(VLLM_PYNCCL)
    assert not ev.ooms
    assert [f.kind for f in ev.failures] == [FailureKind.NCCL_INVALID_USAGE]


# the same thread's NCCL WARN lines, one per worker process: the warning names why the pynccl call failed
_WARN = ("hostname:{pid}:{pid} [{dev}] misc/strongstream.cc:53 NCCL WARN NCCL cannot be captured in a graph if either "
         "it wasn't built with CUDA runtime >= 11.3 or if the installed CUDA driver < R465.\n")
_PYNCCL_ERROR = VLLM_PYNCCL.splitlines(keepends=True)[1]


def test_pynccl_error_carries_the_warning_of_its_own_process():
    from oompost.parsers import parse_text

    # the thread's order: worker 116024's WARN, worker 116058's WARN, then 116058's error
    (f,) = parse_text(_WARN.format(pid=116024, dev=0) + _WARN.format(pid=116058, dev=1) + _PYNCCL_ERROR).failures
    assert f.last_error.startswith("NCCL cannot be captured in a graph") and f.last_error_ref.line == 2
    # the two WARN lines swapped (an order arranged here): still the failing process's own warning
    (f,) = parse_text(_WARN.format(pid=116058, dev=1) + _WARN.format(pid=116024, dev=0) + _PYNCCL_ERROR).failures
    assert f.last_error_ref.line == 1


def test_the_nccl_verdict_cites_the_warning():
    from oompost.parsers import parse_text
    from oompost.pipeline import report_from_evidence

    r = report_from_evidence(parse_text(_WARN.format(pid=116058, dev=1) + _PYNCCL_ERROR))
    assert r.cause == "nccl_error"
    assert "cannot be captured in a graph" in r.primary.detail
    assert [e.line for e in r.primary.evidence] == [2, 1]


def test_a_vendor_nccls_warn_return_chain_and_horovods_failed_call_are_nccl_failures():
    # https://github.com/OpenRLHF/OpenRLHF/issues/795 (Alibaba's ACCL, under Ray's actor prefix) and
    # https://github.com/horovod/horovod/issues/108 ("ncclCommInitRank failed: unhandled cuda error")
    ev = parse_text("(ActorModelRayActor pid=16101) [dlc1f0bnd3uip696-master-0][16101:16101][0][init.cc:2103] "
                    "NCCL WARN init.cc:2103 -> 3\n")
    assert any(f.kind.value.startswith("nccl_") for f in ev.failures)
    ev = parse_text("UnknownError (see above for traceback): ncclCommInitRank failed: unhandled cuda error\n")
    assert kinds(ev, K.NCCL_OTHER)


def test_a_torch_without_nccl_is_a_setup_error():
    # https://github.com/open-mmlab/mmsegmentation/issues/1787 (the NCCL backend on Windows)
    ev = parse_text("RuntimeError: Distributed package doesn't have NCCL built in\n")
    assert kinds(ev, K.CONFIG_VALIDATION) and not kinds(ev, K.NCCL_SYSTEM)
