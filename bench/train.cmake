# bench_train: tokens/s and MFU of the training loop (gpt-tiny) on 1 and 2 ranks with threads.
# Standalone driver; prints a table. Figures in docs/benchmarks.md ("Training").
add_executable(bench_train ${CMAKE_CURRENT_LIST_DIR}/train_bench.cpp)
target_link_libraries(bench_train PRIVATE wallfacer::train wallfacer::planner CLI11::CLI11 fmt::fmt)
