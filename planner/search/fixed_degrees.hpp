// Checks of the degrees a search is asked to fix (search.cpp): a single tensor or pipeline degree
// that cannot split the GPUs or the layers leaves nothing to search.
#pragma once

#include <wallfacer/search/search.hpp>

namespace wallfacer::detail {

// Throws InputError naming the flag (--tp, --pp) when a single fixed degree cannot divide the
// GPUs (or, for the pipeline, the model's layers).
void check_fixed_degrees(const SearchOptions& options, const Workload& workload, int ranks);

}  // namespace wallfacer::detail
