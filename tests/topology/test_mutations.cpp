// Edited preset files (tests/common/text_mutations.hpp): the topology reader either accepts each
// one, giving a topology whose routes can be asked for, or rejects it with an InputError.
#include <gtest/gtest.h>

#include <map>
#include <typeinfo>

#include "planner/errors.hpp"
#include "planner/topology.hpp"
#include "tests/common/text_mutations.hpp"

namespace wallfacer {

// Generated from topologies/*.yaml (cmake/EmbedFiles.cmake), linked into the planner library.
extern const std::map<std::string, std::string>& embedded_topologies();

namespace {

TEST(TopologyMutations, EveryEditIsAcceptedOrAnInputError) {
  for (const char* preset : {"dgx-h100", "lab-mixed", "summit"}) {
    SCOPED_TRACE(preset);
    const std::string& text = embedded_topologies().at(preset);
    int rejected = 0;
    for (uint32_t i = 0; i < 120; ++i) {
      const std::string edited = testing::mutated(text, 1000 + i);
      try {
        const Topology topology = Topology::parse(edited, "t.yaml");
        const int last = topology.num_gpus() - 1;
        EXPECT_EQ(topology.route(0, last).dst_gpu, last) << "edit " << i;
      } catch (const InputError&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "edit " << i << " escaped as " << typeid(e).name() << ": " << e.what() << "\n" << edited;
      }
    }
    EXPECT_GT(rejected, 40);  // the edits reach the checks
  }
}

}  // namespace
}  // namespace wallfacer
