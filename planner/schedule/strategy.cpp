// Strategy dispatch, plan construction and the schedule builder front end. The algorithms live in
// planner/schedule/strategies/; this file only routes to them and checks what they are given.
#include <wallfacer/schedule/strategy.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>
#include <utility>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/topology/topology.hpp>
#include "pipeline_parallel.hpp"
#include "strategies/common.hpp"
#include "strategies/strategy_impl.hpp"
#include "tensor_parallel.hpp"

namespace wallfacer {

namespace detail {

// The groups of make_groups (`lifted`) or of the strategy's own groups(), remembered (below).
std::shared_ptr<const std::vector<CommGroup>> remembered_groups(bool lifted, StrategyKind strategy,
                                                                const StrategyParams& params, int ranks);

std::vector<int> StrategyImpl::positions(const StrategyParams& /*params*/, int ranks) const {
  std::vector<int> identity(static_cast<size_t>(std::max(0, ranks)));
  std::iota(identity.begin(), identity.end(), 0);
  return identity;
}

Feasibility StrategyImpl::feasible(const StrategyParams& params, const Workload& workload, int ranks) const {
  Feasibility generic = generic_feasibility(params, workload, ranks);
  if (!generic.ok) return generic;
  if (!knobs_fit(kind_, params))
    return {false, fmt::format("parameters of another strategy given to {}", to_string(kind_))};
  return own_feasibility(params, workload, ranks);
}

std::vector<StrategyParams> StrategyImpl::enumerate(const Workload& workload, int ranks) const {
  std::vector<StrategyParams> out;
  for (int D : data_parallel_splits(workload, ranks))
    out.push_back({.sequence_parallel = ranks / D, .data_parallel = D, .knobs = default_knobs(kind_)});
  return out;
}

void StrategyImpl::validate(const Plan& plan) const {
  validate_feasible(plan, feasible(plan.params, plan.workload, plan.num_ranks()));
  validate_groups(plan, *remembered_groups(false, kind_, plan.params, plan.num_ranks()));
}

}  // namespace detail

namespace {

constexpr std::array<StrategyKind, 8> kKinds = {
    StrategyKind::Ring,       StrategyKind::Zigzag,    StrategyKind::Ulysses,   StrategyKind::Usp,
    StrategyKind::DoubleRing, StrategyKind::AllGather, StrategyKind::WallFacer, StrategyKind::Lss};

std::unique_ptr<detail::StrategyImpl> make_impl(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::Ring:
      return detail::make_ring_impl(false);
    case StrategyKind::Zigzag:
      return detail::make_ring_impl(true);
    case StrategyKind::Ulysses:
      return detail::make_ulysses_impl();
    case StrategyKind::Usp:
      return detail::make_usp_impl();
    case StrategyKind::DoubleRing:
      return detail::make_double_ring_impl();
    case StrategyKind::AllGather:
      return detail::make_allgather_impl();
    case StrategyKind::WallFacer:
      return detail::make_wallfacer_impl();
    case StrategyKind::Lss:
      return detail::make_lss_impl();
  }
  throw InputError(fmt::format("unknown strategy kind {}", int(kind)));
}

// One stateless instance per strategy, created on first use.
const detail::StrategyImpl& impl_of(StrategyKind kind) {
  static const auto impls = [] {
    std::array<std::unique_ptr<detail::StrategyImpl>, kKinds.size()> all;
    for (size_t i = 0; i < kKinds.size(); ++i)
      all[i] = make_impl(kKinds[i]);
    return all;
  }();
  for (size_t i = 0; i < kKinds.size(); ++i)
    if (kKinds[i] == kind) return *impls[i];
  throw InputError(fmt::format("unknown strategy kind {}", int(kind)));
}

}  // namespace

namespace {

// The stage-local part: tensor slices around the strategy.
Feasibility check_stage_feasible(StrategyKind strategy, const StrategyParams& params, const Workload& workload,
                                 int ranks) {
  const int T = params.tensor_parallel;
  if (T == 1) return impl_of(strategy).feasible(params, workload, ranks);
  const Feasibility tensor = detail::tensor_feasibility(workload, T, ranks);
  if (!tensor.ok) return tensor;
  return impl_of(strategy).feasible(detail::slice_params(params), detail::slice_workload(workload, T), ranks / T);
}

std::vector<CommGroup> make_stage_groups(StrategyKind strategy, const StrategyParams& params, int ranks) {
  const int T = std::max(1, params.tensor_parallel);
  if (T == 1) return impl_of(strategy).groups(params, ranks);
  return detail::lift_groups(impl_of(strategy).groups(detail::slice_params(params), ranks / T), T, ranks / T);
}

std::vector<int> make_stage_positions(StrategyKind strategy, const StrategyParams& params, int ranks) {
  const int T = params.tensor_parallel;
  return T == 1 ? impl_of(strategy).positions(params, ranks)
                : detail::lift_positions(impl_of(strategy).positions(detail::slice_params(params), ranks / T), T);
}

}  // namespace

