# The layering of docs/architecture.md, enforced by the build and proven here: each probe compiles
# probe.cpp, which includes one header, against one target. A private header must not be found
# through a component's public target (only through its _internal target), and an earlier stage
# must not see a later stage's headers. The positive probes show that the same header compiles
# where it is meant to, so a failing negative probe fails for the right reason.
#
# wallfacer_layering_probe(NAME target header ok|missing)
function(wallfacer_layering_probe name target header outcome)
  set(lib layering_probe_${name})
  add_library(${lib} OBJECT EXCLUDE_FROM_ALL ${CMAKE_CURRENT_LIST_DIR}/probe.cpp)
  target_link_libraries(${lib} PRIVATE ${target})
  target_compile_definitions(${lib} PRIVATE "WALLFACER_PROBE_HEADER=${header}")
  add_test(NAME layering.${name} COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target ${lib})
  # Probes run the build tool in this build tree; one at a time.
  set_tests_properties(layering.${name} PROPERTIES RESOURCE_LOCK build_tree)
  if(outcome STREQUAL "missing")
    string(REGEX REPLACE "^[<\"](.*)[>\"]$" "\\1" file "${header}")
    string(REPLACE "." "\\." file_regex "${file}")
    set_tests_properties(layering.${name} PROPERTIES WILL_FAIL FALSE
                         PASS_REGULAR_EXPRESSION "${file_regex}: No such file or directory")
  endif()
endfunction()

# Private headers: hidden behind the public target, reachable through the internal one.
wallfacer_layering_probe(topology_impl_hidden wallfacer::topology "\"topology_impl.hpp\"" missing)
wallfacer_layering_probe(topology_impl_internal wallfacer::topology_internal "\"topology_impl.hpp\"" ok)
wallfacer_layering_probe(strategies_hidden wallfacer::planner "\"strategies/common.hpp\"" missing)
wallfacer_layering_probe(strategies_internal wallfacer::schedule_internal "\"strategies/common.hpp\"" ok)
wallfacer_layering_probe(checker_detail_hidden wallfacer::check "\"checker_detail.hpp\"" missing)
wallfacer_layering_probe(checker_impl_hidden wallfacer::check "\"checker_impl.hpp\"" missing)
wallfacer_layering_probe(executor_impl_hidden wallfacer::runtime "\"executor_impl.hpp\"" missing)
wallfacer_layering_probe(replay_hidden wallfacer::simulator "\"replay.hpp\"" missing)
# Stages see the stages before them and not those after.
wallfacer_layering_probe(plan_sees_topology wallfacer::plan "<wallfacer/topology/topology.hpp>" ok)
wallfacer_layering_probe(topology_blind_to_plan wallfacer::topology "<wallfacer/plan/plan.hpp>" missing)
wallfacer_layering_probe(schedule_blind_to_cost wallfacer::schedule "<wallfacer/cost/cost_model.hpp>" missing)
wallfacer_layering_probe(cost_blind_to_search wallfacer::cost "<wallfacer/search/search.hpp>" missing)
wallfacer_layering_probe(check_blind_to_cost wallfacer::check "<wallfacer/cost/cost_model.hpp>" missing)
wallfacer_layering_probe(runtime_blind_to_simulator wallfacer::runtime "<wallfacer/simulator/simulator.hpp>" missing)
