# The CUDA backend where a GPU is not needed: `wallfacer run --backend cuda` and `wallfacer train
# --backend cuda` fail cleanly (exit 2)
# in builds without CUDA and on machines without a GPU, and, in CUDA builds, the gpu-check bundle
# builds and every library its binaries need resolves inside it (apart from glibc, CUDA and the
# driver); a bundle missing a library is refused; its gpu-check stops with status 2 where there is no
# GPU. The GPU checks themselves are scripts/gpu-check.
if(TARGET wallfacer AND TARGET runtime_test_plan)
  set(_cuda_dir ${CMAKE_CURRENT_BINARY_DIR}/cuda_cli)
  file(MAKE_DIRECTORY ${_cuda_dir})
  add_test(NAME cuda_plan_ring4
           COMMAND runtime_test_plan plan ring 4 ${_cuda_dir}/ring4.yaml)
  set_tests_properties(cuda_plan_ring4 PROPERTIES FIXTURES_SETUP cuda_plan_ring4)
  add_test(NAME cuda_plan_train_zigzag2
           COMMAND $<TARGET_FILE:wallfacer> plan --model gpt-tiny --seq 128 --batch 2 --tp 1 --pp 1 --strategy zigzag
                   --gpus 2 --dp 1 --out ${_cuda_dir}/train_zigzag2.yaml)
  set_tests_properties(cuda_plan_train_zigzag2 PROPERTIES FIXTURES_SETUP cuda_plan_train_zigzag2)
  add_test(NAME cuda_plan_train_zigzag4
           COMMAND $<TARGET_FILE:wallfacer> plan --model gpt-tiny --seq 128 --batch 2 --tp 1 --pp 1 --strategy zigzag
                   --gpus 4 --dp 1 --out ${_cuda_dir}/train_zigzag4.yaml)
  set_tests_properties(cuda_plan_train_zigzag4 PROPERTIES FIXTURES_SETUP cuda_plan_train_zigzag4)
  if(WALLFACER_CUDA_ENABLED)
    # With a GPU the run must pass its checks; without one it must say so and exit 2.
    add_test(NAME cuda_run_ring4
             COMMAND sh -c "\"$@\" 2>&1; echo \"exit status $?\"" sh $<TARGET_FILE:wallfacer> run
                     --plan ${_cuda_dir}/ring4.yaml --check --backend cuda)
    set_tests_properties(cuda_run_ring4 PROPERTIES FIXTURES_REQUIRED cuda_plan_ring4 PASS_REGULAR_EXPRESSION
                         "(backend cuda-local.*all checks passed.*exit status 0|no usable CUDA device here: .*exit status 2)")

    # Training on the GPU (2 ranks on one GPU): with a GPU, 20 steps' losses within 1e-3 of the
    # CPU run's; without one, exit 2 naming the missing GPU.
    add_test(NAME cuda_train_zigzag2
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/train_cuda.sh $<TARGET_FILE:wallfacer> ${_cuda_dir}/train_zigzag2.yaml 20
                     1e-3 ${_cuda_dir}/train_zigzag2)
    set_tests_properties(cuda_train_zigzag2 PROPERTIES FIXTURES_REQUIRED cuda_plan_train_zigzag2 PASS_REGULAR_EXPRESSION
                         "(cuda and cpu losses agree.*exit status 0|no usable CUDA device here: .*exit status 2)")

    set(_bundle ${CMAKE_CURRENT_BINARY_DIR}/gpu-bundle)
    add_test(NAME cuda_gpu_check_bundle
             COMMAND ${PROJECT_SOURCE_DIR}/scripts/gpu-check --bundle ${_bundle} --build-dir ${PROJECT_BINARY_DIR})
    set_tests_properties(cuda_gpu_check_bundle PROPERTIES FIXTURES_SETUP cuda_bundle PASS_REGULAR_EXPRESSION
                         "bundle ok: .* libraries in")
    # The same bundle without libfmt must be refused, naming the library.
    add_test(NAME cuda_gpu_check_bundle_incomplete
             COMMAND sh -c "rm -rf \"$1.broken\" && cp -r \"$1\" \"$1.broken\" && rm \"$1.broken\"/lib/libfmt.so* && \
\"$2\" --verify \"$1.broken\"; echo \"exit status $?\"" sh ${_bundle} ${PROJECT_SOURCE_DIR}/scripts/gpu-check)
    set_tests_properties(cuda_gpu_check_bundle_incomplete PROPERTIES FIXTURES_REQUIRED cuda_bundle
                         PASS_REGULAR_EXPRESSION "needs libfmt.*bundle NOT ok.*exit status 1")
    # The run mode from the bundle: with a GPU every check must pass; without one it must stop at
    # once, saying so, with status 2.
    add_test(NAME cuda_gpu_check_run
             COMMAND sh -c "\"$1\"/gpu-check --quick --out \"$1\"/results.json 2>&1; echo \"exit status $?\"" sh ${_bundle})
    set_tests_properties(cuda_gpu_check_run PROPERTIES FIXTURES_REQUIRED cuda_bundle PASS_REGULAR_EXPRESSION
                         "(no usable CUDA device here.*nothing was checked.*exit status 2|figures written to.*exit status 0)")
    # srun without MPI (--bootstrap env), two tasks on localhost for a 4-rank plan: both meet over
    # TCP, agree that preparation failed (no GPU here, or 2 processes for 4 ranks), and exit 2.
    add_test(NAME cuda_run_bootstrap_env
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/bootstrap_env.sh $<TARGET_FILE:wallfacer> ${_cuda_dir}/ring4.yaml
                     ${_cuda_dir}/bootstrap_env)
    set_tests_properties(cuda_run_bootstrap_env PROPERTIES FIXTURES_REQUIRED cuda_plan_ring4 PASS_REGULAR_EXPRESSION
                         "(no usable CUDA device here|the plan has 4 ranks but 2 processes).*rank 0 exit status 2.*rank 1 exit status 2")
    # `train --backend cuda` over NCCL started as srun would, two tasks for a 4-rank plan: both stop
    # in preparation (no GPU here, or 2 processes for 4 ranks) with status 2, no rank left waiting.
    add_test(NAME cuda_train_bootstrap_env
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/bootstrap_env.sh $<TARGET_FILE:wallfacer> ${_cuda_dir}/train_zigzag4.yaml
                     ${_cuda_dir}/train_bootstrap_env train --steps 1)
    set_tests_properties(cuda_train_bootstrap_env PROPERTIES FIXTURES_REQUIRED cuda_plan_train_zigzag4
                         PASS_REGULAR_EXPRESSION
                         "(no usable CUDA device here|the plan has 4 ranks but 2 processes).*rank 0 exit status 2.*rank 1 exit status 2")
    # The staging adapter of gpu-check's training comparison, without a GPU: trained through it with
    # the CPU kernels on host memory, the losses must equal the CPU run's exactly.
    add_test(NAME cuda_gpu_train_staging COMMAND $<TARGET_FILE:wallfacer_gpu_step_kernels> --self-check-staging
                                                 --train-steps 3)
  else()
    add_test(NAME cuda_run_without_cuda
             COMMAND sh -c "\"$@\" 2>&1; echo \"exit status $?\"" sh $<TARGET_FILE:wallfacer> run
                     --plan ${_cuda_dir}/ring4.yaml --backend cuda)
    set_tests_properties(cuda_run_without_cuda PROPERTIES FIXTURES_REQUIRED cuda_plan_ring4 PASS_REGULAR_EXPRESSION
                         "this build has no CUDA support.*exit status 2")
    add_test(NAME cuda_train_without_cuda
             COMMAND sh -c "\"$@\" 2>&1; echo \"exit status $?\"" sh $<TARGET_FILE:wallfacer> train
                     --plan ${_cuda_dir}/train_zigzag2.yaml --steps 1 --backend cuda)
    set_tests_properties(cuda_train_without_cuda PROPERTIES FIXTURES_REQUIRED cuda_plan_train_zigzag2
                         PASS_REGULAR_EXPRESSION "this build has no CUDA support.*exit status 2")
  endif()
