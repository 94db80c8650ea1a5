// The analytic cost model (cost_model.hpp): list-schedules the timed ranks' programs through their
// four streams (timeline.hpp) with calibrated compute times and contention-aware transfer
// times. Formulas and conventions: docs/cost-model.md.
#include <wallfacer/cost/cost_model.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/compute_time.hpp>
#include <wallfacer/cost/network.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "footprint_cache.hpp"
#include "step_parts.hpp"
#include "timeline.hpp"

namespace wallfacer {
namespace {

constexpr const char* kLog = "cost";

// Everything needed to price the ops of one schedule.
struct OpPricer {
  const Schedule& schedule;
  detail::NetworkPricer& network;
  ComputeTimer compute;

  double seconds(const Op& op, const RankProgram& program) {
    switch (op.kind) {
      case OpKind::Send:
        return network.p2p_seconds(op.flow_set, program.rank, op.peer, op.bytes);
      case OpKind::Recv:
        return network.p2p_seconds(op.flow_set, op.peer, program.rank, op.bytes);
      case OpKind::AllGather:
      case OpKind::ReduceScatter:
      case OpKind::AllToAll:
      case OpKind::AllReduce: {
        if (op.coll < 0) return 0;
        if (op.kind == OpKind::AllToAll) return network.all_to_all_seconds(program, op, schedule.tokens, schedule.dims);
        const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
        if (op.kind == OpKind::AllReduce && spec.algorithm == AllReduceAlgorithm::Tree)
          return network.tree_all_reduce_seconds(spec.group, spec.elements * schedule.dims.grad_elem_bytes);
        return network.collective_seconds(op.kind, spec.group, op.bytes);
      }
      default:
        return compute.seconds(op, schedule.tokens);
    }
  }
  std::vector<double> durations(const RankProgram& program) {
    std::vector<double> out(program.ops.size());
    for (size_t i = 0; i < program.ops.size(); ++i)
      out[i] = seconds(program.ops[i], program);
    return out;
  }
};

void add_unique(std::vector<int>& list, std::set<int>& seen, int rank, int ranks) {
  if (rank >= 0 && rank < ranks && seen.insert(rank).second) list.push_back(rank);
}

}  // namespace

namespace {

// The dtype whose peak kernel_peak_tflops takes.
DType kernel_peak_dtype(const GpuModel& gpu, DType dtype) {
  if (dtype == DType::BF16 && gpu.peak_bf16_tflops > 0) return DType::BF16;
  if (dtype == DType::FP32 && gpu.peak_fp32_tflops > 0) return DType::FP32;
  return gpu.peak_fp16_tflops > 0 ? DType::FP16 : DType::BF16;
}

}  // namespace

double kernel_peak_tflops(const GpuModel& gpu, DType dtype) {
  switch (kernel_peak_dtype(gpu, dtype)) {
    case DType::BF16:
      return gpu.peak_bf16_tflops;
    case DType::FP32:
      return gpu.peak_fp32_tflops;
    default:
      return gpu.peak_fp16_tflops;
  }
}

std::string dtype_issue(const GpuModel& gpu, DType dtype) {
  if (dtype == DType::BF16 && gpu.peak_bf16_tflops <= 0)
    return gpu.peak_fp16_tflops > 0 ? fmt::format("{} has no bf16 tensor cores; use --dtype fp16", gpu.name)
                                    : fmt::format("{} has no bf16 peak in its topology; use --dtype fp32", gpu.name);
  if (dtype == DType::FP16 && gpu.peak_fp16_tflops <= 0)
    return fmt::format("{} has no fp16 peak in its topology; use --dtype fp32", gpu.name);
  return {};
}

std::string calibration_gap(const Calibration& calibration, const GpuModel& gpu, const Workload& workload,
                            bool whole_step) {
  const double peak = kernel_peak_tflops(gpu, workload.dtype);
  std::vector<std::string> gaps;
  const bool attention =
      calibration.curve(gpu.name, KernelOp::AttnFwd, workload.dtype, workload.head_dim, peak).is_fallback() ||
      calibration.curve(gpu.name, KernelOp::AttnBwd, workload.dtype, workload.head_dim, peak).is_fallback();
  // A GPU without bf16 (a V100) is priced at its fp16 peak: the text names the peak taken.
  const std::string peak_text =
      fmt::format("the {:.0f} TFLOP/s {} peak", peak, to_string(kernel_peak_dtype(gpu, workload.dtype)));
  if (attention)
    gaps.push_back(
        fmt::format("attention kernels at {:.0f} % of {}", 100 * calibration.fallback_efficiency(), peak_text));
  bool gemm_fallback = false, hbm_fallback = false;
  const double gemm = calibration.gemm_efficiency(gpu.name, 8192, 8192, 8192, &gemm_fallback);
  if (calibration.has_gemm_shapes(gpu.name, workload.dtype)) gemm_fallback = false;
  const double hbm = calibration.hbm_efficiency(gpu.name, &hbm_fallback);
  if (whole_step && gemm_fallback)
    gaps.push_back(fmt::format("GEMMs at {:.0f} % of {}", 100 * gemm, attention ? "it" : peak_text));
  if (whole_step && hbm_fallback)
    gaps.push_back(fmt::format("memory-bound kernels at {:.0f} % of its {:.0f} GB/s HBM", 100 * hbm, gpu.hbm_GBps));
  if (gaps.empty()) return {};
  std::string list;
  for (size_t i = 0; i < gaps.size(); ++i)
    list += (i == 0 ? "" : i + 1 == gaps.size() ? " and " : ", ") + gaps[i];
  return fmt::format(
      "the calibration has no measurements for GPU model '{}': {} are assumed; measure them and pass "
      "--calibration FILE with `points:`{} entries for '{}' (docs/calibration.md, \"File format\")",
      gpu.name, list, whole_step && (gemm_fallback || hbm_fallback) ? ", `gemm:` and `hbm:`" : "", gpu.name);
}

Prediction CostBreakdown::to_prediction() const {
  Prediction p;
  p.forward_ms = forward_ms;
  p.backward_ms = backward_ms;
  p.step_ms = step_ms;
  p.p2p_bytes_forward = volume.p2p_forward;
  p.p2p_bytes_backward = volume.p2p_backward;
  p.collective_bytes_forward = volume.collective_forward;
  p.collective_bytes_backward = volume.collective_backward;
  p.attention_ms = attention_ms;
  p.tokens_per_s = tokens_per_s;
  p.memory_GiB = memory.total_GiB;
  p.mfu = mfu;
  return p;
}

CostModel::CostModel(const Topology& topology, Calibration calibration, CostOptions options)
    : topology_(topology),
      calibration_(std::move(calibration)),
      options_(options),
      tree_prices_(std::make_shared<detail::TreePriceCache>()),
      flow_prices_(std::make_shared<detail::FlowPriceCache>()),
      footprints_(std::make_shared<detail::FootprintCache>()) {}
CostModel::~CostModel() = default;

namespace {

// Up to `want` ranks that stand for the plan (want <= 0: all of them).
std::vector<int> sample_ranks(const Plan& plan, int want) {
  const int ranks = plan.num_ranks();
  std::vector<int> list;
  if (want <= 0 || ranks <= want) {
    for (int r = 0; r < ranks; ++r)
      list.push_back(r);
    return list;
  }
  std::set<int> seen;
  // The ends of the rank space, then both ends of the first and last group of every kind: under a
  // contiguous causal layout the last rank of a ring holds the latest tokens and the most work.
  add_unique(list, seen, 0, ranks);
  add_unique(list, seen, ranks - 1, ranks);
  std::set<GroupKind> kinds_done;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (!kinds_done.insert(plan.groups[g].kind).second) continue;
    size_t last = g;
    for (size_t h = g; h < plan.groups.size(); ++h)
      if (plan.groups[h].kind == plan.groups[g].kind) last = h;
    for (size_t index : {g, last}) {
      const auto& members = plan.groups[index].ranks;
      if (members.empty()) continue;
      add_unique(list, seen, members.back(), ranks);
      add_unique(list, seen, members.front(), ranks);
    }
  }
  // Every node-local GPU position, on the first and the last node the plan uses.
  const int first_node = plan.ranks.front().node, last_node = plan.ranks.back().node;
  for (const RankSlot& slot : plan.ranks)
    if (slot.node == first_node || slot.node == last_node) add_unique(list, seen, slot.rank, ranks);
  // Evenly spaced ranks fill what is left.
  for (int i = 1; int(list.size()) < want && i < want; ++i)
    add_unique(list, seen, int(int64_t(i) * ranks / want), ranks);
  if (int(list.size()) > want) list.resize(size_t(want));
  return list;
}

// Pipeline plans: the ranks stage 0 would time, each with its whole pipeline column (the same
// stage rank on every stage), so that stage messages meet their real other end and the bubble
// shows.
std::vector<int> sample_columns(const Plan& plan, int want) {
  const int Pp = plan.params.pipeline_parallel, W = plan.num_ranks() / Pp;
  Plan stage = plan;
  stage.params.pipeline_parallel = 1;
  stage.ranks.resize(size_t(W));
  std::erase_if(stage.groups, [W](const CommGroup& g) {
    return std::any_of(g.ranks.begin(), g.ranks.end(), [W](int r) { return r >= W; });
  });
  std::vector<int> list;
  for (int r : sample_ranks(stage, std::max(1, want / Pp)))
    for (int p = 0; p < Pp; ++p)
      list.push_back(p * W + r);
  return list;
}

}  // namespace

