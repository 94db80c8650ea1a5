// Checks of the degrees a search is asked to fix (search.cpp): a single tensor, pipeline or data
// parallel degree, or count of virtual stages, that cannot split the GPUs, the heads, the layers
// or the batch leaves nothing to search, and the ranking would be empty without a word of why.
#pragma once

#include <wallfacer/search/search.hpp>

namespace wallfacer::detail {

// Throws InputError naming the flag (--tp, --pp, --dp, --vpp) and what it cannot divide: the GPUs,
// the model's heads (--tp), its layers (--pp, --vpp), the batch (--dp), or no pipeline to
// interleave (--vpp).
void check_fixed_degrees(const SearchOptions& options, const Workload& workload, int ranks);

}  // namespace wallfacer::detail
