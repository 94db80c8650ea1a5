// Edited preset files (tests/common/text_mutations.hpp): the topology reader either accepts each
// one, giving a topology whose routes can be asked for, or rejects it with an InputError.
#include <gtest/gtest.h>

#include <map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/text_mutations.hpp"

namespace wallfacer {

// Generated from topologies/*.yaml (cmake/EmbedFiles.cmake), linked into the planner library.
extern const std::map<std::string, std::string>& embedded_topologies();

namespace {

TEST(TopologyMutations, EveryEditIsAcceptedOrAnInputError) {
  for (const char* preset : {"dgx-h100", "lab-mixed", "summit"}) {
    SCOPED_TRACE(preset);
    const std::string& text = embedded_topologies().at(preset);
    const int rejected = testing::rejected_edits(text, 1000, 120, [](const std::string& edited) {
      const Topology topology = Topology::parse(edited, "t.yaml");
      const int last = topology.num_gpus() - 1;
      EXPECT_EQ(topology.route(0, last).dst_gpu, last);
    });
    EXPECT_GT(rejected, 40);  // the edits reach the checks
  }
}

}  // namespace
}  // namespace wallfacer
