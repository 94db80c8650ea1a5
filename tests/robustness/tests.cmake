# Robustness: hostile and accidental inputs (alias bombs, huge integers and sizes, binary files,
# oversized files), output files that survive failed writes, memory checks before a run, and
# lost ranks in the runtime's backends.
wallfacer_add_test(NAME test_robustness_inputs
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/input_limits_test.cpp
  LIBS wallfacer::planner yaml-cpp)
wallfacer_add_test(NAME test_robustness_cli
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_faults_test.cpp
  LIBS wallfacer::runtime wallfacer::planner fmt::fmt)
# cli_faults_test.cpp runs build/bin/wallfacer.
add_dependencies(test_robustness_cli wallfacer)
wallfacer_add_test(NAME test_robustness_memory
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_estimate_test.cpp
  LIBS wallfacer::runtime wallfacer::planner)

# ---- lost ranks under mpirun --------------------------------------------------------------------
# WALLFACER_TEST_FAULT makes rank 2 stop itself (SIGSTOP) or die (SIGKILL) at its third wait.
# The others must end the run with a non-zero status naming the lost rank: a stopped one is
# found by its peers' process check (wallfacer names it and the op it waited on), a killed one by
# mpirun. Without the check a stopped rank held the others for the 300 s stall limit.
if(TARGET wallfacer AND WALLFACER_MPI_ENABLED)
  set(_faults_dir ${CMAKE_CURRENT_BINARY_DIR}/robustness_faults)
  add_test(NAME robustness_fault_plan
           COMMAND sh -c "mkdir -p '${_faults_dir}' && \"$@\"" sh $<TARGET_FILE:wallfacer> plan --strategy ring --tp 1
                   --gpus 4 --seq 256 --heads 4 --kv-heads 4 --head-dim 16 --out ${_faults_dir}/ring4.yaml)
  set_tests_properties(robustness_fault_plan PROPERTIES FIXTURES_SETUP robustness_fault_plan)
  set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -x WALLFACER_TEST_FAULT -np 4)
  foreach(fault stop kill)
    if(fault STREQUAL "stop")
      set(_expect "rank [013]: lost rank 2 \\(process [0-9]+ on [^)]+\\) is stopped \\(SIGSTOP or a debugger\\) after waiting [0-9]+ s on \\[(send to|receive from) rank 2")
    else()
      set(_expect "process rank 2 .*exited on signal 9")
    endif()
    add_test(NAME robustness_rank_${fault}
             COMMAND sh -c "WALLFACER_TEST_FAULT=${fault}:2:3 \"$@\" 2>&1; echo \"exit status $?\"" sh ${_mpirun}
                     $<TARGET_FILE:wallfacer> run --plan ${_faults_dir}/ring4.yaml)
    set_tests_properties(robustness_rank_${fault} PROPERTIES FIXTURES_REQUIRED robustness_fault_plan
                         PASS_REGULAR_EXPRESSION "${_expect}.*exit status [1-9]")
  endforeach()
  # A rank that sleeps 8 s (four peer checks) is slow, not lost: the run must succeed.
  add_test(NAME robustness_rank_slow
           COMMAND sh -c "WALLFACER_TEST_FAULT=sleep:2:3 \"$@\" 2>&1; echo \"exit status $?\"" sh ${_mpirun}
                   $<TARGET_FILE:wallfacer> run --plan ${_faults_dir}/ring4.yaml --check)
  set_tests_properties(robustness_rank_slow PROPERTIES FIXTURES_REQUIRED robustness_fault_plan
                       PASS_REGULAR_EXPRESSION "all checks passed.*exit status 0")
endif()
