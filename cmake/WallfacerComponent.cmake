# wallfacer_component(NAME name SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...]): one library of
# the pipeline, wallfacer::<name>. Public headers live in <dir>/include/wallfacer/<...>/ and are
# included as <wallfacer/...>; everything else in the component's folder (sources and *_impl,
# *_detail headers) is private. Tests that exercise the internals link wallfacer::<name>_internal,
# which adds the component's folder to their include path, so reaching into a component is an
# explicit choice written in the test's CMake, never an accident of the include path.
function(wallfacer_component)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target wallfacer_${ARG_NAME})
  add_library(${target} ${ARG_SOURCES})
  add_library(wallfacer::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})

  add_library(${target}_internal INTERFACE)
  add_library(wallfacer::${ARG_NAME}_internal ALIAS ${target}_internal)
  target_include_directories(${target}_internal INTERFACE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target}_internal INTERFACE ${target} ${ARG_PRIVATE_DEPS})
endfunction()
