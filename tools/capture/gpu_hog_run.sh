#!/usr/bin/env bash
# Run a command while another process holds $1 GiB of the same GPU, e.g.
#   gpu_hog_run.sh 120 python3 plain_loop.py ...
# The holder's output goes to $JOB/hog.log; it is killed when the command ends.
set -u
gib=${1:?usage: gpu_hog_run.sh GIB COMMAND...}; shift
here=$(cd "$(dirname "$0")" && pwd)
rm -f "$JOB/hog_ready"
python3 "$here/gpu_hog.py" --gib "$gib" --ready "$JOB/hog_ready" > "$JOB/hog.log" 2>&1 &
hog=$!
for _ in $(seq 1 240); do
  [ -e "$JOB/hog_ready" ] && break
  kill -0 "$hog" 2>/dev/null || { echo "[capture] the GPU holder died before holding its memory" >&2; exit 98; }
  sleep 0.5
done
"$@"
rc=$?
kill "$hog" 2>/dev/null
wait "$hog" 2>/dev/null
rm -f "$JOB/hog_ready"
exit $rc