std::vector<int> CostModel::timed_ranks(const Plan& plan) const {
  const int want = options_.max_timed_ranks;
  if (plan.params.pipeline_parallel > 1 && want > 0 && plan.num_ranks() > want) return sample_columns(plan, want);
  return sample_ranks(plan, want);
}

void CostModel::build_timed(const Plan& plan, Schedule& schedule, int max_ranks) const {
  ScheduleBuilder builder(plan);
  if (schedule.ranks.empty()) {
    schedule.dims = builder.dims();
    schedule.flow_sets = builder.flow_sets();
  }
  // A rank whose program renames one built already (another tensor slice of its slice rank) is
  // renamed instead of built: the same program.
  std::map<int, size_t> built;  // rank -> its program in `schedule`
  int64_t ops = 0;
  for (size_t p = 0; p < schedule.ranks.size(); ++p) {
    built.emplace(schedule.ranks[p].rank, p);
    ops += int64_t(schedule.ranks[p].ops.size());
  }
  for (int rank : timed_ranks(plan)) {
    if (max_ranks > 0 && int(schedule.ranks.size()) >= max_ranks) break;
    // A pipeline column is timed whole or not at all.
    const bool column_done = schedule.ranks.size() % size_t(plan.params.pipeline_parallel) == 0;
    if (options_.max_timed_ops > 0 && schedule.ranks.size() >= 2 && ops >= options_.max_timed_ops && column_done) break;
    if (built.count(rank)) continue;
    const auto sibling =
        std::find_if(built.begin(), built.end(), [&](const auto& b) { return builder.renames(rank, b.first); });
    schedule.ranks.push_back(sibling != built.end() ? builder.rename(rank, schedule.ranks[sibling->second])
                                                    : builder.build_rank(rank, schedule.tokens));
    built.emplace(rank, schedule.ranks.size() - 1);
    ops += int64_t(schedule.ranks.back().ops.size());
  }
  WF_LOG_DEBUG(kLog, "{} on {} ranks: timing {} ranks, {} ops", to_string(plan.strategy), plan.num_ranks(),
               schedule.ranks.size(), ops);
}

