# Exporting plans to frameworks and launchers: group memberships recomputed from the exported
# text (Megatron-LM's documented rank order for its flags, the rank lists of the Python snippets,
# the rank file and host list) against the plan's groups and placement; refusals with reasons,
# the nearest expressible plan, and the `wallfacer export` command.
wallfacer_add_test(NAME test_export
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/export_test.cpp
  LIBS wallfacer::planner)
add_dependencies(test_export wallfacer)
