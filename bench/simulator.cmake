# bench_simulator: wall time and activities per second of simulating one attention layer
# (forward + backward) of the best plan at 64, 512 and 4,096 GPUs (DGX H100, Llama-3-8B, 1M
# tokens). Standalone driver; prints a table. Figures in docs/benchmarks.md.
add_executable(bench_simulator ${CMAKE_CURRENT_LIST_DIR}/simulator_bench.cpp)
target_link_libraries(bench_simulator PRIVATE wallfacer::simulator_internal wallfacer::planner fmt::fmt)
wallfacer_use_fast_malloc(bench_simulator)
