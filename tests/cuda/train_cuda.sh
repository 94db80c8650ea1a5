#!/bin/sh
# `wallfacer train --backend cuda` against the same steps on the CPU (--backend local): every
# step's loss within TOLERANCE relative. Without a GPU the CUDA run must stop at once naming the
# missing GPU (exit 2), which is printed as such. Usage: train_cuda.sh WALLFACER PLAN STEPS TOLERANCE OUT
wf="$1"; plan="$2"; steps="$3"; tolerance="$4"; out="$5"
"$wf" train --plan "$plan" --steps "$steps" --json --backend cuda > "$out.cuda" 2> "$out.cuda.err"
status=$?
if [ $status -ne 0 ]; then
  cat "$out.cuda.err"
  echo "exit status $status"
  exit 0
fi
"$wf" train --plan "$plan" --steps "$steps" --json --backend local > "$out.cpu" 2> "$out.cpu.err" || {
  cat "$out.cpu.err"; echo "the CPU run failed"; exit 1; }
# One "loss": value per step line; the largest |cuda - cpu| / |cpu| over the steps.
loss() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }
loss "$out.cpu" > "$out.cpu.loss"
loss "$out.cuda" > "$out.cuda.loss"
paste "$out.cpu.loss" "$out.cuda.loss" | awk -v n="$steps" -v tol="$tolerance" '
  { d = $2 - $1; if (d < 0) d = -d; a = $1; if (a < 0) a = -a; r = d / a; if (!(r <= worst)) worst = r; rows++ }
  END {
    if (rows != n) { printf "%d of %d steps compared\n", rows, n; exit 1 }
    printf "losses of %d steps: max relative difference %.3g (tolerance %g)\n", rows, worst, tol
    if (worst <= tol) print "cuda and cpu losses agree"; else { print "cuda and cpu losses DIFFER"; exit 1 }
  }'
echo "exit status $?"
