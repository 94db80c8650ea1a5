// How a candidate of the topology scheduler names its parameters and placement in the ranking
// (search.hpp).
#include <wallfacer/search/search.hpp>

#include <fmt/format.h>

#include <string>
#include <variant>

namespace wallfacer {

std::string Candidate::describe_params() const {
  const StrategyParams& p = plan.params;
  struct Describe {
    int S;
    std::string operator()(const NoKnobs&) const { return fmt::format("S={}", S); }
    std::string operator()(const UspKnobs& k) const { return fmt::format("u={} r={}", k.ulysses, k.ring); }
    std::string operator()(const DoubleRingKnobs& k) const {
      return k.ulysses > 1 ? fmt::format("u={} w={}", k.ulysses, k.window) : fmt::format("w={}", k.window);
    }
    std::string operator()(const WallFacerKnobs& k) const { return fmt::format("C={}", k.team); }
  };
  std::string text = std::visit(Describe{p.sequence_parallel}, p.knobs);
  if (p.data_parallel > 1) text += fmt::format(" D={}", p.data_parallel);
  if (p.tensor_parallel > 1) text += fmt::format(" T={}", p.tensor_parallel);
  if (p.pipeline_parallel > 1) text += fmt::format(" P={}", p.pipeline_parallel);
  if (p.virtual_stages > 1) text += fmt::format(" V={}", p.virtual_stages);
  if (plan.workload.microbatches > 1) text += fmt::format(" M={}", plan.workload.microbatches);
  if (chose_memory_settings)
    text += fmt::format(" Z{}/{}", plan.workload.zero_stage, to_string(plan.workload.checkpointing)[0]);
  return text;
}

std::string Candidate::describe_placement() const {
  std::string text = to_string(placement_of(plan.params));
  bool identity = true;
  for (size_t i = 0; i < local_order.size(); ++i)
    identity = identity && local_order[i] == int(i);
  if (!identity) {
    text += " order=";
    for (size_t i = 0; i < local_order.size(); ++i)
      text += fmt::format("{}{}", i ? "," : "", local_order[i]);
  }
  return text;
}

}  // namespace wallfacer
