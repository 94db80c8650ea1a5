# bench_kernels: forward/backward GFLOP/s of the CPU attention kernels next to OpenBLAS SGEMM on
# matching shapes (docs/benchmarks.md, "Attention kernels").
add_executable(bench_kernels ${CMAKE_CURRENT_LIST_DIR}/kernel_bench.cpp)
target_include_directories(bench_kernels PRIVATE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(bench_kernels PRIVATE wallfacer::runtime ${BLAS_LIBRARIES} CLI11::CLI11 fmt::fmt)
