// libFuzzer target: NCCL topology XML import (docs/topology-import.md). What the importer
// writes must be a topology file the topology reader accepts: an import that succeeds and
// yields an unreadable file would be a wrong answer, so that escapes as an error.
#include <stdexcept>

#include <wallfacer/topology/import.hpp>
#include <wallfacer/topology/topology.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  fuzz::quiet_logs();
  ImportResult imported;
  try {
    imported = import_nccl_topology_xml(fuzz::as_text(data, size), "fuzz.xml", ImportOptions{});
  } catch (const InputError&) {
    return 0;
  }
  try {
    (void)Topology::parse(imported.yaml, "imported.yaml");
  } catch (const InputError& e) {
    throw std::logic_error(std::string("the import wrote a topology its reader refuses: ") + e.what() + "\n" +
                           imported.yaml);
  }
  return 0;
}
