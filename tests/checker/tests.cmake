# The schedule checker: hand-built broken schedules, each caught with the right message, and
# whole-step schedules of every strategy, passing and broken layer by layer.
wallfacer_add_test(NAME test_checker
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checker_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/checker_step_test.cpp
          ${PROJECT_SOURCE_DIR}/tests/schedule/test_plans.cpp
  LIBS wallfacer::planner)
