# Topology model: presets, routing against hand-computed figures and brute force, malformed
# inputs with their exact messages, scale, the `wallfacer topo` command, and importing NCCL XML and
# nvidia-smi matrices (tests/topology/fixtures/README.md).
wallfacer_add_test(NAME test_topology
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_presets.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_routing.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_errors.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_mutations.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_scale.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_cli.cpp
    ${CMAKE_CURRENT_SOURCE_DIR}/topology/test_import.cpp
  LIBS wallfacer::planner yaml-cpp nlohmann_json::nlohmann_json)
# test_cli.cpp runs build/bin/wallfacer.
add_dependencies(test_topology wallfacer)