endif()

# The tensor-core kernels' index arithmetic and their tile algorithm, emulated on the CPU against
# the fp64 reference: every build, CUDA or not (no GPU runs here).
wallfacer_add_test(NAME flash_layout_test SOURCES cuda/flash_layout_test.cpp cuda/flash_emulation_test.cpp
                   LIBS wallfacer::cuda_flash_layout wallfacer::runtime TEST_PREFIX cuda.)
# The cuBLASLt GEMMs' row-major to column-major mapping, host-side (CUDA builds; no GPU needed).
if(WALLFACER_CUDA_ENABLED)
  find_package(CUDAToolkit REQUIRED)  # its targets are scoped to the directory that finds it
  wallfacer_add_test(NAME test_cublaslt_mapping
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cublaslt_mapping_test.cpp
    LIBS wallfacer::runtime_cuda CUDA::cudart)
  target_include_directories(test_cublaslt_mapping PRIVATE ${PROJECT_SOURCE_DIR}/runtime/cuda)
  # cuBLASLt's start-up (about 0.3 s) is paid only where GEMMs run: the CLI must not need it.
  if(TARGET wallfacer)
    add_test(NAME cuda_cli_does_not_link_cublaslt COMMAND readelf -d $<TARGET_FILE:wallfacer>)
    set_tests_properties(cuda_cli_does_not_link_cublaslt PROPERTIES PASS_REGULAR_EXPRESSION "NEEDED.*libcudart"
                         FAIL_REGULAR_EXPRESSION "libcublasLt")
  endif()
endif()