CostBreakdown CostModel::evaluate(const Plan& plan) const {
  if (plan.scope == Scope::Step) return evaluate_step(plan);
  Schedule schedule;
  build_timed(plan, schedule);
  return evaluate(plan, schedule);
}

CostBreakdown CostModel::evaluate(const Plan& plan, const Schedule& schedule) const {
  CostBreakdown cost = evaluate_times(plan, schedule);
  cost.volume = comm_volume(schedule);
  cost.memory = memory(plan, schedule);
  count_transfers(topology_, plan, schedule, cost.parts);
  return cost;
}

PreparedTiming::PreparedTiming(const Plan& plan, const Schedule& schedule, Timing timing) : schedule_(schedule) {
  // With every rank at hand each message waits for its real other end; a sample assumes
  // symmetric partners; the bound waits for nothing but the other ends of pipeline stage messages,
  // which it holds when it times whole pipeline columns (timeline.hpp).
  std::vector<detail::ProgramView> programs(schedule.ranks.begin(), schedule.ranks.end());
  const detail::PairMode mode = detail::pair_mode_for(plan.num_ranks(), programs, timing == Timing::LowerBound);
  shape_ = std::make_unique<detail::TimelineShape>(std::move(programs), mode);
}

// Compute durations depend on the workload alone and all-to-all slices on the programs alone, so
// of each GPU order only the transfers and collectives are priced; and of those only the distinct
// ones: a rank's program repeats the same transfer (same flow set, ends and bytes) or collective
// (same group and bytes) in every layer and round, so each distinct price is asked of the network
// once per order and copied to every op that names it.
struct PreparedTiming::OrderFree {
  std::vector<std::vector<double>> duration;  // by program, op: compute durations, 0 for transfers
  // One network price: the arguments of the NetworkPricer call that gives it.
  struct Priced {
    OpKind kind = OpKind::Send;
    int32_t flow_set = -1, src = -1, dst = -1;  // Send/Recv: the message's ends, in that direction
    int32_t group = -1;                         // collectives
    int32_t slices = -1;                        // AllToAll: index into `slices`
    int64_t bytes = 0;                          // Send/Recv/collectives; tree all-reduce: its buffer
    bool tree = false;                          // AllReduce by the tree algorithm
    auto operator<=>(const Priced&) const = default;
  };
  std::vector<Priced> priced;
  struct Transfer {
    uint32_t program, op, priced;  // `priced`: index into `priced`
  };
  std::vector<Transfer> transfers;
  std::vector<std::vector<std::pair<int, int64_t>>> slices;
  using SliceIndex = std::map<std::pair<int, std::vector<std::pair<int, int64_t>>>, int32_t>;

