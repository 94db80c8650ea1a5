# Whole-step predictions against published end-to-end measurements: recomputes every expressible
# entry of tests/validation/published.yaml and checks docs/validation.md's table and summary.
wallfacer_add_test(NAME test_validation
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/validation_test.cpp
  LIBS wallfacer::planner)
