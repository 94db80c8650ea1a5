# bench_train: tokens/s and MFU of the training loop (gpt-tiny) on 1 and 2 ranks with threads.
# Standalone driver; prints a table. Figures in docs/benchmarks.md ("Training").
add_executable(bench_train ${CMAKE_CURRENT_LIST_DIR}/train_bench.cpp)
target_link_libraries(bench_train PRIVATE wallfacer::train wallfacer::planner CLI11::CLI11 fmt::fmt)
# bench_cpu_calibration: fp32 GEMM, attention-kernel and memory rates of one core, written as a
# calibration file (docs/calibration.md, "A CPU"); bench_train prices its steps with it.
add_executable(bench_cpu_calibration ${CMAKE_CURRENT_LIST_DIR}/cpu_calibration.cpp)
target_link_libraries(bench_cpu_calibration PRIVATE wallfacer::train wallfacer::runtime CLI11::CLI11 fmt::fmt ${BLAS_LIBRARIES})
target_include_directories(bench_cpu_calibration PRIVATE ${OPENBLAS_INCLUDE_DIR})
target_compile_definitions(bench_train PRIVATE WALLFACER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
