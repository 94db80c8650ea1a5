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
# interrupt_test.cpp runs build/bin/wallfacer and interrupts it with SIGINT.
wallfacer_add_test(NAME test_robustness_interrupt
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/interrupt_test.cpp
  LIBS wallfacer::core)
add_dependencies(test_robustness_interrupt wallfacer)
wallfacer_add_test(NAME test_robustness_memory
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_estimate_test.cpp
  LIBS wallfacer::runtime wallfacer::planner)

# ---- lost ranks under mpirun --------------------------------------------------------------------
# WALLFACER_TEST_FAULT makes rank 2 stop itself (SIGSTOP), die (SIGKILL) or sleep as it posts its
# third transfer. The others must end the run with a non-zero status naming the lost rank: a
# stopped one is found by its peers' process check (same host) and, with that check off, by its
# missing heartbeat, the path that finds a frozen rank on another host; a killed one by mpirun,
# whose SIGTERM makes the others say what they waited on.
# Without them a stopped rank held the others for the 300 s stall limit.
if(TARGET wallfacer AND WALLFACER_MPI_ENABLED)
  set(_faults_dir ${CMAKE_CURRENT_BINARY_DIR}/robustness_faults)
  add_test(NAME robustness_fault_plan
           COMMAND sh -c "mkdir -p '${_faults_dir}' && \"$@\"" sh $<TARGET_FILE:wallfacer> plan --strategy ring --tp 1
                   --gpus 4 --seq 256 --heads 4 --kv-heads 4 --head-dim 16 --out ${_faults_dir}/ring4.yaml)
  set_tests_properties(robustness_fault_plan PROPERTIES FIXTURES_SETUP robustness_fault_plan)
  # The ranks run on this host and inherit mpirun's environment, WALLFACER_TEST_FAULT included.
  # No `-x`: Open MPI refuses it next to OMPI_MCA_mca_base_env_list, which scripts/sanitize.sh sets.
  set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4)
  set(_waits_on_2 "after waiting [0-9.]+ s on \\[(send to|receive from) rank 2")
  set(_expect_stop "rank [013]: lost rank 2 \\(process [0-9]+ on [^)]+\\) is stopped \\(SIGSTOP or a debugger\\) ${_waits_on_2}")
  set(_expect_heartbeat "rank [013]: lost rank 2: no heartbeat for [0-9.]+ s \\(stopped, hung, or its host unreachable\\) ${_waits_on_2}")
  # A killed rank: mpirun names it, and the ranks it ends with SIGTERM say what they waited on.
  set(_killed "process rank 2 .*exited on signal 9")
  set(_ended "rank [013]: ended by SIGTERM [^\n]* after waiting [0-9.]+ s on [^\n]*\\[(send to|receive from) rank 2")
  set(_expect_kill "(${_killed}.*${_ended}|${_ended}.*${_killed})")
  set(_args_stop "")
  set(_args_heartbeat --peer-check 0 --heartbeat-timeout 4)
  set(_args_kill "")
  foreach(case stop heartbeat kill)
    set(fault ${case})
    if(case STREQUAL "heartbeat")
      set(fault stop)
    endif()
    add_test(NAME robustness_rank_${case}
             COMMAND sh -c "WALLFACER_TEST_FAULT=${fault}:2:3 \"$@\" 2>&1; echo \"exit status $?\"" sh ${_mpirun}
                     $<TARGET_FILE:wallfacer> run --plan ${_faults_dir}/ring4.yaml ${_args_${case}})
    set_tests_properties(robustness_rank_${case} PROPERTIES FIXTURES_REQUIRED robustness_fault_plan
                         PASS_REGULAR_EXPRESSION "${_expect_${case}}.*exit status [1-9]")
  endforeach()
  # A rank that computes for 8 s (sleeps in slices with progress calls between them) is slow,
  # not lost: four process checks and twice the heartbeat timeout pass and the run must succeed.
  add_test(NAME robustness_rank_slow
           COMMAND sh -c "WALLFACER_TEST_FAULT=sleep:2:3 \"$@\" 2>&1; echo \"exit status $?\"" sh ${_mpirun}
                   $<TARGET_FILE:wallfacer> run --plan ${_faults_dir}/ring4.yaml --check --heartbeat-timeout 4)
  set_tests_properties(robustness_rank_slow PROPERTIES FIXTURES_REQUIRED robustness_fault_plan
                       PASS_REGULAR_EXPRESSION "all checks passed.*exit status 0")
endif()
