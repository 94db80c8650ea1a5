# The host-side device plan of GPU runs (wallfacer::device_plan), in every build: NCCL call rounds,
# communicator splits and streams derived from every strategy's schedule, checked by the
# independent verifier, which must also reject broken plans.
wallfacer_add_test(NAME test_device_plan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_plan_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/../runtime/hand_programs.cpp
  LIBS wallfacer::device_plan wallfacer::planner fmt::fmt)
wallfacer_add_test(NAME test_device_plan_sequenced
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sequenced_backend_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/../runtime/hand_programs.cpp
  LIBS wallfacer::device_plan wallfacer::runtime wallfacer::planner fmt::fmt)
# Starting GPU runs without MPI: the scheduler's variables and the TCP control channel, with
# several ranks as threads on localhost.
wallfacer_add_test(NAME test_rendezvous
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rendezvous_test.cpp
  LIBS wallfacer::device_plan Threads::Threads)