  // The network price `op` of `program` needs, its all-to-all slices found once (`slice_index`
  // merges equal slice lists of one group).
  Priced price_of(const RankProgram& program, const Op& op, const Schedule& schedule, detail::NetworkPricer& network,
                  SliceIndex& slice_index);
  double seconds(const Priced& p, detail::NetworkPricer& network) const;
};

PreparedTiming::~PreparedTiming() = default;

namespace {

// As OpPricer prices them: transfers and collectives on the network, everything else on the GPU.
bool is_transfer(const Op& op) {
  switch (op.kind) {
    case OpKind::Send:
    case OpKind::Recv:
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllToAll:
    case OpKind::AllReduce:
      return true;
    default:
      return false;
  }
}

}  // namespace

PreparedTiming::OrderFree::Priced PreparedTiming::OrderFree::price_of(const RankProgram& program, const Op& op,
                                                                      const Schedule& schedule,
                                                                      detail::NetworkPricer& network,
                                                                      SliceIndex& slice_index) {
  Priced p;
  p.kind = op.kind;
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
    p.flow_set = op.flow_set;
    p.src = op.kind == OpKind::Send ? program.rank : op.peer;
    p.dst = op.kind == OpKind::Send ? op.peer : program.rank;
    p.bytes = op.bytes;
    p.kind = OpKind::Send;  // a message costs the same at both ends
    return p;
  }
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  p.group = spec.group;
  if (op.kind == OpKind::AllToAll) {
    auto key = std::make_pair(int(spec.group), network.all_to_all_slices(program, op, schedule.tokens, schedule.dims));
    auto [it, fresh] = slice_index.try_emplace(std::move(key), int32_t(slices.size()));
    if (fresh) slices.push_back(it->first.second);
    p.slices = it->second;
    return p;
  }
  p.tree = op.kind == OpKind::AllReduce && spec.algorithm == AllReduceAlgorithm::Tree;
  p.bytes = p.tree ? spec.elements * schedule.dims.grad_elem_bytes : op.bytes;
  return p;
}

