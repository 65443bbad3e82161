#!/usr/bin/env bash
# Run the ZeRO-2 offload fine-tune of sample_logs/host_oom_offload_cgroup inside a
# cgroup whose memory.max is $1 (a container's RAM limit; default 10G).  The
# cgroup, its exit code 99 when unavailable and the files it leaves in $JOB are
# cgroup_run.sh's.
set -u
exec "$(dirname "$0")/ds_cgroup_run.sh" "${1:-10G}" --model qwen2.5-1.5b \
  --per_device_train_batch_size 2 --gradient_accumulation_steps 4 --max_seq_length 1024 --max_steps 20
