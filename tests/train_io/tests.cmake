# Training input and output (wallfacer::train_io): the byte-level dataset and its sampling rule
# against a reimplementation from docs/training-data.md, the recall task's layout checked by
# parsing its samples, checkpoint round trips, files built from the documented format, every
# corruption, interrupted writes (in-process faults and a killed child process), and the progress
# reporter's lines.
wallfacer_add_test(NAME test_train_io
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/data_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/recall_task_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/checkpoint_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/checkpoint_fault_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/checkpoint_format_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/progress_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/source_test.cpp
  LIBS wallfacer::train_io nlohmann_json::nlohmann_json fmt::fmt ZLIB::ZLIB Threads::Threads
  TEST_PREFIX train_io.)
