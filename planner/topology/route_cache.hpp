// The routes a topology has computed, shared by the threads that price plans at once (the search's
// pricing threads ask for routes while the search itself does). Lookups take no lock: each bucket
// is a chain of nodes that never change once published, and a new node becomes the bucket's head
// by one atomic store (release), which a reader's load (acquire) sees whole or not at all. Nodes
// are never removed, so a route's address stays valid for the cache's lifetime. Writers are
// serialised by the caller.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

class RouteCache {
 public:
  // About `expected` routes: the bucket count is the power of two at or above it.
  explicit RouteCache(size_t expected);
  ~RouteCache();
  RouteCache(const RouteCache&) = delete;
  RouteCache& operator=(const RouteCache&) = delete;

  // The route stored under `key`, or null. Safe while other threads insert.
  const Route* find(uint64_t key) const;
  // The route stored under `key`; when there is none (another thread may have stored it since
  // the caller's find), stores compute()'s. One writer at a time.
  const Route& insert(uint64_t key, const std::function<Route()>& compute);

 private:
  struct Node {
    uint64_t key;
    Route route;
    const Node* next;
  };
  size_t bucket(uint64_t key) const { return size_t((key * 0x9e3779b97f4a7c15ULL) >> shift_); }

  std::unique_ptr<std::atomic<const Node*>[]> heads_;
  size_t buckets_ = 0;
  int shift_ = 64;
};

}  // namespace wallfacer::detail
