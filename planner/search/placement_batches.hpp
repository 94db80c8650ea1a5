// Candidates in batches of those that differ only in their placement, which build the same
// programs (StepBoundMemo): the search bounds a batch on one thread, one candidate after the other.
#pragma once

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer::detail {

// `items` in batches of those whose plans (`plan_of(item)`) are equal but for their placement,
// each batch where its first member is in `items`, its members in their order there.
template <typename Item, typename PlanOf>
std::vector<std::vector<Item*>> placement_batches(const std::vector<Item*>& items, PlanOf&& plan_of) {
  std::vector<std::vector<Item*>> batches;
  // Batches by strategy and degrees, to compare a plan with few others.
  std::map<std::tuple<StrategyKind, int, int, int, int, int>, std::vector<size_t>> by_degrees;
  for (Item* item : items) {
    const Plan& p = plan_of(item);
    const StrategyParams free = without_placement(p.params);
    std::vector<size_t>& near = by_degrees[{p.strategy, free.sequence_parallel, free.data_parallel,
                                            free.tensor_parallel, free.pipeline_parallel, free.virtual_stages}];
    const auto same = std::find_if(near.begin(), near.end(), [&](size_t b) {
      const Plan& q = plan_of(batches[b].front());
      return q.num_ranks() == p.num_ranks() && without_placement(q.params) == free && q.workload == p.workload;
    });
    if (same != near.end()) {
      batches[*same].push_back(item);
      continue;
    }
    near.push_back(batches.size());
    batches.push_back({item});
  }
  return batches;
}

// By place in `items`: the places of the others whose plans are equal to its own but for their
// placement.
template <typename Item, typename PlanOf>
std::vector<std::vector<size_t>> placement_siblings(const std::vector<Item*>& items, PlanOf&& plan_of) {
  std::map<const Item*, size_t> place;
  for (size_t k = 0; k < items.size(); ++k)
    place.emplace(items[k], k);
  std::vector<std::vector<size_t>> others(items.size());
  for (const std::vector<Item*>& batch : placement_batches(items, plan_of))
    for (const Item* item : batch)
      for (const Item* other : batch)
        if (other != item) others[place.at(item)].push_back(place.at(other));
  return others;
}

}  // namespace wallfacer::detail
