// Attention footprints remembered by plan (footprint_cache.hpp).
#include "footprint_cache.hpp"

namespace wallfacer::detail {
namespace {

// FNV-1a over 64-bit words, from a given offset basis: two bases give two independent hashes.
class Words {
 public:
  explicit Words(uint64_t basis) : hash_(basis) {}
  void add(int64_t value) {
    for (int i = 0; i < 8; ++i)
      hash_ = (hash_ ^ ((uint64_t(value) >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_;
};

uint64_t layout_hash(const Plan& plan, uint64_t basis) {
  Words h(basis);
  h.add(int64_t(plan.ranks.size()));
  for (const RankSlot& slot : plan.ranks)
    h.add(slot.node);
  h.add(int64_t(plan.groups.size()));
  for (const CommGroup& group : plan.groups) {
    h.add(int64_t(group.kind));
    h.add(int64_t(group.all_reduce));
    h.add(int64_t(group.ranks.size()));
    for (int r : group.ranks)
      h.add(r);
  }
  return h.value();
}

}  // namespace

bool FootprintCache::Key::operator==(const Key& other) const {
  return strategy == other.strategy && params == other.params && workload == other.workload && layout == other.layout;
}

FootprintCache::Key FootprintCache::key_of(const Plan& plan) {
  Key key{plan.strategy,
          plan.params,
          plan.workload,
          {layout_hash(plan, 14695981039346656037ull), layout_hash(plan, 0x84222325cbf29ce4ull)}};
  key.workload.zero_stage = 0;
  key.workload.checkpointing = Checkpointing::None;
  return key;
}

uint64_t FootprintCache::bucket_of(const Key& key) {
  Words h(key.layout.first);
  h.add(int64_t(key.strategy));
  h.add(key.params.sequence_parallel);
  h.add(key.params.data_parallel);
  h.add(key.params.tensor_parallel);
  h.add(key.params.pipeline_parallel);
  h.add(key.params.virtual_stages);
  h.add(key.workload.seq);
  h.add(key.workload.batch);
  h.add(key.workload.microbatches);
  return h.value();
}

std::optional<AttentionFootprint> FootprintCache::find(const Key& key) const {
  const std::lock_guard lock(mutex_);
  const auto [first, last] = entries_.equal_range(bucket_of(key));
  for (auto it = first; it != last; ++it)
    if (it->second.first == key) return it->second.second;
  return std::nullopt;
}

void FootprintCache::add(Key key, const AttentionFootprint& footprint) {
  const uint64_t bucket = bucket_of(key);
  const std::lock_guard lock(mutex_);
  const auto [first, last] = entries_.equal_range(bucket);
  for (auto it = first; it != last; ++it)
    if (it->second.first == key) return;
  entries_.emplace(bucket, std::pair(std::move(key), footprint));
}

}  // namespace wallfacer::detail
