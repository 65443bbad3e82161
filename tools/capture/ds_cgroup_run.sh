#!/usr/bin/env bash
# Run train.py under the DeepSpeed launcher inside a cgroup whose memory.max is
# $1 (a container's RAM limit); the remaining arguments go to train.py, which
# reads the job's ds_config.json:
#   ds_cgroup_run.sh 12G --model opt-1.3b --per_device_train_batch_size 2 ...
# Needs cgroup v2 and root; exits 99 if unavailable.  Kernel OOM-killer lines
# go to $JOB/kernel.log, the cgroup's memory events to $JOB/cgroup_memory_events.txt.
set -u
limit=${1:?usage: ds_cgroup_run.sh LIMIT TRAIN_ARGS...}; shift
cg=/sys/fs/cgroup/oompost_$$
if ! mkdir -p "$cg" 2>/dev/null || ! echo "$limit" > "$cg/memory.max" 2>/dev/null; then
  echo "[capture] cgroup v2 memory controller not available; cannot stage a host OOM" >&2
  exit 99
fi
echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
echo $$ > "$cg/cgroup.procs"
python3 -m deepspeed.launcher.runner --num_gpus 1 --master_port "${MASTER_PORT:-29700}" \
  "$(dirname "$0")/train.py" --deepspeed "$JOB/ds_config.json" "$@"
rc=$?
cat "$cg/memory.events" > "$JOB/cgroup_memory_events.txt" 2>/dev/null
cat "$cg/memory.peak" > "$JOB/cgroup_memory_peak.txt" 2>/dev/null
dmesg 2>/dev/null | grep -iE "out of memory|oom-kill|oom_reaper|Killed process" > "$JOB/kernel.log" || true
[ -s "$JOB/kernel.log" ] || rm -f "$JOB/kernel.log"
exit $rc
