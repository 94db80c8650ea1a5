# Workloads (model presets, overrides, validation, parameter counts) and plan files (round trip,
# malformed input, topology checks).
wallfacer_add_test(NAME test_workload_plan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/workload_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/workload_errors_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/plan_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/plan_errors_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/plan_mutation_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/plan_topology_test.cpp
  LIBS wallfacer::planner yaml-cpp)
