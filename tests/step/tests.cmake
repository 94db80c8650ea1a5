# The whole-step schedule (wallfacer/schedule/step.hpp): templates, unrolling, closed forms of its
# FLOPs, rows and gradient volumes, and where dependencies of unrolled layers point.
wallfacer_add_test(NAME test_step
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/step_build_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/pipeline_parallel_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/interleaved_pipeline_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/sync_stream_test.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/schedule/test_plans.cpp
  LIBS wallfacer::schedule_internal wallfacer::check wallfacer::planner)
