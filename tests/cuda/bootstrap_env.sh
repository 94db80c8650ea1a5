#!/bin/sh
# Two tasks of `wallfacer COMMAND --backend cuda --bootstrap env` on localhost, as srun without MPI
# would start them: prints each rank's output and exit status.
# Usage: bootstrap_env.sh WALLFACER PLAN OUT [COMMAND [ARGS...]]   (COMMAND: run, the default, or train)
wf="$1"; plan="$2"; out="$3"
shift 3
command="${1:-run}"
[ $# -gt 0 ] && shift
port=$((30000 + $$ % 20000))
for r in 0 1; do
  (SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$wf" "$command" --plan "$plan" --backend cuda --bootstrap env --rendezvous-timeout 60 "$@" > "$out.$r" 2>&1
   echo "rank $r exit status $?" >> "$out.$r") &
done
wait
cat "$out.0" "$out.1"
