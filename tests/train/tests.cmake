# The trainer: gradients against finite differences and the single process, multi-rank training
# against one rank for every strategy, ZeRO stages, checkpoints and resume, the long-range task.
wallfacer_add_test(NAME test_train
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_fixtures.cpp
          ${CMAKE_CURRENT_LIST_DIR}/gradient_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/equality_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/resume_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/recall_test.cpp
  LIBS wallfacer::train wallfacer::planner fmt::fmt)
