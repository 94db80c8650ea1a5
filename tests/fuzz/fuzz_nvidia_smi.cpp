// libFuzzer target: the `nvidia-smi topo -m` matrix import (docs/topology-import.md). As for
// the NCCL XML, what a successful import writes must be a topology the reader accepts.
#include <stdexcept>

#include <wallfacer/topology/import.hpp>
#include <wallfacer/topology/topology.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  fuzz::quiet_logs();
  ImportResult imported;
  try {
    imported = import_nvidia_smi_topology(fuzz::as_text(data, size), "fuzz.txt", ImportOptions{});
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
