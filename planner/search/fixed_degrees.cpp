// Checks of the degrees a search is asked to fix (fixed_degrees.hpp).
#include "fixed_degrees.hpp"

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::detail {

// A single tensor or pipeline degree asked for that cannot split the GPUs (or the layers) leaves
// nothing to search: say so rather than list no candidate.
void check_fixed_degrees(const SearchOptions& options, const Workload& workload, int ranks) {
  if (options.tensor_degrees.size() == 1 && ranks % options.tensor_degrees.front() != 0)
    throw InputError(
        "--tp", 0,
        fmt::format("tensor parallel degree {} does not divide the {} GPUs", options.tensor_degrees.front(), ranks));
  if (options.pipeline_degrees.size() != 1) return;
  const int Pp = options.pipeline_degrees.front();
  const int T = options.tensor_degrees.size() == 1 ? options.tensor_degrees.front() : 1;
  if (ranks % (T * Pp) != 0)
    throw InputError("--pp", 0,
                     fmt::format("{} pipeline stages{} do not divide the {} GPUs", Pp,
                                 T > 1 ? fmt::format(" of {} tensor slices", T) : "", ranks));
  if (workload.layers % Pp != 0)
    throw InputError("--pp", 0,
                     fmt::format("{} pipeline stages do not divide the model's {} layers", Pp, workload.layers));
}

}  // namespace wallfacer::detail
