# The topology scheduler: heuristic against exhaustive search, determinism, filters, rejections,
# the closed-form screen of large clusters, and the explanation of a ranking (ties, merged
# schedules, sentences, suggestions when nothing is feasible).
wallfacer_add_test(NAME test_search
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/search_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/orders_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/symmetry_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/screen_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/explain_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/vpp_search_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/parallel_test.cpp
  LIBS wallfacer::search_internal wallfacer::planner)
# The answer-time goal on the 32-GPU A100 cluster of docs/benchmarks.md, with a generous bound.
wallfacer_add_test(NAME test_search_speed
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/speed_test.cpp
  LIBS wallfacer::planner)
