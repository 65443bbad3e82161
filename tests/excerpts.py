"""Real log excerpts shared by several test modules (verbatim; source on each)."""

# shared/reference/nccl.md §4.1 + §4.2, measured: rank 1 SIGKILLed itself
# (torch 2.11, torchrun --nproc_per_node 2); torchrun's Root Cause agrees
SIGKILL_RUN = """\
W1202 15:12:59.833000 1301 torch/distributed/elastic/multiprocessing/api.py:1012] Sending process 1322 closing signal SIGTERM
E1202 15:13:00.030000 1301 torch/distributed/elastic/multiprocessing/api.py:986] failed (exitcode: -9) local_rank: 1 (pid: 1323) of binary: <venv>/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
probe.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_15:13:00
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 1322)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1322
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_15:12:59
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 1323)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1323
======================================================
"""
