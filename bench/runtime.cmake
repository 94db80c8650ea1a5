# bench_runtime: parallel efficiency T1 / (2 * T2) of one attention layer (fwd + bwd, fp32), a
# 2-rank ring against 1 rank, measured side by side with the local threads backend. Standalone
# driver; prints a table. Figures in docs/benchmarks.md ("Runtime parallel efficiency").
add_executable(bench_runtime ${CMAKE_CURRENT_LIST_DIR}/runtime_bench.cpp)
target_link_libraries(bench_runtime PRIVATE wallfacer::runtime wallfacer::planner CLI11::CLI11 fmt::fmt)
