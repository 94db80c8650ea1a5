// Attention footprints remembered by plan (CostModel::memory_footprint). A search asks for the step
// memory of every candidate, and the suggestions for an infeasible plan search again under other
// ZeRO stages, checkpointing modes and memory budgets, whose candidates build the same attention
// programs: the footprint read off them is found here instead of building them again.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer::detail {

class FootprintCache {
 public:
  // What the attention programs are built from: the strategy, its parameters and the workload
  // (compared in full, without the ZeRO stage and the checkpointing mode, which only the step
  // adds), and the ranks' nodes and the groups (through two independent 64-bit hashes: they are
  // as long as the plan). Taken once per plan, for the lookup and the entry added after a miss.
  struct Key {
    StrategyKind strategy = StrategyKind::Ring;
    StrategyParams params;
    Workload workload;
    std::pair<uint64_t, uint64_t> layout;
    bool operator==(const Key& other) const;
  };
  static Key key_of(const Plan& plan);

  std::optional<AttentionFootprint> find(const Key& key) const;
  void add(Key key, const AttentionFootprint& footprint);

 private:
  static uint64_t bucket_of(const Key& key);

  mutable std::mutex mutex_;
  std::unordered_multimap<uint64_t, std::pair<Key, AttentionFootprint>> entries_;
};

}  // namespace wallfacer::detail
