# The analytic cost model: calibration, contention, closed forms of docs/algorithms.md §10 and
# §11, the list schedule of rank programs, where the step goes and the memory model.
wallfacer_add_test(NAME test_cost
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/calibration_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/network_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/closed_form_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/timeline_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/timeline_fold_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/timeline_classes_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/lone_bounds_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/layer_composition_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_cost_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_shortcut_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/columns_ahead_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/step_parts_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/interleaved_cost_test.cpp
  LIBS wallfacer::cost_internal wallfacer::planner)
