#!/usr/bin/env bash
# Builds wallfacer with AddressSanitizer and UndefinedBehaviorSanitizer into build-sanitize/
# and runs the test suite there: any memory error, leak or undefined behaviour fails the test
# that caused it (docs/reliability.md, "Sanitizers"). Extra arguments go to ctest, e.g.
#   bash scripts/sanitize.sh -R robustness
# WALLFACER_SANITIZE_LABELS_EXCLUDE (default: sanitize-slow) names ctest labels left out, and
# WALLFACER_SANITIZE_SKIP (a ctest regex) Google Test cases left out by name; such tests run in
# the normal build only, and their list is in tests/sanitize/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 -g1 (line tables only): half the compile time of the normal build's -O2 -g, and the
# optimisation AddressSanitizer's documentation suggests; reports keep their file:line frames.
cmake -S . -B build-sanitize -G Ninja "${launcher[@]}" -DWALLFACER_SANITIZE=ON -DWALLFACER_BENCH=OFF \
  -DWALLFACER_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
cmake --build build-sanitize -j "$(nproc)"

# halt_on_error: the first report ends the process, so no test passes past one. Leaks are
# checked at exit. What Open MPI's libraries keep until exit is suppressed by library name, with
# the reason, in tests/sanitize/lsan.supp.
# Stack-use-after-return detection stays off: SimGrid switches its actors' stacks with ucontext
# without telling ASan (Debian's libsimgrid has no fiber annotations), so every actor's return
# would be reported.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# MPI ranks (started by mpirun) record full allocation stacks: Open MPI's libraries have no
# frame pointers, so the fast unwinder stops at their first frame and lsan.supp could not name
# them. Only the ranks pay for it (mpirun sets their environment from this list): the slow
# unwinder makes every allocation several times dearer.
export OMPI_MCA_mca_base_env_list="ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0"
exclude="${WALLFACER_SANITIZE_LABELS_EXCLUDE-sanitize-slow}"
label_args=()
[ -n "$exclude" ] && label_args=(-LE "$exclude")
# Google Test cases are discovered at build time and cannot carry a label of their own: the ones
# left out are named here (a ctest regex; WALLFACER_SANITIZE_SKIP replaces it, empty runs all).
# Each runs in the normal build; tests/sanitize/README.md gives the reason.
default_skip='^SimulatorCompose\.(EightNodesCompose|EveryStrategysStepIsTheFullReplaysOnTwoNodes)$'
default_skip+='|^Presets/SimulateCommand\.SimulateTopRanksByTimeAndSimulateAgrees/'
default_skip+='|^SimulateCommandProgress\.LinesGoToStderrAndClimbTowardsTheStep$'
default_skip+='|^RecallTask\.LearntAcrossRanksAfterACurriculum$'
default_skip+='|^doc_commands\.Docs/Document\.CommandsPrintWhatTheirExpectationsSay/(README_md|docs_simulator_md)( |$)'
skip="${WALLFACER_SANITIZE_SKIP-$default_skip}"
[ -n "$skip" ] && label_args+=(-E "$skip")
status=0
ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" "${label_args[@]}" "$@" || status=$?
# A report normally fails its test (the process aborts). A test that runs a program and expects it
# to fail could still pass on the abort, so any report left in ctest's log fails the run too.
log=build-sanitize/Testing/Temporary/LastTest.log
if grep -q "^SUMMARY: [A-Za-z]*Sanitizer" "$log"; then
  echo "sanitizer reports in $log:" >&2
  grep "^SUMMARY: [A-Za-z]*Sanitizer" "$log" >&2
  status=1
fi
exit "$status"
