# The Qt6 GUI (built only where Qt is found, WALLFACER_GUI): the scenes' contents for two DGX H100
# nodes with a WallFacer plan and for 1,024 GPUs, link load and traces from real simulations, the
# window's error dialogs, its worker thread and export, and wallfacer-gui's screenshots of every
# view (offscreen, and once on a real X display under Xvfb).
if(TARGET wallfacer_gui)
  wallfacer_add_test(NAME test_gui
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/scene_test.cpp
            ${CMAKE_CURRENT_LIST_DIR}/window_test.cpp
    LIBS wallfacer::gui wallfacer::planner wallfacer::simulator nlohmann_json::nlohmann_json)
  # window_test.cpp runs build/bin/wallfacer-gui.
  add_dependencies(test_gui wallfacer-gui)
endif()
