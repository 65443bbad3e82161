"""LauncherParser on real torchrun / DeepSpeed / mp.spawn / Slurm / kernel output.

Excerpts are verbatim from /work/shared/reference/nccl.md (§4: measured torchrun runs on torch 2.11,
public logs), deepspeed.md (§1.6 launcher lines, §4 issues) and pytorch.md (§3.6 host OOM texts);
each test names its source.  Where the reference elides a value ("…", "<node>", "NNN") a concrete
one is filled in and the comment says so.
"""

from __future__ import annotations

from oompost.model import FailureKind as K
from oompost.parsers import parse_text


def kinds(ev, kind):
    return [f for f in ev.failures if f.kind is kind]


def facts(ev, name):
    return [f.value for f in ev.facts if f.name == name]


from excerpts import SIGKILL_RUN  # noqa: E402


def test_sigkill_run_one_exit_per_process():
    ev = parse_text(SIGKILL_RUN)
    assert len(ev.exits) == 2                # glog "failed" + ChildFailedError entry = one exit
    by_pid = {e.pid: e for e in ev.exits}
    k = by_pid[1323]
    assert (k.exitcode, k.rank, k.local_rank, k.host) == (-9, 1, 1, "localhost")
    assert k.reported_root_cause and not k.killed_by_launcher
    assert k.time == "2026-12-02_15:12:59"
    assert k.error_file is None and k.message == "Signal 9 (SIGKILL) received by PID 1323"
    assert k.launcher == "torchrun"
    t = by_pid[1322]
    assert (t.exitcode, t.rank) == (-15, 0)
    assert t.killed_by_launcher and not t.reported_root_cause     # "Sending process 1322 closing signal"
    sk = kinds(ev, K.SIGKILL)
    assert [(f.rank, f.pid) for f in sk] == [(1, 1323)]            # the survivor's SIGTERM is not a SIGKILL
    assert facts(ev, "launcher") == ["torchrun"]


def test_agent_lines_alone_without_summary():
    ev = parse_text("\n".join(SIGKILL_RUN.splitlines()[:2]) + "\n")
    by_pid = {e.pid: e for e in ev.exits}
    assert by_pid[1323].exitcode == -9 and by_pid[1323].local_rank == 1 and by_pid[1323].rank is None
    assert by_pid[1323].time == "1202 15:13:00.030000"
    assert by_pid[1322].killed_by_launcher and by_pid[1322].exitcode == -15
    # single node assumed (no host evidence): the SIGKILL failure is given the local rank
    assert [(f.rank, f.pid) for f in kinds(ev, K.SIGKILL)] == [(1, 1323)]


def test_old_stdlib_logger_form():
    # nccl.md §4.1 "Older torch used the stdlib format"; the source elides pid and binary ("…"): 4242
    # and /usr/bin/python filled in
    text = """\
WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 123 closing signal SIGTERM
ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 4242) of binary: /usr/bin/python
"""
    ev = parse_text(text)
    by_pid = {e.pid: e for e in ev.exits}
    assert by_pid[4242].exitcode == -9 and by_pid[4242].local_rank == 0
    assert by_pid[123].killed_by_launcher


def test_survivor_forced_sigkill_is_not_a_culprit():
    # torch elastic api.py _close(): "Unable to shutdown process %s via %s, forcefully exiting via %s"
    # after the measured "Sending process 1322 closing signal SIGTERM" (nccl.md §4.1)
    text = """\
W1202 15:12:59.833000 1301 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 1322 closing signal SIGTERM
W1202 15:13:29.840000 1301 torch/distributed/elastic/multiprocessing/api.py:1030] Unable to shutdown process 1322 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  time      : 2026-12-02_15:13:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 1322)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1322
======================================================
"""
    ev = parse_text(text)
    (e,) = ev.exits
    assert e.exitcode == -9 and e.killed_by_launcher
    assert not kinds(ev, K.SIGKILL)


# nccl.md §4.2, measured GPU OOM run (rank 1 ran torch.empty(400 GiB)); block laid out by the
# _FAILURE_FORMAT_TEMPLATE, the error-file traceback indented as torch does; "…" in the path and
# after the OOM text are the reference's elisions
GPU_OOM_CFE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
probe.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_15:14:02
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 1411)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1411
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_15:14:01
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 1412)
  error_file: …/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "probe.py", line 88, in main
      x = torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")
  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 138.77 GiB is free. Including non-PyTorch memory, this process has 518.00 MiB memory in use. …
