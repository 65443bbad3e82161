#!/usr/bin/env bash
# Run a command inside a cgroup whose memory.max is $1 (a container's RAM
# limit), e.g.  cgroup_run.sh 6G python3 vit_cached_loader.py ...
# Needs cgroup v2 and root; exits 99 if unavailable.  Kernel OOM-killer lines
# go to $JOB/kernel.log, the cgroup's memory events to $JOB/cgroup_memory_events.txt
# and its peak to $JOB/cgroup_memory_peak.txt.
set -u
limit=${1:?usage: cgroup_run.sh LIMIT COMMAND...}; shift
cg=/sys/fs/cgroup/oompost_$$
if ! mkdir -p "$cg" 2>/dev/null || ! echo "$limit" > "$cg/memory.max" 2>/dev/null; then
  echo "[capture] cgroup v2 memory controller not available; cannot stage a host OOM" >&2
  exit 99
fi
echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
echo $$ > "$cg/cgroup.procs"
"$@"
rc=$?
cat "$cg/memory.events" > "$JOB/cgroup_memory_events.txt" 2>/dev/null
cat "$cg/memory.peak" > "$JOB/cgroup_memory_peak.txt" 2>/dev/null
dmesg 2>/dev/null | grep -iE "out of memory|oom-kill|oom_reaper|Killed process" > "$JOB/kernel.log" || true
[ -s "$JOB/kernel.log" ] || rm -f "$JOB/kernel.log"
exit $rc
