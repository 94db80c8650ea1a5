#!/bin/sh
# A run killed (SIGKILL) while writing a checkpoint: `LAUNCHER... train` for 6 steps with a
# checkpoint every 2, killed by the checkpoint fault injection inside its step-4 write; `latest`
# must still name step 2, and resuming must reproduce the uninterrupted run's losses of steps 3-6.
# Usage: kill_cli.sh WORKDIR PLAN DATA LAUNCHER... (the launcher ends with the wallfacer binary)
set -u
work=$1 plan=$2 data=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$@" train --plan "$plan" --data "$data" --steps 6 --json --checkpoint "$work/whole" --checkpoint-every 2 \
  2>/dev/null | grep -o '"loss":[^,}]*' | tail -n 4 > "$work/whole.txt"
WALLFACER_CHECKPOINT_FAULT="after-bytes=200,mode=kill,step=4,rank=0" \
  "$@" train --plan "$plan" --data "$data" --steps 6 --checkpoint "$work/ckpt" --checkpoint-every 2 >/dev/null 2>&1
status=$?
if [ "$status" -eq 0 ]; then echo "the faulty run was not killed"; exit 1; fi
if [ "$(cat "$work/ckpt/latest")" != "2" ]; then echo "latest is not step 2: $(cat "$work/ckpt/latest")"; exit 1; fi
"$@" train --plan "$plan" --data "$data" --steps 6 --json --checkpoint "$work/ckpt" --resume 2>/dev/null \
  | grep -o '"loss":[^,}]*' > "$work/resumed.txt"
if [ "$(wc -l < "$work/resumed.txt")" -eq 4 ] && cmp -s "$work/whole.txt" "$work/resumed.txt"; then
  echo "killed at status $status; resumed losses equal"
else
  echo "resumed losses differ:"; cat "$work/whole.txt" "$work/resumed.txt"; exit 1
fi
