# WallFacer, all-gather K/V and LSS schedules: the docs/algorithms.md §8.2 rank-formula
# properties, the checker on every valid configuration, exact FLOPs, closed-form volumes, and real
# execution against the fp64 reference.
wallfacer_add_test(NAME test_strategies_team
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/team_plans.cpp
          ${CMAKE_CURRENT_LIST_DIR}/wallfacer_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/gathered_kv_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/numeric_test.cpp
  LIBS wallfacer::schedule_internal wallfacer::planner wallfacer::runtime)