double PreparedTiming::OrderFree::seconds(const Priced& p, detail::NetworkPricer& network) const {
  switch (p.kind) {
    case OpKind::Send:
      return network.p2p_seconds(p.flow_set, p.src, p.dst, p.bytes);
    case OpKind::AllToAll:
      return network.all_to_all_seconds(p.group, slices[size_t(p.slices)]);
    default:
      return p.tree ? network.tree_all_reduce_seconds(p.group, p.bytes)
                    : network.collective_seconds(p.kind, p.group, p.bytes);
  }
}

void CostModel::prepare_order_free(const Plan& plan, const PreparedTiming& prepared,
                                   detail::NetworkPricer& network) const {
  const Schedule& schedule = prepared.schedule_;
  auto free = std::make_unique<PreparedTiming::OrderFree>();
  ComputeTimer compute(topology_.gpu(), calibration_, plan.workload);
  std::map<PreparedTiming::OrderFree::Priced, uint32_t> priced_index;
  PreparedTiming::OrderFree::SliceIndex slice_index;
  free->duration.resize(schedule.ranks.size());
  for (size_t p = 0; p < schedule.ranks.size(); ++p) {
    const RankProgram& program = schedule.ranks[p];
    free->duration[p].assign(program.ops.size(), 0.0);
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (!is_transfer(op)) {
        free->duration[p][i] = compute.seconds(op, schedule.tokens);
        continue;
      }
      if (op.kind != OpKind::Send && op.kind != OpKind::Recv && op.coll < 0) continue;  // priced 0
      const auto priced = free->price_of(program, op, schedule, network, slice_index);
      auto [it, fresh] = priced_index.try_emplace(priced, uint32_t(free->priced.size()));
      if (fresh) free->priced.push_back(priced);
      free->transfers.push_back({uint32_t(p), uint32_t(i), it->second});
    }
  }
  prepared.order_free_ = std::move(free);
}

std::vector<std::vector<double>> CostModel::order_durations(const Plan& plan, const PreparedTiming& prepared,
                                                            detail::NetworkPricer& network) const {
  if (!prepared.order_free_) prepare_order_free(plan, prepared, network);
  const PreparedTiming::OrderFree& free = *prepared.order_free_;
  std::vector<double> seconds(free.priced.size());
  for (size_t k = 0; k < free.priced.size(); ++k)
    seconds[k] = free.seconds(free.priced[k], network);
  std::vector<std::vector<double>> duration = free.duration;
  for (const PreparedTiming::OrderFree::Transfer& t : free.transfers)
    duration[t.program][t.op] = seconds[t.priced];
  return duration;
}

CostBreakdown CostModel::evaluate_times(const Plan& plan, const Schedule& schedule, Timing timing) const {
  // Priced once: every op on its own (the reference the search's per-order pricing is tested against).
  const PreparedTiming prepared(plan, schedule, timing);
  detail::NetworkPricer network(topology_, plan, schedule.flow_sets, tree_prices_.get(), flow_prices_.get());
  OpPricer pricer{schedule, network, ComputeTimer(topology_.gpu(), calibration_, plan.workload)};
  std::vector<std::vector<double>> duration(schedule.ranks.size());
  for (size_t p = 0; p < schedule.ranks.size(); ++p)
    duration[p] = pricer.durations(schedule.ranks[p]);
  return time_schedule(plan, *prepared.shape_, duration, true);
}

