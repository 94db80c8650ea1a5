# References in docs and comments must resolve inside the repository: .md paths to its files,
# section numbers to headings of the cited page, source paths and headers to files that exist, and
# no absolute paths of one machine. Rules in references_test.cpp. Reads the source tree at run
# time; links nothing of the project.
wallfacer_add_test(NAME test_docs
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/reference_check.cpp
          ${CMAKE_CURRENT_LIST_DIR}/references_test.cpp)