Feasibility check_feasible(StrategyKind strategy, const StrategyParams& params, const Workload& workload, int ranks) {
  const Feasibility pipeline = detail::pipeline_feasibility(params, workload, ranks);
  if (!pipeline.ok) return pipeline;
  const Feasibility interleaved = detail::interleave_strategy_feasibility(strategy, params);
  if (!interleaved.ok) return interleaved;
  const int Pp = params.pipeline_parallel;
  return check_stage_feasible(strategy, detail::stage_params(params), detail::micro_workload(workload), ranks / Pp);
}

std::vector<StrategyParams> enumerate_params(StrategyKind strategy, const Workload& workload, int ranks) {
  return impl_of(strategy).enumerate(workload, ranks);
}

std::vector<CommGroup> make_groups(StrategyKind strategy, const StrategyParams& params, int ranks) {
  const int Pp = std::max(1, params.pipeline_parallel);
  return detail::lift_stage_groups(make_stage_groups(strategy, detail::stage_params(params), ranks / Pp), Pp,
                                   ranks / Pp);
}

namespace detail {

namespace {

struct GroupsKey {
  bool lifted = false;
  StrategyKind strategy = StrategyKind::Ring;
  StrategyParams params;
  int ranks = 0;
  bool operator==(const GroupsKey&) const = default;
};

uint64_t hash_of(const GroupsKey& k) {
  uint64_t h = 0;
  for (int64_t word : {int64_t(k.lifted), int64_t(k.strategy), int64_t(k.ranks), int64_t(k.params.sequence_parallel),
                       int64_t(k.params.data_parallel), int64_t(k.params.tensor_parallel),
                       int64_t(k.params.pipeline_parallel), int64_t(k.params.virtual_stages),
                       int64_t(team_size(k.params)), int64_t(ulysses_degree(k.params)), int64_t(window_size(k.params))})
    h = (h ^ uint64_t(word)) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

// The groups made so far in this process, up to a budget of bytes: a search, and the trials of
// the suggestions after it, make the plans of the same candidates again and again. Past the
// budget the store starts afresh (groups are a function of their key: only time is lost).
class GroupStore {
 public:
  std::shared_ptr<const std::vector<CommGroup>> find(const GroupsKey& key, uint64_t hash) const {
    const std::lock_guard lock(mutex_);
    const auto [first, last] = entries_.equal_range(hash);
    for (auto it = first; it != last; ++it)
      if (it->second.first == key) return it->second.second;
    return nullptr;
  }
  void add(const GroupsKey& key, uint64_t hash, std::shared_ptr<const std::vector<CommGroup>> groups) {
    size_t bytes = sizeof(*groups) + groups->capacity() * sizeof(CommGroup);
    for (const CommGroup& g : *groups)
      bytes += g.name.capacity() + g.ranks.capacity() * sizeof(int);
    if (bytes > kBytes) return;
    const std::lock_guard lock(mutex_);
    if (bytes_ + bytes > kBytes) entries_.clear(), bytes_ = 0;
    entries_.emplace(hash, std::pair(key, std::move(groups)));
    bytes_ += bytes;
  }

 private:
  static constexpr size_t kBytes = size_t(64) << 20;  // of the groups kept, names and members included
  mutable std::mutex mutex_;
  std::unordered_multimap<uint64_t, std::pair<GroupsKey, std::shared_ptr<const std::vector<CommGroup>>>> entries_;
  size_t bytes_ = 0;
};

}  // namespace

// Every schedule builder checks its plan's groups against the strategy's, a tensor-parallel one
// each slice's too (the same groups), and a search makes several builders per candidate: making
// the groups again, names and all, was 7 % of a 512-GPU search. The last few asked are kept per
// thread (no lock), in front of a store that the threads share.
std::shared_ptr<const std::vector<CommGroup>> remembered_groups(bool lifted, StrategyKind strategy,
                                                                const StrategyParams& params, int ranks) {
  struct Entry {
    GroupsKey key;
    std::shared_ptr<const std::vector<CommGroup>> groups;
  };
  static GroupStore store;
  constexpr size_t kKept = 8;
  thread_local std::array<Entry, kKept> kept;
  thread_local size_t next = 0;
  const GroupsKey key{lifted, strategy, params, ranks};
  for (const Entry& e : kept)
    if (e.groups && e.key == key) return e.groups;
  const uint64_t hash = hash_of(key);
  std::shared_ptr<const std::vector<CommGroup>> groups = store.find(key, hash);
  if (!groups) {
    groups = std::make_shared<const std::vector<CommGroup>>(lifted ? make_groups(strategy, params, ranks)
                                                                   : impl_of(strategy).groups(params, ranks));
    store.add(key, hash, groups);
  }
  kept[next++ % kKept] = Entry{key, groups};
  return groups;
}

}  // namespace detail

Plan make_plan(StrategyKind strategy, const StrategyParams& params, const Workload& workload, const Topology& topology,
               int ranks, const std::vector<int>& gpu_order, std::optional<AllReduceAlgorithm> all_reduce) {
  const Feasibility feasible = check_feasible(strategy, params, workload, ranks);
  if (!feasible.ok) throw InputError(fmt::format("strategy {}: {}", to_string(strategy), feasible.reason));
  if (ranks > topology.num_gpus())
    throw InputError(
        fmt::format("{} ranks do not fit topology '{}' with {} GPUs", ranks, topology.name(), topology.num_gpus()));
  std::vector<int> order = gpu_order;
  if (order.empty()) {
    order.resize(size_t(ranks));
    std::iota(order.begin(), order.end(), 0);
  }
  if (int(order.size()) < ranks)
    throw InputError(fmt::format("GPU order lists {} GPUs, {} ranks need one each", order.size(), ranks));

  Plan plan;
  plan.topology_name = topology.name();
  plan.topology_hash = topology.content_hash();
  plan.topology_nodes = topology.num_nodes();
  plan.workload = workload;
  plan.strategy = strategy;
  plan.params = params;
  plan.groups = *detail::remembered_groups(true, strategy, params, ranks);  // a search makes many plans alike
  const int Pp = params.pipeline_parallel;
  const std::vector<int> positions =
      detail::lift_stage_positions(make_stage_positions(strategy, detail::stage_params(params), ranks / Pp), Pp);
  plan.ranks.reserve(size_t(ranks));
  for (int r = 0; r < ranks; ++r) {
    RankSlot slot;
    slot.rank = r;
    slot.gpu = order[size_t(positions[size_t(r)])];
    if (slot.gpu < 0 || slot.gpu >= topology.num_gpus())
      throw InputError(fmt::format("GPU order names GPU {}, topology '{}' has GPUs 0..{}", slot.gpu, topology.name(),
                                   topology.num_gpus() - 1));
    slot.node = topology.node_of_gpu(slot.gpu);
    slot.local_gpu = topology.local_gpu(slot.gpu);
    const int nic = topology.nic_of_gpu(slot.gpu);
    if (nic >= 0) slot.nic = topology.devices()[size_t(nic)].name;
    plan.ranks.push_back(std::move(slot));
  }
  choose_all_reduce_algorithms(plan, topology, all_reduce);
  return plan;
}

// ---- ScheduleBuilder -------------------------------------------------------------------------

namespace {

// The builders of a plan's pipeline stages or tensor slices, each made when first asked for (by
// any thread): a search builds a few ranks of most plans it bounds, and making every stage's and
// slice's plan and builder up front was a tenth of a 512-GPU search. Whether the plan's groups
// are right is checked on the whole plan first, which holds every stage's and slice's groups.
class PartBuilders {
 public:
  void resize(int parts) {
    made_.resize(size_t(parts));
    once_ = std::make_unique<std::once_flag[]>(size_t(parts));
  }
  int size() const { return int(made_.size()); }
  bool empty() const { return made_.empty(); }
  // Part `i`, made by make_plan(i) the first time.
  template <typename MakePlan>
  const ScheduleBuilder& get(int i, MakePlan&& make_plan) {
    std::call_once(once_[size_t(i)], [&] { made_[size_t(i)] = std::make_unique<ScheduleBuilder>(make_plan(i)); });
    return *made_[size_t(i)];
  }

