#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang into build-fuzz/ and runs each for a
# bounded time from its seed corpus (tests/fuzz/corpus/<target>/). Any crash, sanitizer report,
# input taking longer than 10 s (a hang) or over 2 GiB of memory stops it with the reproducer
# written to build-fuzz/findings/<target>/, and the script fails. Usage:
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET (default 12)] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-12}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_topology_yaml fuzz_nccl_xml fuzz_nvidia_smi fuzz_plan fuzz_npy)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja "${launcher[@]}" -DCMAKE_CXX_COMPILER=clang++ -DWALLFACER_FUZZ=ON \
  -DWALLFACER_TESTS=OFF -DWALLFACER_BENCH=OFF -DWALLFACER_GUI=OFF -DWALLFACER_MPI=OFF -DWALLFACER_CUDA=OFF \
  -DWALLFACER_MIMALLOC=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
status=0
for target in "${targets[@]}"; do
  seeds="tests/fuzz/corpus/$target"
  work="build-fuzz/corpus/$target"   # what the fuzzer adds; the seeds stay as they are
  findings="build-fuzz/findings/$target"
  mkdir -p "$work" "$findings"
  echo "fuzz: $target for ${seconds} s"
  if ! "build-fuzz/bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$findings/" "$work" "$seeds" 2>"build-fuzz/$target.log"; then
    tail -n 60 "build-fuzz/$target.log"
    echo "fuzz: $target FAILED; reproducer in $findings/"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "build-fuzz/$target.log" | sed "s/^/fuzz: $target /" || true
done
exit $status
