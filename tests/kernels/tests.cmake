# Blockwise CPU attention kernels against the naive fp64 reference, and the reference against
# closed forms and finite differences.
wallfacer_add_test(NAME test_kernels
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/blockwise_runner.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_blockwise.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_merge.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_reference.cpp
  LIBS wallfacer::runtime)
