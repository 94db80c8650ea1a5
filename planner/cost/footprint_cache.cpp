// Attention footprints remembered by plan (footprint_cache.hpp).
#include "footprint_cache.hpp"

namespace wallfacer::detail {
namespace {

// A 64-bit hash of words: each word is spread by a multiply and folded in with the splitmix64
// finaliser. Two seeds give two hashes that agree by chance with probability about 2^-128.
class Words {
 public:
  explicit Words(uint64_t seed) : hash_(seed) {}
  void add(int64_t value) {
    uint64_t h = hash_ + uint64_t(value) * 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    hash_ = h ^ (h >> 31);
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_;
};

// The ranks' nodes and the groups, kinds, all-reduce algorithms and members, a word at a time.
std::pair<uint64_t, uint64_t> layout_hash(const Plan& plan) {
  Words a(14695981039346656037ull), b(0x84222325cbf29ce4ull);
  auto add = [&](int64_t value) {
    a.add(value);
    b.add(value ^ 0x5bd1e9955bd1e995ll);
  };
  add(int64_t(plan.ranks.size()));
  for (const RankSlot& slot : plan.ranks)
    add(slot.node);
  add(int64_t(plan.groups.size()));
  for (const CommGroup& group : plan.groups) {
    add((int64_t(group.kind) << 40) ^ (int64_t(group.all_reduce) << 32) ^ int64_t(group.ranks.size()));
    for (int r : group.ranks)
      add(r);
  }
  return {a.value(), b.value()};
}

}  // namespace

bool FootprintCache::Key::operator==(const Key& other) const {
  return strategy == other.strategy && params == other.params && workload == other.workload && layout == other.layout;
}

FootprintCache::Key FootprintCache::key_of(const Plan& plan) {
  Key key{plan.strategy, plan.params, plan.workload, layout_hash(plan)};
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