======================================================
"""


def test_childfailederror_error_file_entry():
    ev = parse_text(GPU_OOM_CFE)
    by_rank = {e.rank: e for e in ev.exits}
    e = by_rank[1]
    assert e.exitcode == 1 and e.reported_root_cause
    assert e.error_file == "…/attempt_0/1/error.json"
    assert e.message.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB")
    assert e.traceback.splitlines()[0] == "Traceback (most recent call last):"
    assert 'File "probe.py", line 88, in main' in e.traceback
    assert by_rank[0].exitcode == -15 and not by_rank[0].reported_root_cause
    assert not kinds(ev, K.SIGKILL)


# deepspeed.md §1.6 / nccl.md §4.4: real DeepSpeed launcher lines (2024-06-14 log)
DS_EXIT = """\
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438139
[2024-06-14 01:51:54,038] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'fix.py', '--local_rank=3'] exits with return code = 1
"""


def test_deepspeed_local_rank_in_cmd_is_not_attributed():
    ev = parse_text(DS_EXIT)
    (e,) = ev.exits
    assert e.launcher == "deepspeed" and e.exitcode == 1
    assert e.rank is None and e.local_rank is None           # '--local_rank=3' is the LAST spawned rank
    assert e.time == "2024-06-14 01:51:54,038"
    assert facts(ev, "launcher.killed_pid") == [438139]
    assert not ev.failures


def test_deepspeed_minus9_and_launch_main_facts():
    # deepspeed.md §1.6 (launch.py::main lines, in order; NNN = line numbers elided there, filled in)
    # and §4.3 (DeepSpeed#4239: "exits with return code = -9" = host OOM from ZeRO-3 offload)
    text = """\
[2024-06-14 01:50:01,001] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}
[2024-06-14 01:50:01,001] [INFO] [launch.py:152:main] nnodes=1, num_local_procs=4, node_rank=0
[2024-06-14 01:50:01,001] [INFO] [launch.py:163:main] global_rank_mapping=defaultdict(<class 'list'>, {'localhost': [0, 1, 2, 3]})
[2024-06-14 01:50:01,001] [INFO] [launch.py:164:main] dist_world_size=4
[2024-06-14 01:50:01,001] [INFO] [launch.py:166:main] Setting CUDA_VISIBLE_DEVICES=0,1,2,3
[2024-06-14 01:50:01,002] [INFO] [launch.py:256:main] process 4459 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=0', ...]
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4459
[2024-06-14 01:51:54,038] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3', ...] exits with return code = -9
"""
    ev = parse_text(text)
    assert facts(ev, "world_size") == [4]
    assert facts(ev, "nnodes") == [1] and facts(ev, "num_local_procs") == [4] and facts(ev, "node_rank") == [0]
    assert facts(ev, "launcher.world_info") == [{"localhost": [0, 1, 2, 3]}]
    (e,) = ev.exits
    assert e.exitcode == -9 and e.rank is None
    (sk,) = kinds(ev, K.SIGKILL)
    assert sk.rank is None


def test_kernel_oom_kill_attributed_through_spawned_pid():
    # deepspeed.md §1.6 spawn line + the kernel text of nccl.md §4.3 ("Out of memory: Killed process
    # 12345 (python) total-vm:…kB, ..."), the pid set to the spawned one
    text = """\
[2024-06-14 01:50:01,001] [INFO] [launch.py:152:main] nnodes=1, num_local_procs=4, node_rank=0
[2024-06-14 01:50:01,002] [INFO] [launch.py:256:main] process 4459 spawned with command: ['/usr/bin/python', '-u', 'train.py', '--local_rank=2', ...]
Out of memory: Killed process 4459 (python) total-vm:…kB, anon-rss:…kB, file-rss:…kB, shmem-rss:…kB, UID:… pgtables:…kB oom_score_adj:0
"""
    ev = parse_text(text)
    (f,) = kinds(ev, K.HOST_OOM_KILL)
    assert f.pid == 4459 and f.rank == 2


def test_kernel_oom_killer_generations():
    # nccl.md §4.3: current kernel text, older "Kill process … score … or sacrifice child", cgroup form
    # (pids elided there: 12345 / 2001 / 2002 filled in)
    text = """\
