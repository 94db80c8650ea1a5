# The topology scheduler: heuristic against exhaustive search, determinism, filters, rejections.
wallfacer_add_test(NAME test_search
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/search_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/orders_test.cpp
  LIBS wallfacer::planner)
