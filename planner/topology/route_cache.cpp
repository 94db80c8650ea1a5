// Lock-free lookups of computed routes (route_cache.hpp).
#include "route_cache.hpp"

#include <algorithm>
#include <bit>

namespace wallfacer::detail {

RouteCache::RouteCache(size_t expected) {
  buckets_ = std::bit_ceil(std::max<size_t>(expected, 2));
  shift_ = 64 - std::countr_zero(buckets_);
  heads_ = std::make_unique<std::atomic<const Node*>[]>(buckets_);
  for (size_t b = 0; b < buckets_; ++b)
    heads_[b].store(nullptr, std::memory_order_relaxed);
}

RouteCache::~RouteCache() {
  for (size_t b = 0; b < buckets_; ++b)
    for (const Node* node = heads_[b].load(std::memory_order_relaxed); node != nullptr;) {
      const Node* next = node->next;
      delete node;
      node = next;
    }
}

const Route* RouteCache::find(uint64_t key) const {
  for (const Node* node = heads_[bucket(key)].load(std::memory_order_acquire); node != nullptr; node = node->next)
    if (node->key == key) return &node->route;
  return nullptr;
}

const Route& RouteCache::insert(uint64_t key, const std::function<Route()>& compute) {
  if (const Route* have = find(key)) return *have;
  std::atomic<const Node*>& head = heads_[bucket(key)];
  const Node* node = new Node{key, compute(), head.load(std::memory_order_relaxed)};
  head.store(node, std::memory_order_release);
  return node->route;
}

}  // namespace wallfacer::detail
