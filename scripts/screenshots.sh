#!/usr/bin/env bash
# Renders a screenshot of each view of wallfacer-gui into docs/images/ (offscreen, no display
# needed): the topology of two DGX H100 nodes and of 128 nodes (1,024 GPUs, folded), a WallFacer
# plan with the link load of its simulation, that simulation's timeline, and the planner's
# comparison of candidates. The plan and the trace are made with the CLI first. Run after
# scripts/build.sh (with the GUI built).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
if [ ! -x "$bin/wallfacer-gui" ]; then
  echo "screenshots: $bin/wallfacer-gui is not built (bash scripts/build.sh, with Qt 6 installed)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=docs/images
mkdir -p "$out"
export QT_QPA_PLATFORM=offscreen
export XDG_CONFIG_HOME="$work"  # the runs' recent files stay out of the user's settings
size=1280x800

"$bin/wallfacer" plan --topology dgx-h100 --nodes 2 --strategy wallfacer --tp 1 --pp 1 --scope attention \
  --out "$work/plan.yaml" >/dev/null
"$bin/wallfacer" simulate "$work/plan.yaml" --trace "$work/trace.json" >/dev/null

gui() {
  "$bin/wallfacer-gui" --size "$size" "$@"
  echo "screenshots: wrote ${*: -1}"
}
gui --topology dgx-h100 --nodes 2 --view topology --screenshot "$out/gui-topology.png"
gui --topology dgx-h100 --nodes 128 --view topology --screenshot "$out/gui-topology-1024.png"
gui --plan "$work/plan.yaml" --simulate --view plan --screenshot "$out/gui-plan.png"
gui --plan "$work/plan.yaml" --trace "$work/trace.json" --view timeline --screenshot "$out/gui-timeline.png"
gui --topology dgx-h100 --nodes 2 --search --seq 262144 --simulate-top 3 --view compare \
  --screenshot "$out/gui-compare.png"
