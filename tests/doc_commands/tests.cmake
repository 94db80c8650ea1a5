# The commands shown in README.md and docs/**/*.md, run with the expectations written next to them
# (docs/doc-tests.md), one test per document; and the harness's own tests on in-memory markdown.
wallfacer_add_test(NAME test_doc_commands
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/doc_blocks.cpp
          ${CMAKE_CURRENT_LIST_DIR}/shell_run.cpp
          ${CMAKE_CURRENT_LIST_DIR}/doc_run.cpp
          ${CMAKE_CURRENT_LIST_DIR}/doc_commands_test.cpp
          ${CMAKE_CURRENT_LIST_DIR}/harness_test.cpp
  TEST_PREFIX doc_commands.)
add_dependencies(test_doc_commands wallfacer)

# The documents, one test each, are listed when the test is built; the glob is redone at every
# build (CONFIGURE_DEPENDS), so a new document gets its test without a manual re-configure.
file(GLOB_RECURSE _wallfacer_docs CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/docs/*.md)
list(SORT _wallfacer_docs)
set(_wallfacer_doc_list "\"README.md\",\n")
foreach(doc IN LISTS _wallfacer_docs)
  string(APPEND _wallfacer_doc_list "\"${doc}\",\n")
endforeach()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/doc_commands/documents.inc CONTENT "${_wallfacer_doc_list}")
target_include_directories(test_doc_commands PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/doc_commands)