[1234567.890123] Out of memory: Killed process 12345 (python) total-vm:…kB, anon-rss:…kB, file-rss:…kB, shmem-rss:…kB, UID:… pgtables:…kB oom_score_adj:0
Out of memory: Kill process 2001 (python) score 900 or sacrifice child
Memory cgroup out of memory: Killed process 2002 (pt_main_thread) total-vm:…kB
Out of memory: Killed process 12345 (python) total-vm:…kB, anon-rss:…kB, file-rss:…kB, shmem-rss:…kB, UID:… pgtables:…kB oom_score_adj:0
"""
    ev = parse_text(text)
    fs = kinds(ev, K.HOST_OOM_KILL)
    assert sorted(f.pid for f in fs) == [2001, 2002, 12345]
    assert "cgroup" in next(f for f in fs if f.pid == 2002).message
    assert all(f.killer is None for f in fs)         # the kernel's, not Ray's monitor


def test_kernel_pid_matches_torchrun_entry():
    ev = parse_text(SIGKILL_RUN + "Out of memory: Killed process 1323 (python) total-vm:…kB, anon-rss:…kB\n")
    (f,) = kinds(ev, K.HOST_OOM_KILL)
    assert f.rank == 1


def test_slurm_oom_kill_event():
    # pytorch.md §3.6, verbatim from the jdh4/out_of_memory README (<id> is the reference's)
    text = ("slurmstepd: error: Detected 1 oom-kill event(s) in step <id> cgroup. Some of your processes may "
            "have been killed by the cgroup out-of-memory handler.\n")
    ev = parse_text(text)
    (f,) = kinds(ev, K.HOST_OOM_KILL)
    assert "1 oom-kill" in f.message


def test_srun_task_exits_are_ranks_only_without_torchrun():
    # nccl.md §4.3 "srun: error: <node>: task N: Exited with exit code 1" (node and N filled in); a
    # task range, and exit code 137 (= 128 + SIGKILL)
    text = """\
srun: error: gpu-node07: task 3: Exited with exit code 1
srun: error: gpu-node07: tasks 0-1: Exited with exit code 137
"""
    ev = parse_text(text)
    got = sorted((e.rank, e.exitcode, e.host) for e in ev.exits)
    assert got == [(0, 137, "gpu-node07"), (1, 137, "gpu-node07"), (3, 1, "gpu-node07")]
    assert sorted(f.rank for f in kinds(ev, K.SIGKILL)) == [0, 1]
    # under torchrun, a Slurm task is a node's agent, not a rank
    ev2 = parse_text(SIGKILL_RUN + text)
    assert {e.rank for e in ev2.exits if e.launcher == "slurm"} == {None}


def test_mp_spawn_signal_and_raised_error():
    # nccl.md §4.3 table (torch.multiprocessing.spawn rows)
    text = """\
torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL
"""
    ev = parse_text(text)
    (e,) = ev.exits
    assert (e.launcher, e.local_rank, e.exitcode) == ("mp.spawn", 1, -9)
    assert len(kinds(ev, K.SIGKILL)) == 1
    # ProcessRaisedException: the child's traceback follows; the exception line is kept
    text2 = """\
torch.multiprocessing.spawn.ProcessRaisedException: 

-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "probe.py", line 88, in main
    x = torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 138.77 GiB is free.
"""
    ev2 = parse_text(text2)
    (e2,) = ev2.exits
    assert e2.exitcode == 1 and e2.local_rank == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in e2.message
    assert not kinds(ev2, K.SIGKILL)


def test_bare_killed_takes_rank_from_file_name():
    # nccl.md §4.3 "a bash wrapper may print `Killed`"; pytorch.md §3.6
    ev = parse_text("step 41 loss 1.92\nKilled\n", name="train_rank2.log")
    (f,) = kinds(ev, K.KILLED)
    assert f.rank == 2
    # a word inside a sentence is not the shell's message
    assert not kinds(parse_text("Killed workers will be restarted\n"), K.KILLED)


def test_shell_job_killed_and_bus_error():
    # bash's job-status lines ("./run.sh: line N: PID Killed  CMD", "... Bus error (core dumped) ...")
    text = """\
