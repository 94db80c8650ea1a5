// libFuzzer target: topology files (docs/formats/topology.md), explicit and compact forms. A
// topology that parses must also summarise, route between its first and last GPU and hash.
#include <wallfacer/topology/topology.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  fuzz::quiet_logs();
  fuzz::expect_only_input_errors([&] {
    Topology t = Topology::parse(fuzz::as_text(data, size), "fuzz.yaml");
    (void)summarize(t);
    (void)t.content_hash();
    if (t.num_gpus() > 1 && t.num_gpus() <= 4096) (void)t.route(0, t.num_gpus() - 1);
  });
  return 0;
}
