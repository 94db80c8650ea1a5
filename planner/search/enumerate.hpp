// Internal to the topology scheduler: the candidates a search tries. Every strategy with every
// parameter split its rules allow, around each tensor and pipeline degree asked for, and for a
// whole step each further count of virtual stages; a candidate whose rules fail (or whose dtype
// the GPU lacks) carries the reason and is listed as rejected.
#pragma once

#include <vector>

#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::detail {

// Whether Megatron-style tensor parallelism can give each of T slices whole heads, query and
// key/value alike.
bool tensor_slice_fits(const Workload& workload, int T);

// The candidates in enumeration order (the search's final tie-breaker): plans without ranks or
// groups yet, `reason` set on those their rules reject.
std::vector<Candidate> enumerate_candidates(const Topology& topology, const Workload& workload,
                                            const SearchOptions& options, int ranks);

}  // namespace wallfacer::detail
