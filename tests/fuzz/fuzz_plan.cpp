// libFuzzer target: plan files (docs/formats/plan.md). A plan that parses must write back to a
// file that parses to the same plan (read_plan(write_plan(p)) == p, plan.hpp).
#include <stdexcept>

#include <wallfacer/plan/plan.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  fuzz::quiet_logs();
  fuzz::expect_only_input_errors([&] {
    Plan plan = parse_plan(fuzz::as_text(data, size), "fuzz.yaml");
    const std::string written = plan_to_yaml(plan);
    Plan again;
    try {
      again = parse_plan(written, "written.yaml");
    } catch (const InputError& e) {
      throw std::logic_error(std::string("a parsed plan wrote a file its reader refuses: ") + e.what());
    }
    if (plan_to_yaml(again) != written) throw std::logic_error("a plan changed on a write and read back");
  });
  return 0;
}