./run.sh: line 12: 31337 Killed                  python train.py --deepspeed ds.json
./run.sh: line 14: 31338 Bus error               (core dumped) python train.py
"""
    ev = parse_text(text)
    assert [f.pid for f in kinds(ev, K.KILLED)] == [31337]
    assert [f.pid for f in kinds(ev, K.SHM)] == [31338]


def test_dataloader_shared_memory_errors():
    # PyTorch DataLoader texts (torch/csrc/DataLoader.cpp / torch/utils/data/dataloader.py)
    text = """\
[rank0]: ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
[rank0]: RuntimeError: DataLoader worker (pid 1234) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit.
[rank1]: RuntimeError: DataLoader worker (pid 1240) is killed by signal: Killed.
"""
    ev = parse_text(text)
    shm = kinds(ev, K.SHM)
    assert [f.rank for f in shm] == [0]                       # one per rank
    assert [f.rank for f in kinds(ev, K.KILLED)] == [1]


def test_nccl_shm_segment_is_left_to_the_nccl_parser():
    text = ("node1:100:101 [0] include/shm.cc:94 NCCL WARN Error while creating shared memory segment "
            "/dev/shm/nccl-… (size …)\n")
    ev = parse_text(text)
    assert len(kinds(ev, K.SHM)) == 1


def test_exit_status_137_generic():
    # subprocess.CalledProcessError text of an accelerate/torchrun wrapper; k8s OOMKilled
    text = """\
subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit status 137.
"""
    ev = parse_text(text)
    (e,) = ev.exits
    assert e.exitcode == 137 and e.launcher == "shell"
    assert len(kinds(ev, K.SIGKILL)) == 1
    assert kinds(parse_text("Last State: Terminated  Reason: OOMKilled  Exit Code: 137\n"), K.HOST_OOM_KILL)


def test_torchrun_launch_config_facts():
    # torch.distributed.launcher.api "Starting elastic_operator with launch configs:" (torch 1.10-2.0
    # INFO print) and the elastic agent's rendezvous result
    text = """\
INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:
  entrypoint       : train.py
  min_nodes        : 1
  max_nodes        : 1
  nproc_per_node   : 8
  run_id           : none
  group_world_size=1
  global_world_sizes=[8, 8, 8, 8, 8, 8, 8, 8]
"""
    ev = parse_text(text)
    assert facts(ev, "nproc_per_node") == [8]
    assert facts(ev, "world_size") == [8]
    assert facts(ev, "nnodes") == [1]


def test_slurm_cancel_reason_fact():
    text = "slurmstepd: error: *** STEP 123456.0 ON gpu-node07 CANCELLED AT 2024-06-14T01:51:54 DUE TO TIME LIMIT ***\n"
    assert facts(parse_text(text), "slurm.cancelled") == ["TIME LIMIT"]


def test_irrelevant_lines_produce_nothing():
    text = ("epoch 1 step 10 loss 2.31 lr 1e-4 will still fill\n"
            "Saving checkpoint to out/checkpoint-137\n") * 50
    ev = parse_text(text)
    assert not ev.exits and not ev.failures and not [f for f in ev.facts if not f.name.startswith("cue.")]


# sample_logs/host_oom_offload_cgroup/run.log: a real capture (H200, torch 2.11, DeepSpeed 0.19.8,
# cgroup-limited host RAM, ZeRO-2 optimizer offload); the long command lists are cut at "..."
DS_REAL = """\
[2026-12-02 17:02:06,939] [INFO] [launch.py:145:main] 0 NCCL_NVLS_ENABLE=0
[2026-12-02 17:02:06,939] [INFO] [launch.py:145:main] 0 NV_LIBNCCL_PACKAGE_NAME=libnccl2
[2026-12-02 17:02:06,939] [INFO] [launch.py:152:main] WORLD INFO DICT: {'localhost': [0]}
[2026-12-02 17:02:06,939] [INFO] [launch.py:158:main] nnodes=1, num_local_procs=1, node_rank=0
[2026-12-02 17:02:06,939] [INFO] [launch.py:170:main] dist_world_size=1
[2026-12-02 17:02:06,940] [INFO] [launch.py:245:main] process 653 spawned with command: ['/opt/torch/.venv/bin/python3', '-u', '/work/main/tools/capture/train.py', '--local_rank=0', '--deepspeed', ...]
[2026-12-02 17:04:02,972] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 653
[2026-12-02 17:04:02,974] [ERROR] [launch.py:259:sigkill_handler] ['/opt/torch/.venv/bin/python3', '-u', '/work/main/tools/capture/train.py', '--local_rank=0', '--deepspeed', ...] exits with return code = -9
"""


def test_real_deepspeed_single_process_exit_is_local_rank0():
    ev = parse_text(DS_REAL)
    (e,) = ev.exits
    assert e.exitcode == -9 and e.launcher == "deepspeed"
    assert (e.rank, e.local_rank) == (0, 0)            # one child only: no --local_rank ambiguity
    assert [f.rank for f in kinds(ev, K.SIGKILL)] == [0]
    assert facts(ev, "launcher.pid_local_rank") == [{"653": 0}]
    assert facts(ev, "nccl.env.NCCL_NVLS_ENABLE") == ["0"]
    assert not [f for f in ev.facts if f.name == "nccl.env.NV_LIBNCCL_PACKAGE_NAME"]


def test_killing_order_gives_pid_local_ranks_without_spawn_lines():
    # sigkill_handler walks its children in spawn (= local rank) order; lines from deepspeed.md §1.6 /
    # nccl.md §4.4 (the 2024-06-14 log), pids of the other three children filled in
    text = """\
