#!/bin/sh
# Resume through the command line: `LAUNCHER... train --plan PLAN --data DATA` for 6 steps with a
# checkpoint every 3, then rolled back to its step-3 checkpoint (as a run killed after it would have
# left it) and resumed: the JSON losses of steps 4-6 must equal the uninterrupted run's, bit for bit.
# Usage: resume_cli.sh WORKDIR PLAN DATA LAUNCHER... (the launcher ends with the wallfacer binary)
set -eu
work=$1 plan=$2 data=$3
shift 3
rm -rf "$work" && mkdir -p "$work"
"$@" train --plan "$plan" --data "$data" --steps 6 --json --checkpoint "$work/ckpt" --checkpoint-every 3 \
  2>/dev/null | grep -o '"loss":[^,}]*' | tail -n 3 > "$work/whole.txt"
rm -rf "$work/ckpt/step-6"
printf '3\n' > "$work/ckpt/latest"
"$@" train --plan "$plan" --data "$data" --steps 6 --json --checkpoint "$work/ckpt" --resume 2>/dev/null \
  | grep -o '"loss":[^,}]*' > "$work/resumed.txt"
if [ "$(wc -l < "$work/resumed.txt")" -eq 3 ] && cmp -s "$work/whole.txt" "$work/resumed.txt"; then
  echo "resumed losses equal"
else
  echo "resumed losses differ:"; cat "$work/whole.txt" "$work/resumed.txt"; exit 1
fi
