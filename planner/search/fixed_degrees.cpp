// Checks of the degrees a search is asked to fix (fixed_degrees.hpp).
#include "fixed_degrees.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/text.hpp>
#include "enumerate.hpp"

namespace wallfacer::detail {
namespace {

// The one degree a flag fixes, or 0 where the search tries several.
int fixed(const std::vector<int>& degrees) {
  return degrees.size() == 1 ? degrees.front() : 0;
}

void check_tensor(const SearchOptions& options, const Workload& workload, int ranks) {
  const int T = fixed(options.tensor_degrees);
  if (T == 0) return;
  if (ranks % T != 0)
    throw InputError("--tp", 0, fmt::format("tensor parallel degree {} does not divide the {} GPUs", T, ranks));
  if (!tensor_slice_fits(workload, T)) {
    std::vector<int> fitting;
    for (int t = 1; t <= workload.kv_heads; ++t)
      if (tensor_slice_fits(workload, t) && ranks % t == 0) fitting.push_back(t);
    throw InputError("--tp", 0,
                     fmt::format("tensor parallel degree {} does not divide the model's {} heads and {} kv heads "
                                 "(each tensor slice takes whole heads); degrees that do on {} GPUs: {}",
                                 T, workload.heads, workload.kv_heads, ranks, fmt::join(fitting, ", ")));
  }
}

void check_pipeline(const SearchOptions& options, const Workload& workload, int ranks) {
  const int Pp = fixed(options.pipeline_degrees);
  if (Pp == 0) return;
  if (Pp > 1 && options.scope != Scope::Step)
    throw InputError("--pp", 0,
                     fmt::format("{} pipeline stages split the model's layers, and one attention layer (--scope "
                                 "attention) has none to split; drop --pp or plan the whole step",
                                 Pp));
  const int T = std::max(1, fixed(options.tensor_degrees));
  if (ranks % (T * Pp) != 0)
    throw InputError("--pp", 0,
                     fmt::format("{} pipeline stages{} do not divide the {} GPUs", Pp,
                                 T > 1 ? fmt::format(" of {} tensor slices", T) : "", ranks));
  if (workload.layers % Pp != 0)
    throw InputError("--pp", 0,
                     fmt::format("{} pipeline stages do not divide the model's {} layers", Pp, workload.layers));
}

// Each data-parallel replica trains whole sequences of the batch on its own share of the GPUs.
void check_data(const SearchOptions& options, const Workload& workload, int ranks) {
  const int D = options.data_parallel;
  if (D <= 0) return;
  if (workload.batch % D != 0)
    throw InputError("--dp", 0,
                     fmt::format("data parallel degree {} needs a batch that splits into {} replicas of whole "
                                 "sequences, but the batch is {} (try --batch {})",
                                 D, D, counted(workload.batch, "sequence"), (workload.batch + D - 1) / D * D));
  const int T = std::max(1, fixed(options.tensor_degrees)), Pp = std::max(1, fixed(options.pipeline_degrees));
  if (ranks % (int64_t(D) * T * Pp) != 0) {
    std::vector<std::string> around;
    if (T > 1) around.push_back(fmt::format("{} tensor slices", T));
    if (Pp > 1) around.push_back(fmt::format("{} pipeline stages", Pp));
    throw InputError(
        "--dp", 0,
        fmt::format("data parallel degree {}{} does not divide the {} GPUs", D,
                    around.empty() ? "" : " with " + fmt::format("{}", fmt::join(around, " and ")), ranks));
  }
}

// Interleaved 1F1B needs pipeline stages whose layers split into the virtual stages.
void check_virtual_stages(const SearchOptions& options, const Workload& workload) {
  const int v = fixed(options.virtual_stages);
  if (v <= 1) return;
  if (options.scope != Scope::Step)
    throw InputError("--vpp", 0,
                     fmt::format("{} virtual stages per pipeline rank need a whole-step search (--scope step)", v));
  std::vector<int> stages;
  for (int Pp : options.pipeline_degrees)
    if (Pp > 1) stages.push_back(Pp);
  if (stages.empty())
    throw InputError("--vpp", 0,
                     fmt::format("{} virtual stages per pipeline rank need pipeline stages, and the search tries "
                                 "none (--pp {}); pass --pp 2 or more, or --pp auto on more than one node",
                                 v, fmt::join(options.pipeline_degrees, ",")));
  if (std::none_of(stages.begin(), stages.end(), [&](int Pp) { return workload.layers % (Pp * v) == 0; }))
    throw InputError("--vpp", 0,
                     fmt::format("{} virtual stages per pipeline rank do not divide the model's {} layers over "
                                 "any of the pipeline degrees searched ({})",
                                 v, workload.layers, fmt::join(stages, ", ")));
}

}  // namespace

void check_fixed_degrees(const SearchOptions& options, const Workload& workload, int ranks) {
  check_tensor(options, workload, ranks);
  check_pipeline(options, workload, ranks);
  check_data(options, workload, ranks);
  check_virtual_stages(options, workload);
}

}  // namespace wallfacer::detail