[2024-06-14 01:50:01,001] [INFO] [launch.py:152:main] nnodes=1, num_local_procs=4, node_rank=0
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438136
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438137
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438138
[2024-06-14 01:51:54,018] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 438139
[2024-06-14 01:51:54,038] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'fix.py', '--local_rank=3'] exits with return code = 1
"""
    ev = parse_text(text)
    assert facts(ev, "launcher.pid_local_rank") == [{"438136": 0, "438137": 1, "438138": 2, "438139": 3}]
    (e,) = ev.exits
    assert e.rank is None and e.local_rank is None      # four children: the failing one is unknown


# The OOM killer's task table alone, verbatim from https://github.com/hiyouga/LLaMA-Factory/issues/3230
# (tests/corpus/hiyouga__LlamaFactory__3230): the excerpt kept the table but not the "Killed process" line.
TASK_TABLE = """\
[17798674.374095] [ 199300]  1000 199300   101975    23897   307200      501          -998 jupyter-lab
[17798674.374310] [ 201965]  1000 201965  5861879    47747  2015232    30009          -998 python
[17798674.374495] [ 202779]  1000 202779 274650088 243385180 1957441536     7930          -998 python
[17798674.374519] [ 202780]  1000 202780 33475461  2529507 25161728     3314          -998 python
"""


def test_kernel_task_table_alone_is_a_host_oom_naming_the_largest_task():
    ev = parse_text(TASK_TABLE)
    (f,) = kinds(ev, K.HOST_OOM_KILL)
    assert f.pid == 202779 and f.ref.line == 3
    assert "928.4 GiB" in f.message                # 243,385,180 pages of 4 KiB


def test_kernel_task_table_needs_several_rows_and_defers_to_the_killed_line():
    assert not kinds(parse_text(TASK_TABLE.splitlines(True)[2]), K.HOST_OOM_KILL)
    killed = "Out of memory: Killed process 202779 (python) total-vm:…kB, anon-rss:…kB\n"
    (f,) = kinds(parse_text(TASK_TABLE + killed), K.HOST_OOM_KILL)
    assert f.ref.line == 5                         # the killer's own line, not the table


def test_deepspeed_log_lines_are_not_task_rows():
    # deepspeed.md §1.6: "[date] [INFO] [launch.py:...]" carries "] [" but is no kernel row
    ds = "[2023-08-31 11:58:27,249] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1612505\n" * 4
    assert not kinds(parse_text(ds), K.HOST_OOM_KILL)


# https://github.com/baichuan-inc/Baichuan2/issues/138 (tests/corpus/baichuan-inc__Baichuan2__138): zsh's
# job line for the SIGKILLed process, glued to the progress bar it interrupted
ZSH_KILLED = ("Loading checkpoint shards:   0%|          | 0/3 [00:00<?, ?it/s][1]    26478 killed     "
              "python test.py\n")


def test_zsh_job_killed_line_is_a_kill():
    (f,) = kinds(parse_text(ZSH_KILLED), K.KILLED)
    assert f.pid == 26478 and "python test.py" in f.message


def test_killed_in_prose_is_not_a_kill():
    assert not kinds(parse_text("the process was killed by the scheduler earlier\n"), K.KILLED)


# Ray's memory monitor kills a worker when the node's RAM passes a threshold, before the kernel would:
# https://github.com/hiyouga/EasyR1/issues/125 (tests/corpus/hiyouga__EasyR1__125)
RAY_TASK_KILLED = "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
# https://github.com/hiyouga/EasyR1/issues/185 (tests/corpus/hiyouga__EasyR1__185), first line cut at the node ID
RAY_RAYLET = ("(raylet) [2025-04-02 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers "
              "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node\n")


def test_ray_memory_monitor_kill_is_a_host_oom_not_a_gpu_oom():
    for text in (RAY_TASK_KILLED, RAY_RAYLET):
        ev = parse_text(text)
        (k,) = kinds(ev, K.HOST_OOM_KILL)
        assert k.killer == "ray", text
        assert not ev.ooms                   # "OutOfMemoryError" here is the node's RAM, not the GPU's


def test_ray_kill_gets_a_host_verdict_naming_the_monitor():
    from oompost.pipeline import report_from_evidence

    r = report_from_evidence(parse_text(RAY_TASK_KILLED))
    assert r.cause == "host_oom"
    (f,) = [f for f in r.findings if f.code == "HOST001"]
    assert "Ray's memory monitor" in f.detail
    assert not any("zero.Init" in x.key for x in f.fixes)      # no DeepSpeed in sight


# https://github.com/deepspeedai/DeepSpeed/issues/4571 (dev): the excerpt ends with DeepSpeed's host-RAM line and
# the launcher killing its ranks; nothing else failed
DS_SILENT_KILL = ("[2024-01-22 16:50:44,316] [INFO] [utils.py:799:see_memory_usage] CPU Virtual Memory: used = 26.4 GB, "
                  "percent = 84.6%\n"
                  "[2024-01-22 16:50:49,553] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1080504\n")


def test_a_silent_launcher_kill_is_a_failure_and_weighs_for_the_host():
    from oompost.analysis.context import build_context
    from oompost.classify.features import extract, has_failure
    from oompost.classify.rules.host_oom import HostOom

    ctx = build_context(parse_text(DS_SILENT_KILL))
    assert ctx.silent_kill is not None
    assert has_failure(extract(ctx, []))                         # not "no failure in the inputs"
    (f,) = HostOom().evaluate(ctx)
    assert [w for _, w in f.signals] == [0.45, 0.15]              # the silent kill, then host RAM at 85 %
    # a kill after a real failure is that failure's consequence, not a silent death
    assert build_context(parse_text(RAY_TASK_KILLED + DS_SILENT_KILL)).silent_kill is None


# https://github.com/ray-project/ray/issues/44574: the end of Ray's kill report, as the raylet prints it; its pointer
# to the OOM-prevention page is printed with every kill
RAY_REPORT_TAIL = ("(raylet) Refer to the documentation on how to address the out of memory issue: "
                   "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more "
                   "memory on this node or reducing task parallelism by requesting more CPUs per task. To adjust the kill "
                   "threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray. To disable "
                   "worker killing, set the environment variable `RAY_memory_monitor_refresh_ms` to zero.\n")


def test_the_tail_of_rays_kill_report_is_a_ray_host_kill_not_an_oom():
    ev = parse_text(RAY_REPORT_TAIL)
    assert not ev.ooms
    (k,) = kinds(ev, K.HOST_OOM_KILL)
    assert k.killer == "ray"


def test_a_dataloader_worker_terminated_is_a_host_failure():
    # https://github.com/open-mmlab/mmsegmentation/issues/2085: the one line of the thread
    from pathlib import Path

    import oompost

    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "open-mmlab__mmsegmentation__2085" / "log.txt")])
    assert r.cause == "host_oom"
    assert any(f.key == "dataloader_num_workers" for f in r.primary.fixes)
    assert not any("zero.Init" in f.key for f in r.primary.fixes)


def test_cuda_malloc_host_failing_is_pinned_host_memory():
    # https://github.com/davisking/dlib/issues/391: dlib's "Error while calling cudaMallocHost(...) ... out of memory"
    from pathlib import Path

    import oompost

    r = oompost.analyze([str(Path(__file__).parent / "corpus" / "davisking__dlib__391" / "log.txt")])
    assert r.cause == "host_oom" and r.primary.sub_cause == "pinned"
    assert "pin_memory" in r.primary.fixes[0].key
