# The trainer: gradients against finite differences and the single process, multi-rank training
# against one rank for every strategy, ZeRO stages, checkpoints and resume, the long-range task.
wallfacer_add_test(NAME test_train
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_fixtures.cpp
          ${CMAKE_CURRENT_LIST_DIR}/gradient_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/equality_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/resume_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/recall_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/session_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_program_test.cpp
  LIBS wallfacer::train wallfacer::planner fmt::fmt)

# The trainer on a backend whose memory the host cannot touch (as a GPU's), against host memory;
# the memory `wallfacer train` measures before it allocates, against a real run's.
wallfacer_add_test(NAME test_train_device_memory
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_fixtures.cpp
          ${CMAKE_CURRENT_LIST_DIR}/shadow_backend.cpp
          ${CMAKE_CURRENT_LIST_DIR}/device_memory_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/train_memory_test.cpp
  LIBS wallfacer::train wallfacer::planner fmt::fmt)

# The trainer over the NCCL transport's host logic: the step's device plan, verified, and training
# with every post held until the plan releases its call, against the threads backend.
wallfacer_add_test(NAME test_train_device_plan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_fixtures.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_device_plan_test.cpp
  LIBS wallfacer::train wallfacer::device_plan wallfacer::planner fmt::fmt)

# ---- `wallfacer train` end to end ---------------------------------------------------------------
if(TARGET wallfacer)
  set(_train_dir ${CMAKE_CURRENT_BINARY_DIR}/train_cli)
  set(_wf $<TARGET_FILE:wallfacer>)
  set(_text ${PROJECT_SOURCE_DIR}/README.md)  # any text file trains
  file(MAKE_DIRECTORY ${_train_dir})
  # wallfacer_train_plan(NAME plan options...): plan fixture train_plan_NAME of the gpt-tiny preset.
  function(wallfacer_train_plan name)
    add_test(NAME train_plan_${name}
             COMMAND ${_wf} plan --model gpt-tiny --seq 128 --batch 2 --tp 1 --pp 1 --out ${_train_dir}/${name}.yaml
                     ${ARGN})
    set_tests_properties(train_plan_${name} PROPERTIES FIXTURES_SETUP train_plan_${name})
  endfunction()
  # A command whose combined output must match `regex` and whose exit status must be `status`.
  function(wallfacer_train_cli_test name fixture status regex)
    add_test(NAME ${name} COMMAND sh -c "\"$@\" 2>&1; echo \"exit status $?\"" sh ${ARGN})
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${fixture}" TIMEOUT 300
                                            PASS_REGULAR_EXPRESSION "${regex}.*exit status ${status}")
  endfunction()
  wallfacer_train_plan(zigzag2 --strategy zigzag --gpus 2 --dp 1)
  wallfacer_train_plan(lss4 --strategy lss --gpus 4 --dp 2 --zero-stage 1)
  wallfacer_train_cli_test(train_cli_local train_plan_zigzag2 0 "trained zigzag on 2 ranks.*loss [0-9.]+ -> [0-9.]+"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --data ${_text} --steps 3 --backend local)
  wallfacer_train_cli_test(train_cli_json train_plan_zigzag2 0 "\"step\":3,.*\"loss\":"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --data ${_text} --steps 3 --json)
  wallfacer_train_cli_test(train_cli_missing_data train_plan_zigzag2 2 "no_such_file.txt"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --data ${_train_dir}/no_such_file.txt)
  wallfacer_train_cli_test(train_cli_recall_too_short train_plan_zigzag2 2 "recall task: 'seq_len' is 128"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --recall-pairs 20 --recall-key-len 3)
  wallfacer_train_cli_test(train_cli_recall_pairs_named train_plan_zigzag2 2
                           "--recall-pairs: error: recall task: 'pairs' is 1000, expected 1 to the sequence length [(]128[)]"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --recall-pairs 1000)
  wallfacer_train_cli_test(train_cli_recall_curriculum_window train_plan_zigzag2 2 "'curriculum_length' is 16"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --recall-curriculum-length 16
                           --recall-curriculum-copies 8 --recall-curriculum-steps 10)
  wallfacer_train_cli_test(train_cli_rotary_base_refused train_plan_zigzag2 2 "--rotary-base"
                           ${_wf} train --plan ${_train_dir}/zigzag2.yaml --rotary-base 1)
  wallfacer_train_cli_test(train_cli_resume_local train_plan_zigzag2 0 "resumed losses equal"
                           ${CMAKE_CURRENT_LIST_DIR}/resume_cli.sh ${_train_dir}/resume_local
                           ${_train_dir}/zigzag2.yaml ${_text} ${_wf})
  wallfacer_train_cli_test(train_cli_killed_checkpoint_write train_plan_zigzag2 0 "resumed losses equal"
                           ${CMAKE_CURRENT_LIST_DIR}/kill_cli.sh ${_train_dir}/killed_local
                           ${_train_dir}/zigzag2.yaml ${_text} ${_wf})
  add_test(NAME train_plan_tp2 COMMAND ${_wf} plan --model gpt-tiny --seq 128 --strategy ring --gpus 2 --tp 2 --pp 1
                                       --out ${_train_dir}/tp2.yaml)
  set_tests_properties(train_plan_tp2 PROPERTIES FIXTURES_SETUP train_plan_tp2)
  wallfacer_train_cli_test(train_cli_tensor_parallel_refused train_plan_tp2 2
                           "tp2.yaml: error: the trainer runs data x sequence parallel plans"
                           ${_wf} train --plan ${_train_dir}/tp2.yaml --steps 1)
  # A plan whose memory does not fit is refused before anything is allocated: 8 ranks of Llama-3-8B,
  # each holding the 8B parameters, their gradients and AdamW moments (over 1 TB in all).
  add_test(NAME train_plan_llama8b8 COMMAND ${_wf} plan --model llama-3-8b --seq 8192 --batch 1 --strategy ring
                                            --gpus 8 --dp 1 --tp 1 --pp 1 --zero-stage 1 --checkpointing none
                                            --out ${_train_dir}/llama8b8.yaml)
  set_tests_properties(train_plan_llama8b8 PROPERTIES FIXTURES_SETUP train_plan_llama8b8)
  wallfacer_train_cli_test(train_cli_memory_refused train_plan_llama8b8 2
                           "llama8b8.yaml: error: training this plan needs about [0-9.]+ [GT]iB of host memory here \\(8 ranks"
                           ${_wf} train --plan ${_train_dir}/llama8b8.yaml --steps 1)
  # A truncated checkpoint is refused before any step, naming the file.
  wallfacer_train_cli_test(train_cli_truncated_checkpoint train_plan_zigzag2 2 "rank-0.ckpt: error: checkpoint"
                           sh -c "rm -rf ${_train_dir}/trunc && ${_wf} train --plan ${_train_dir}/zigzag2.yaml \
--data ${_text} --steps 2 --checkpoint ${_train_dir}/trunc >/dev/null 2>&1 && \
truncate -s 64 ${_train_dir}/trunc/step-2/rank-0.ckpt && ${_wf} train --plan ${_train_dir}/zigzag2.yaml \
--data ${_text} --steps 4 --checkpoint ${_train_dir}/trunc --resume")
  if(WALLFACER_MPI_ENABLED)
    set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
    wallfacer_train_cli_test(train_cli_mpirun_lss4 train_plan_lss4 0 "trained lss on 4 ranks \\(backend mpi"
                             ${_mpirun} -np 4 ${_wf} train --plan ${_train_dir}/lss4.yaml --data ${_text} --steps 3)
    wallfacer_train_cli_test(train_cli_resume_mpirun train_plan_lss4 0 "resumed losses equal"
                             ${CMAKE_CURRENT_LIST_DIR}/resume_cli.sh ${_train_dir}/resume_mpi
                             ${_train_dir}/lss4.yaml ${_text} ${_mpirun} -np 4 ${_wf})
    wallfacer_train_cli_test(train_cli_killed_checkpoint_write_mpirun train_plan_lss4 0 "resumed losses equal"
                             ${CMAKE_CURRENT_LIST_DIR}/kill_cli.sh ${_train_dir}/killed_mpi
                             ${_train_dir}/lss4.yaml ${_text} ${_mpirun} -np 4 ${_wf})
    # Under mpirun too a bad checkpoint is bad input on every rank (exit 2), found before any step.
    set(_mpirun_sh "${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root")  # one word list for sh -c
    wallfacer_train_cli_test(train_cli_mpirun_truncated_checkpoint train_plan_lss4 2 "rank-1.ckpt: error: checkpoint"
                             sh -c "rm -rf ${_train_dir}/trunc_mpi && ${_mpirun_sh} -np 4 ${_wf} train --plan \
${_train_dir}/lss4.yaml --data ${_text} --steps 2 --checkpoint ${_train_dir}/trunc_mpi >/dev/null 2>&1 && \
truncate -s 64 ${_train_dir}/trunc_mpi/step-2/rank-1.ckpt && ${_mpirun_sh} -np 4 ${_wf} train --plan \
${_train_dir}/lss4.yaml --data ${_text} --steps 4 --checkpoint ${_train_dir}/trunc_mpi --resume")
    wallfacer_train_cli_test(train_cli_mpirun_rank_mismatch train_plan_lss4 2
                             "the plan has 4 ranks but 2 processes were started"
                             ${_mpirun} -np 2 ${_wf} train --plan ${_train_dir}/lss4.yaml --data ${_text})
  endif()
endif()
