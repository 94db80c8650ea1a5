# The SimGrid simulator: closed forms on hand-built topologies and schedules, collectives, the
# schedule's execution rules, the Chrome trace, real strategies against the cost model, the exact
# shortcuts against the literal platform, the whole training step, and the plan/simulate commands
# (with the explanation of a ranking and plans made from topology files), and cancelling a replay.
wallfacer_add_test(NAME test_simulator
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/closed_form_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/collective_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/semantics_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/trace_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/strategy_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cli_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/shortcuts_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/threads_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/plan_explain_cli_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cancel_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/compose_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/interleaved_step_test.cpp
  LIBS wallfacer::simulator_internal wallfacer::planner fmt::fmt nlohmann_json::nlohmann_json)
# cli_test.cpp runs build/bin/wallfacer.
add_dependencies(test_simulator wallfacer)
