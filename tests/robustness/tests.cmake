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