CostBreakdown CostModel::evaluate_times(const Plan& plan, const PreparedTiming& prepared, bool with_parts) const {
  const Schedule& schedule = prepared.schedule_;
  detail::NetworkPricer network(topology_, plan, schedule.flow_sets, tree_prices_.get(), flow_prices_.get());
  std::vector<std::vector<double>> duration = order_durations(plan, prepared, network);
  size_t doubles = 0;
  for (const std::vector<double>& d : duration)
    doubles += d.size();
  if (with_parts) return time_schedule(plan, *prepared.shape_, duration, true);
  // The timeline is a function of the durations alone (and of the plan's workload and ranks, the
  // same for every order of one candidate): equal durations give equal times.
  for (const PreparedTiming::Timed& t : prepared.timed_)
    if (t.duration == duration) return t.cost;
  CostBreakdown cost = time_schedule(plan, *prepared.shape_, duration, false);
  if (prepared.timed_doubles_ + doubles <= PreparedTiming::kMaxTimedDoubles) {
    prepared.timed_doubles_ += doubles;
    prepared.timed_.push_back({std::move(duration), cost});
  }
  return cost;
}

std::vector<std::vector<double>> CostModel::template_op_durations(
    const Plan& plan, const Schedule& step, const std::vector<const RankProgram*>& templates) const {
  detail::NetworkPricer network(topology_, plan, step.flow_sets, tree_prices_.get(), flow_prices_.get());
  OpPricer pricer{step, network, ComputeTimer(topology_.gpu(), calibration_, plan.workload)};
  std::vector<std::vector<double>> duration(templates.size());
  for (size_t p = 0; p < templates.size(); ++p)
    duration[p] = pricer.durations(*templates[p]);
  return duration;
}

std::vector<double> CostModel::template_sync_seconds(const Plan& plan, const Schedule& step,
                                                     const std::vector<const RankProgram*>& templates,
                                                     const std::vector<std::vector<uint32_t>>& copies) const {
  detail::NetworkPricer network(topology_, plan, step.flow_sets, tree_prices_.get(), flow_prices_.get());
  OpPricer pricer{step, network, ComputeTimer(topology_.gpu(), calibration_, plan.workload)};
  std::vector<double> longest(templates.size(), 0.0);
  for (size_t p = 0; p < templates.size(); ++p) {
    std::array<double, kNumStreams> by_stream{};
    for (size_t i = 0; i < templates[p]->ops.size(); ++i) {
      const Op& op = templates[p]->ops[i];
      if ((op.label == StepOp::GradSync || op.label == StepOp::ParamGather) && copies[p][i] > 0)
        by_stream[size_t(op.stream)] += copies[p][i] * pricer.seconds(op, *templates[p]);
    }
    longest[p] = *std::max_element(by_stream.begin(), by_stream.end());
  }
  return longest;
}

CostBreakdown CostModel::time_schedule(const Plan& plan, const detail::TimelineShape& shape,
                                       const std::vector<std::vector<double>>& duration, bool with_parts) const {
  WF_ASSERT(shape.size() == duration.size(), "durations of other programs than the timeline's");
  std::vector<std::vector<double>> ends, slowed;
  detail::TimelineShape::RunOptions options;
  options.ends_of = detail::critical_program;  // the parts read the critical program's alone
  options.compute_kept_under_comm = compute_kept_under_comm();
  options.slowed_durations = &slowed;
  const std::vector<detail::RankTiming> timings = shape.run(duration, with_parts ? &ends : nullptr, options);
  const PartsOf parts = [&](size_t critical, double step_s, double mean_compute_s, double busiest_compute_s) {
    if (ends[critical].empty()) {
      options.ends_of = [critical](const std::vector<detail::RankTiming>&) { return critical; };
      shape.run(duration, &ends, options);
    }
    detail::TierClassifier tiers(topology_, plan);
    // Compute slowed by communication was timed with its ops lengthened.
    const bool lengthened = critical < slowed.size() && !slowed[critical].empty();
    return detail::step_parts(shape.program(critical), lengthened ? slowed[critical] : duration[critical],
                              ends[critical], step_s, mean_compute_s, busiest_compute_s, tiers);
  };
  return summarize_timings(plan, timings, with_parts ? &parts : nullptr);
}

