# The runtime: .npy I/O, the executor on hand-built schedules and on every strategy's schedule
# (local threads backend, against the fp64 naive reference), and `wallfacer run` under mpirun.
wallfacer_add_test(NAME test_runtime
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/npy_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/executor_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/hand_programs.cpp
  LIBS wallfacer::runtime wallfacer::planner fmt::fmt)
wallfacer_add_test(NAME test_runtime_strategies
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/strategies_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/hand_programs.cpp
  LIBS wallfacer::runtime wallfacer::planner fmt::fmt)

# ---- `wallfacer run` end to end -----------------------------------------------------------------
# runtime_test_plan writes plans (make_plan on the dgx-h100 preset) and .npy inputs; each run test
# depends on its plan through a fixture. Error tests pass when the output names the problem and
# the exit status is 2.
if(TARGET wallfacer)
  add_executable(runtime_test_plan ${CMAKE_CURRENT_LIST_DIR}/make_test_plan.cpp)
  target_link_libraries(runtime_test_plan PRIVATE wallfacer::runtime wallfacer::planner CLI11::CLI11 fmt::fmt)
  target_include_directories(runtime_test_plan PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  add_dependencies(runtime_test_plan wallfacer)  # the tests it prepares run build/bin/wallfacer
  set(WALLFACER_RUNTIME_TEST_DIR ${CMAKE_CURRENT_BINARY_DIR}/runtime_cli)

  # wallfacer_runtime_plan(NAME strategy ranks [generator options...]): plan fixture runtime_plan_NAME.
  function(wallfacer_runtime_plan name strategy ranks)
    add_test(NAME runtime_plan_${name}
             COMMAND runtime_test_plan plan ${strategy} ${ranks} ${WALLFACER_RUNTIME_TEST_DIR}/${name}.yaml ${ARGN})
    set_tests_properties(runtime_plan_${name} PROPERTIES FIXTURES_SETUP runtime_plan_${name})
  endfunction()

  # A command whose combined output must match `regex` and whose exit status must be `status`.
  function(wallfacer_runtime_cli_test name fixture status regex)
    add_test(NAME ${name} COMMAND sh -c "\"$@\" 2>&1; echo \"exit status $?\"" sh ${ARGN})
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${fixture}" TIMEOUT 300
                                            PASS_REGULAR_EXPRESSION "${regex}.*exit status ${status}")
  endfunction()

  set(_run $<TARGET_FILE:wallfacer> run)
  set(_dir ${WALLFACER_RUNTIME_TEST_DIR})
  wallfacer_runtime_plan(ring4 ring 4)
  # Local threads backend: checks, inputs from .npy, and the input errors.
  wallfacer_runtime_cli_test(runtime_run_local_ring4 runtime_plan_ring4 0 "dv .*OK.*all checks passed"
                             ${_run} --plan ${_dir}/ring4.yaml --check --backend local)
  wallfacer_runtime_cli_test(runtime_run_json runtime_plan_ring4 0 "\"ok\": true.*\"ranks\": 4"
                             ${_run} --plan ${_dir}/ring4.yaml --check --json --backend local)
  add_test(NAME runtime_inputs_good COMMAND runtime_test_plan inputs ${_dir}/inputs_good)
  add_test(NAME runtime_inputs_short COMMAND runtime_test_plan inputs ${_dir}/inputs_short --seq 32)
  set_tests_properties(runtime_inputs_good PROPERTIES FIXTURES_SETUP runtime_inputs_good)
  set_tests_properties(runtime_inputs_short PROPERTIES FIXTURES_SETUP runtime_inputs_short)
  wallfacer_runtime_cli_test(runtime_run_load_npy "runtime_plan_ring4;runtime_inputs_good" 0 "all checks passed"
                             ${_run} --plan ${_dir}/ring4.yaml --load ${_dir}/inputs_good --check --backend local)
  wallfacer_runtime_cli_test(runtime_run_load_wrong_shape "runtime_plan_ring4;runtime_inputs_short" 2
                             "q.npy: error: shape \\[1, 32, 4, 16\\].*expected \\[1, 64, 4, 16\\]"
                             ${_run} --plan ${_dir}/ring4.yaml --load ${_dir}/inputs_short --backend local)
  wallfacer_runtime_cli_test(runtime_run_load_missing runtime_plan_ring4 2 "no_such_dir/q.npy: error: cannot open"
                             ${_run} --plan ${_dir}/ring4.yaml --load ${_dir}/no_such_dir --backend local)
  wallfacer_runtime_cli_test(runtime_run_topology_mismatch runtime_plan_ring4 2 "error: .*dgx-a100"
                             ${_run} --plan ${_dir}/ring4.yaml --topology dgx-a100 --backend local)

  if(WALLFACER_MPI_ENABLED)
    set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
    # wallfacer_runtime_mpi_test(NAME ranks strategy [generator options...]) with --check.
    function(wallfacer_runtime_mpi_test name ranks strategy)
      wallfacer_runtime_plan(${name} ${strategy} ${ranks} ${ARGN})
      wallfacer_runtime_cli_test(runtime_mpirun_${name} runtime_plan_${name} 0 "backend mpi.*all checks passed"
                                 ${_mpirun} -np ${ranks} ${_run} --plan ${_dir}/${name}.yaml --check)
    endfunction()
    wallfacer_runtime_mpi_test(ring1 1 ring)
    wallfacer_runtime_mpi_test(ring2_full 2 ring --full --seq 50)
    wallfacer_runtime_mpi_test(zigzag4 4 zigzag)
    wallfacer_runtime_mpi_test(ulysses4 4 ulysses --heads 8 --kv-heads 4)
    wallfacer_runtime_mpi_test(usp4 4 usp --ulysses 2)
    wallfacer_runtime_mpi_test(double_ring8 8 double-ring --seq 96)
    wallfacer_runtime_mpi_test(allgather2 2 allgather)
    wallfacer_runtime_mpi_test(wallfacer4_c2 4 wallfacer --team 2 --placement collect-intra)
    wallfacer_runtime_mpi_test(wallfacer8_c2_p2p 8 wallfacer --team 2 --placement p2p-intra --seq 96)
    wallfacer_runtime_mpi_test(lss4_dp2 4 lss --batch 2 --data-parallel 2)
    wallfacer_runtime_cli_test(runtime_mpirun_fp64 runtime_plan_ring4 0 "fp64.*all checks passed"
                               ${_mpirun} -np 4 ${_run} --plan ${_dir}/ring4.yaml --check --fp64)
    # Compute sliced into 8-row pieces with MPI progress calls between them.
    wallfacer_runtime_cli_test(runtime_mpirun_sliced runtime_plan_ring4 0 "all checks passed"
                               ${_mpirun} -np 4 ${_run} --plan ${_dir}/ring4.yaml --check --progress-rows 8)
    wallfacer_runtime_cli_test(runtime_mpirun_rank_mismatch runtime_plan_ring4 2
                               "the plan has 4 ranks but 2 processes were started"
                               ${_mpirun} -np 2 ${_run} --plan ${_dir}/ring4.yaml --check)
  endif()
endif()
