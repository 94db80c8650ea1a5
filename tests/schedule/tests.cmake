# Schedule primitives, the strategy toolkit and the ring / zigzag / Ulysses / USP / double-ring
# schedules: brute-force coverage, send/receive matching, exact FLOPs, closed-form volumes,
# deadlock-free symbolic execution and determinism.
wallfacer_add_test(NAME test_schedule
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/primitives_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/strategies_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/volumes_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/feasibility_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/make_plan_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/all_reduce_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/ring_channels_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/parallel_build_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/build_mode_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/interpreter.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_plans.cpp
  LIBS wallfacer::schedule_internal wallfacer::planner)