CostBreakdown CostModel::summarize_timings(const Plan& plan, const std::vector<detail::RankTiming>& timings,
                                           const PartsOf* parts) const {
  const double peak = kernel_peak_tflops(topology_.gpu(), plan.workload.dtype);
  CostBreakdown cost;
  double forward_s = 0, step_s = 0, critical_compute = 0, busiest_work = 0, total_work = 0;
  size_t critical = 0;
  // Forward ends with the last forward op of any rank, the step with the last op (as simulated).
  // A rank's work is its compute at full speed: what communication kernels beside it add
  // (CostOptions::comm_slowdown) is the critical rank's own part, not load imbalance, and a sample's
  // column left out on its bounds (step_timing.cpp) has only its work known.
  for (size_t p = 0; p < timings.size(); ++p) {
    const detail::RankTiming& t = timings[p];
    forward_s = std::max(forward_s, t.forward_end_s);
    const double compute = t.compute_forward_s + t.compute_backward_s, work = compute - t.slowdown_s;
    busiest_work = std::max(busiest_work, work);
    total_work += work;
    if (t.end_s > step_s) {
      step_s = t.end_s;
      critical_compute = compute;
      critical = p;
    }
  }
  if (parts && !timings.empty()) {
    // The mean and the busiest work, with the critical rank's own slowdown, against its compute.
    const double slowdown_s = timings[critical].slowdown_s;
    cost.parts =
        (*parts)(critical, step_s, total_work / double(timings.size()) + slowdown_s, busiest_work + slowdown_s);
    cost.parts.slowdown_ms = slowdown_s * 1e3;  // of its compute (CostOptions::comm_slowdown)
  }
  cost.forward_ms = forward_s * 1e3;
  cost.step_ms = step_s * 1e3;
  cost.backward_ms = cost.step_ms - cost.forward_ms;
  cost.compute_ms = busiest_work * 1e3;
  cost.exposed_comm_ms = std::max(0.0, cost.step_ms - critical_compute * 1e3);
  cost.attention_flops = layer_attention_flops(plan.workload);
  const double denominator = cost.step_ms * 1e-3 * plan.num_ranks() * peak * 1e12;
  cost.mfu = denominator > 0 ? cost.attention_flops / denominator : 0;
  return cost;
}

CommVolume comm_volume(const Schedule& schedule) {
  CommVolume v;
  for (const RankProgram& program : schedule.ranks) {
    CommVolume r;
    for (const Op& op : program.ops) {
      const bool fwd = op.phase == Phase::Forward;
      if (op.kind == OpKind::Send) {
        (fwd ? r.p2p_forward : r.p2p_backward) += op.bytes;
        (fwd ? r.messages_forward : r.messages_backward) += 1;
      } else if (is_collective(op.kind)) {
        (fwd ? r.collective_forward : r.collective_backward) += op.bytes;
      }
    }
    v.p2p_forward = std::max(v.p2p_forward, r.p2p_forward);
    v.p2p_backward = std::max(v.p2p_backward, r.p2p_backward);
    v.collective_forward = std::max(v.collective_forward, r.collective_forward);
    v.collective_backward = std::max(v.collective_backward, r.collective_backward);
    v.messages_forward = std::max(v.messages_forward, r.messages_forward);
    v.messages_backward = std::max(v.messages_backward, r.messages_backward);
  }
  return v;
}

}  // namespace wallfacer