 private:
  std::vector<std::unique_ptr<ScheduleBuilder>> made_;
  std::unique_ptr<std::once_flag[]> once_;
};

}  // namespace

struct ScheduleBuilder::Impl {
  Plan plan;
  const detail::StrategyImpl* strategy = nullptr;
  // Tensor parallel plans: one builder per tensor slice, and the groups each slice has.
  PartBuilders slices;
  int slice_groups = 0;
  // Pipeline parallel plans: one builder per stage, and the groups each stage has.
  PartBuilders stages;
  int stage_groups = 0;

  const ScheduleBuilder& slice(int t) {
    return slices.get(t, [this](int i) { return detail::slice_plan(plan, i); });
  }
  const ScheduleBuilder& stage(int p) {
    return stages.get(p, [this](int i) { return detail::stage_plan(plan, i); });
  }
};

ScheduleBuilder::ScheduleBuilder(const Plan& plan) : impl_(std::make_unique<Impl>()) {
  impl_->plan = plan;
  impl_->strategy = &impl_of(plan.strategy);
  const int ranks = plan.num_ranks();
  if (ranks < 1) throw InputError("plan has no ranks");
  for (int r = 0; r < ranks; ++r) {
    if (plan.ranks[size_t(r)].rank != r)
      throw InputError(fmt::format("plan rank entry {} is numbered {}; ranks must be listed as 0..{}", r,
                                   plan.ranks[size_t(r)].rank, ranks - 1));
  }
  const Feasibility feasible = check_feasible(plan.strategy, plan.params, plan.workload, ranks);
  if (!feasible.ok)
    throw InputError(fmt::format("plan for strategy {}: {}", to_string(plan.strategy), feasible.reason));
  const int Pp = plan.params.pipeline_parallel;
  if (Pp > 1) {
    // Each stage validates its own groups; the pipeline groups and the stage prefixes are checked here.
    detail::validate_groups(plan, *detail::remembered_groups(true, plan.strategy, plan.params, ranks));
    impl_->stages.resize(Pp);
    impl_->stage_groups = int(make_stage_groups(plan.strategy, detail::stage_params(plan.params), ranks / Pp).size());
    return;
  }
  const int T = plan.params.tensor_parallel;
  if (T > 1) {
    // Each slice validates its own groups; the tensor groups and the slice prefixes are checked here.
    detail::validate_groups(plan, *detail::remembered_groups(true, plan.strategy, plan.params, ranks));
    impl_->slices.resize(T);
    impl_->slice_groups =
        int(detail::remembered_groups(false, plan.strategy, detail::slice_params(plan.params), ranks / T)->size());
    return;
  }
  impl_->strategy->validate(plan);
  WF_LOG_DEBUG("schedule", "schedule builder for {} over {} ranks", to_string(plan.strategy), ranks);
}

ScheduleBuilder::~ScheduleBuilder() = default;
ScheduleBuilder::ScheduleBuilder(ScheduleBuilder&&) noexcept = default;

int ScheduleBuilder::num_ranks() const {
  return impl_->plan.num_ranks();
}

ScheduleDims ScheduleBuilder::dims() const {
  return detail::dims_of(impl_->plan.workload);
}

std::vector<FlowSet> ScheduleBuilder::flow_sets() const {
  if (!impl_->stages.empty()) {
    std::vector<FlowSet> sets = impl_->stage(0).flow_sets();
    const int Pp = impl_->stages.size();
    for (FlowSet& set : sets)
      set = detail::lift_stage_flow_set(set, Pp, num_ranks() / Pp);
    return sets;
  }
  if (impl_->slices.empty()) return impl_->strategy->flow_sets(impl_->plan);
  std::vector<FlowSet> sets = impl_->slice(0).flow_sets();
  for (FlowSet& set : sets)
    set = detail::lift_flow_set(set, impl_->slices.size());
  return sets;
}

RankProgram ScheduleBuilder::build_rank(int rank, TokenSetPool& pool, BuildMode mode) const {
  if (rank < 0 || rank >= num_ranks())
    throw InputError(fmt::format("rank {} out of range: the plan has ranks 0..{}", rank, num_ranks() - 1));
  if (!impl_->stages.empty()) {
    const int W = num_ranks() / impl_->stages.size();
    RankProgram program = impl_->stage(rank / W).build_rank(rank % W, pool, mode);
    detail::lift_stage_program(program, rank / W, W, impl_->stage_groups);
    return program;
  }
  if (impl_->slices.empty()) return impl_->strategy->build_rank(impl_->plan, rank, pool, mode);
  const int T = impl_->slices.size();
  RankProgram program = impl_->slice(rank % T).build_rank(rank / T, pool, mode);
  detail::lift_program(program, impl_->plan, rank % T, impl_->slice_groups);
  return program;
}

bool ScheduleBuilder::renames(int a, int b) const {
  if (a < 0 || b < 0 || a >= num_ranks() || b >= num_ranks()) return false;
  if (!impl_->stages.empty()) {
    const int W = num_ranks() / impl_->stages.size();  // ranks of a stage
    return a % W == b % W;
  }
  if (impl_->slices.empty()) return false;
  const int T = impl_->slices.size();
  return a / T == b / T;
}

RankProgram ScheduleBuilder::rename(int rank, RankProgram sibling) const {
  WF_ASSERT(renames(rank, sibling.rank),
            fmt::format("rank {}'s program cannot be made from rank {}'s", rank, sibling.rank));
  if (!impl_->stages.empty()) {
    // Every stage builds its rank as the first stage does, lifted to its own ranks and groups;
    // an all-reduce runs as its own group does.
    const int W = num_ranks() / impl_->stages.size();
    detail::lift_stage_program(sibling, rank / W - sibling.rank / W, W, impl_->stage_groups);
    for (CollectiveSpec& spec : sibling.collectives)
      if (spec.kind == OpKind::AllReduce) spec.algorithm = impl_->plan.groups[size_t(spec.group)].all_reduce;
    return sibling;
  }
  const int T = impl_->slices.size();
  detail::relift_program(sibling, impl_->plan, sibling.rank % T, rank % T, impl_->slice_groups);
  return sibling;
}

Schedule ScheduleBuilder::build(const std::vector<int>& ranks) const {
  Schedule schedule;
  schedule.dims = dims();
  schedule.flow_sets = flow_sets();
  if (ranks.empty()) {
    schedule.ranks.reserve(size_t(num_ranks()));
    for (int r = 0; r < num_ranks(); ++r)
      schedule.ranks.push_back(build_rank(r, schedule.tokens));
  } else {
    schedule.ranks.reserve(ranks.size());
    for (int r : ranks)
      schedule.ranks.push_back(build_rank(r, schedule.tokens));
  }
  return schedule;
}

namespace {

// Re-interns `programs`' token sets, built with `local`, into `pool`. Sets the block meets
// first get the next ids of `pool`, so merging blocks in rank order numbers sets as one pass
// over the ranks would.
void merge_tokens(std::vector<RankProgram>& programs, const TokenSetPool& local, TokenSetPool& pool) {
  std::vector<int32_t> id(local.size());
  for (size_t i = 0; i < local.size(); ++i)
    id[i] = pool.intern(local.get(int32_t(i)));
  auto remap = [&](int32_t& token) {
    if (token >= 0) token = id[size_t(token)];
  };
  for (RankProgram& program : programs) {
    for (Op& op : program.ops)
      for (int32_t& token : op.tok)
        remap(token);
    for (CollectiveSpec& spec : program.collectives) {
      for (int32_t& token : spec.in_tokens)
        remap(token);
      for (int32_t& token : spec.out_tokens)
        remap(token);
    }
    for (std::vector<Binding>* bindings : {&program.inputs, &program.outputs})
      for (Binding& binding : *bindings)
        remap(binding.tokens);
  }
}

}  // namespace

Schedule ScheduleBuilder::build_all(int threads) const {
  const int ranks = num_ranks();
  const int blocks = std::clamp(threads, 1, std::max(1, ranks));
  if (blocks == 1) return build();
  Schedule schedule;
  schedule.dims = dims();
  schedule.flow_sets = flow_sets();
  struct Block {
    int begin = 0, end = 0;
    std::vector<RankProgram> programs;
    TokenSetPool pool;
    std::exception_ptr error;
  };
  std::vector<Block> parts(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) {
    parts[size_t(b)].begin = int(int64_t(ranks) * b / blocks);
    parts[size_t(b)].end = int(int64_t(ranks) * (b + 1) / blocks);
  }
  auto build_block = [this](Block& part) {
    try {
      part.programs.reserve(size_t(part.end - part.begin));
      for (int r = part.begin; r < part.end; ++r)
        part.programs.push_back(build_rank(r, part.pool));
    } catch (...) {
      part.error = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (size_t b = 1; b < parts.size(); ++b)
    workers.emplace_back(build_block, std::ref(parts[b]));
  build_block(parts[0]);
  for (std::thread& worker : workers)
    worker.join();
  schedule.ranks.reserve(size_t(ranks));
  for (Block& part : parts) {
    if (part.error) std::rethrow_exception(part.error);
    // The first block's pool numbers its sets as build() would; later blocks are merged into it.
    if (&part == &parts.front())
      schedule.tokens = std::move(part.pool);
    else
      merge_tokens(part.programs, part.pool, schedule.tokens);
    for (RankProgram& program : part.programs)
      schedule.ranks.push_back(std::move(program));
  }
  return schedule;
}

Schedule build_schedule(const Plan& plan) {
  return ScheduleBuilder(plan).build();
}

}  // namespace wallfacer
