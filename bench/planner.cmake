# Planner wall time at 64, 1,024 and 16,384 GPUs (DGX H100, Llama-3-8B, 1M tokens, auto search),
# on one thread and with the whole steps priced on one thread per usable CPU; prints a table.
# Linked with the CLI's allocator, so that it times what `wallfacer plan` runs. Figures in
# docs/benchmarks.md.
add_executable(bench_planner ${CMAKE_CURRENT_LIST_DIR}/planner_bench.cpp)
target_link_libraries(bench_planner PRIVATE wallfacer::planner fmt::fmt)
target_compile_definitions(bench_planner PRIVATE WALLFACER_BENCH_DIR="${CMAKE_CURRENT_LIST_DIR}")
wallfacer_use_fast_malloc(bench_planner)
