// Analytic cost of a plan on a topology, read off its schedule: compute time from each block's
// FLOPs and the calibrated kernel throughput; communication as latency + bytes / bandwidth along
// the route, where flows of one flow set that share a link (NIC, NVLink, fabric) divide its
// bandwidth; overlap from the dependencies (the critical path through the four streams).
// Memory per GPU from the schedule's buffers plus activations, weights and optimizer state.
// Formulas in docs/cost-model.md; the paper's closed forms in docs/algorithms.md §10 and §11.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/schedule.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {

struct CommVolume {
  int64_t p2p_forward = 0, p2p_backward = 0;                // bytes sent per GPU (max over ranks)
  int64_t collective_forward = 0, collective_backward = 0;  // bytes sent per GPU (max over ranks)
  int64_t messages_forward = 0, messages_backward = 0;      // P2P messages sent (max over ranks)
};

struct MemoryEstimate {
  double model_state_GiB = 0;  // weights, gradients, optimizer state (ZeRO-sharded)
  double activations_GiB = 0;  // checkpoints of all layers (WallFacer Eq. 8-10 model)
  double attention_GiB = 0;    // the schedule's buffers at their capacity (replicas, double buffers)
  double working_GiB = 0;      // step scope: the largest transient (logits, a recomputed layer)
  double total_GiB = 0;
};

// What step_memory reads off the attention programs: the busiest rank's rows in one micro-batch
// (its own tokens times its sequences) and its largest buffers, in bytes, per micro-batch.
struct AttentionFootprint {
  double rows = 0;
  double buffer_bytes = 0;
};

struct CostOptions {
  // Representative ranks whose programs are timed; 0 = all ranks. Symmetric strategies give
  // every rank the same critical path, so large clusters time a sample.
  int max_timed_ranks = 64;
  // Upper bound on the ops of all timed ranks together (0 = none): very long programs (a 16K-rank
  // ring) time fewer ranks, never fewer than the first two of the sample (rank 0 and the last).
  int64_t max_timed_ops = 250'000;
  // Whole step: price each op of a rank's step template once and give every unrolled copy its
  // duration (a copy differs only in its buffers and dependencies). False prices every unrolled
  // op on its own: the reference the tests compare the shortcut with.
  bool step_shortcuts = true;
  // Whole step, every rank timed: ranks that run the same timeline (the same order, durations and
  // kinds of partners, found on the templates) are timed once per class. Exact; false times every
  // rank, the reference the tests compare it with.
  bool time_rank_classes = true;
  // Whole-step memory and compute bound: ranks of the same sequence rank in their data-parallel
  // replica, tensor slice and pipeline stage build the same attention program and, in the same
  // stage, the same step template, up to the names of peers, groups and sequences, and the stages
  // between the first and the last build templates of the same compute: one program is built per
  // sequence rank (per sequence rank and first, middle or last stage for templates), and only
  // what the memory and the compute read (BuildMode::ComputeOnly). Exact; false builds every
  // timed rank whole, the reference the tests compare it with.
  bool build_per_sequence_rank = true;
  // Whole step: bytes of unrolled orders (flat steps) a step's timing keeps for the groups of
  // programs after the one that unrolled them, the first ones met; past that an order serves its
  // own group alone and is unrolled again if met again. Bounds memory, not results.
  size_t kept_unrolled_order_bytes = size_t(16) << 20;
  // Whole step, a sample's lone columns (one micro-batch, no pipeline): time this many layers and
  // one more (then twice as many, where the model has the layers), and compose the step of every
  // layer from them once its layers repeat, each op shifted by a steady amount from its copy in
  // the layer before (docs/cost-model.md "Columns composed from a few layers"); a column whose
  // layers do not is timed whole. Equal up to rounding; 0 times every layer, the reference the
  // tests compare it with.
  int composed_layers = 4;
  // Whole step, composed columns (composed_layers): a pricing prepares the runs of a few layers
  // once for the columns that unroll alike and differ in their durations alone
  // (detail::LayerComposer::serves), as most of a sample's do. Exact; false prepares each
  // column's own, the reference the tests compare it with.
  bool share_composers = true;
  // Whole step, a sample's lone columns: a column whose bounds (detail::lone_bounds, slowed with
  // comm_slowdown) end before the latest end of the columns timed so far, and its forward no
  // later than theirs, is not timed; the summary reads only its work, which the bounds sum. Exact;
  // false times every column, the reference the tests compare it with.
  bool leave_out_columns = true;
  // Compute runs at the calibration's compute_slowdown_under_comm of its speed while a transfer
  // of its rank is posted and unfinished (communication kernels hold SMs, waiting included), as
  // the simulator replays it (SimOptions::comm_slowdown): to first order, the ranks are timed at
  // full speed, their compute ops lengthened by what runs beside them (detail::ComputeUnderComm,
  // docs/cost-model.md "Compute slowed by communication") and timed again. Off: compute runs at
  // full speed throughout.
  bool comm_slowdown = true;
};

// Where a transfer runs, by the slowest kind of link on its way: NVLink or NVSwitch inside a node,
// PCIe (or the CPU bus) inside a node, or the network between nodes.
enum class CommTier : uint8_t { NvLink, Pcie, Network };
constexpr int kNumCommTiers = 3;
const char* to_string(CommTier tier);  // "nvlink", "pcie", "network"

// The cost model's expected error on a step time: its agreement with the SimGrid replay of the same
// schedule (docs/cost-model.md, "Validation": every strategy's whole step within 2 %). Candidates
// whose predicted steps differ by less than this share of the faster one are a tie. Replace it by
// the error against published measurements once docs/validation.md reaches its goal.
constexpr double kCostModelExpectedError = 0.02;

// Where the step time goes, on the rank that ends last (the critical rank), read off the timeline
// (docs/cost-model.md, "Where the step goes"). compute + imbalance + exposed (every tier) + idle is
// the step time; hidden communication runs under compute and is not part of that sum.
struct StepParts {
  // The critical rank's compute, up to the mean over the timed ranks. Ranks are compared by their
  // work (compute at full speed): with CostOptions::comm_slowdown, the mean and the busiest work
  // plus the critical rank's own slowdown.
  double compute_ms = 0;
  // The critical rank's compute above that mean, plus its waiting for other ranks up to how much
  // more work the busiest timed rank has.
  double imbalance_ms = 0;
  double exposed_ms[kNumCommTiers] = {};  // transfers run, compute does not; by the slowest tier running
  double idle_ms = 0;                     // nothing runs, and the rest of the waiting for other ranks
  double hidden_ms = 0;                   // transfers that run while compute runs
  // With CostOptions::comm_slowdown: of the critical rank's compute, what communication kernels
  // beside it added (docs/cost-model.md "Compute slowed by communication"). 0 without.
  double slowdown_ms = 0;
  // Transfers (sends and collectives) a GPU starts per layer, by tier: the mean over the timed
  // ranks (evaluate: of the attention layer; evaluate_step: of the whole step, divided by the
  // layers; evaluate_times leaves them 0).
  double transfers_per_layer[kNumCommTiers] = {};
  double exposed_total_ms() const { return exposed_ms[0] + exposed_ms[1] + exposed_ms[2]; }
  double sum_ms() const { return compute_ms + imbalance_ms + exposed_total_ms() + idle_ms; }
};

struct CostBreakdown {
  double forward_ms = 0, backward_ms = 0, step_ms = 0;
  double attention_ms = 0;     // step scope: the attention layer alone (its own schedule) x layers
  double tokens_per_s = 0;     // step scope: tokens of the step / step time
  double compute_ms = 0;       // busiest rank's work: its compute stream at full speed, forward + backward
  double exposed_comm_ms = 0;  // step minus compute on the critical rank
  CommVolume volume;
  MemoryEstimate memory;
  double attention_flops = 0;  // whole layer, all ranks (docs/algorithms.md §1.3)
  double model_flops = 0;      // step scope: step_model_flops (docs/step.md)
  double mfu = 0;              // attention_flops (step scope: model_flops) / (step time * ranks * peak)
  int layers_timed = 0;        // step scope: layers unrolled for timing (all of them)
  // Step scope: the programs the timeline ran, each unrolled to every layer: with every rank
  // timed, one per class of ranks that run alike (CostOptions::time_rank_classes); with a sample,
  // its programs less those timed alike with one before. Shows what a pricing cost.
  int programs_timed = 0;
  // Step scope, a sample: of programs_timed, those composed from a few of their layers
  // (CostOptions::composed_layers) instead of run over every layer: lone columns, and the stages
  // of pipeline columns of one micro-batch.
  int columns_composed = 0;
  StepParts parts;  // where step_ms goes (sums to it)
  // Step scope: schedule_hash of the timed ranks' attention programs the step was built from (0
  // when not taken), so that candidates building the same schedule are told apart without
  // building it again.
  uint64_t attention_fingerprint = 0;
  // Step scope: the latest end among the groups of programs timed so far (ms), after each group in
  // the order they were timed: a sample's columns (pipeline columns) one by one, otherwise one
  // group of every timed rank. Non-decreasing, the last one the step once every group is timed.
  std::vector<double> latest_ends_ms;
  // Step scope, with compute slowed by communication (else empty): the same with each group's own
  // compute at full speed, a lower bound of latest_ends_ms known whatever the stop (a group taken
  // from another or left out adds nothing to it): a group whose latest end at full speed is
  // already past the stop stops the pricing without being timed slowed. Empty where every
  // program is timed together.
  std::vector<double> latest_full_speed_ends_ms;
  // Step scope: timing stopped before the last group, its latest end past the stop asked for
  // (evaluate_step's stop_above_ms); step_ms is then that latest end, a lower bound of the step,
  // and the other figures are not filled. `stopped_at_full_speed`: the last group passed it at
  // full speed, and the last of latest_ends_ms is that of latest_full_speed_ends_ms.
  bool stopped = false;
  bool stopped_at_full_speed = false;
  Prediction to_prediction() const;
};

// How evaluate_times pairs the two ends of a message (planner/cost/timeline.hpp).
enum class Timing {
  // With every rank of the plan in the schedule, a message waits for its real other end; with a
  // sample, for this rank's own op of the same tag (symmetric partners).
  Estimate,
  // Every op starts when its own rank allows, as if the other end were always ready (pipeline
  // stage messages aside: they wait for their real other end where the schedule holds it): never
  // above Estimate for a schedule holding the same ranks or more (the search's bound).
  LowerBound,
};

namespace detail {
class NetworkPricer;
class TimelineShape;
class TreePriceCache;
class FootprintCache;
class FlowPriceCache;
struct RankTiming;
}  // namespace detail

struct StepTemplate;

// What step_compute_bound_ms and memory_footprint learn of a plan's ranks that does not depend
// on the GPUs they run on: per sequence rank, its attention program's footprint and op count; per
// (stage kind, sequence rank) and per kind of compute, the compute of one micro-batch. Plans
// that differ only in their placement (a context-first and a head-first double ring, WallFacer's
// two team placements: permutations of the GPUs) build the same programs, so one memo handed to
// each of them in turn builds those programs once. A memo holds the figures of one plan, its
// placement left out: handed a plan of another strategy, other parameters or another workload,
// it forgets what it held. Not for two threads at once.
class StepBoundMemo {
 public:
  StepBoundMemo();
  ~StepBoundMemo();
  StepBoundMemo(const StepBoundMemo&) = delete;
  StepBoundMemo& operator=(const StepBoundMemo&) = delete;

 private:
  friend class CostModel;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// How the ops of a schedule wait for each other (which message ends and collectives start
// together), prepared once to price the schedule many times: the search prices one schedule under
// every GPU order. Refers to `schedule`, which must outlive it and keep its ranks. It also keeps
// the times of the op durations it was run with (without parts): GPU orders that give every op
// the same duration (flows whose routes price the same) are timed once.
class PreparedTiming {
 public:
  PreparedTiming(const Plan& plan, const Schedule& schedule, Timing timing = Timing::Estimate);
  ~PreparedTiming();
  PreparedTiming(const PreparedTiming&) = delete;
  PreparedTiming& operator=(const PreparedTiming&) = delete;

 private:
  friend class CostModel;
  // What of the op durations does not depend on the GPU order, found when first priced.
  struct OrderFree;
  const Schedule& schedule_;
  std::unique_ptr<detail::TimelineShape> shape_;
  mutable std::unique_ptr<OrderFree> order_free_;
  struct Timed {
    std::vector<std::vector<double>> duration;
    CostBreakdown cost;
  };
  mutable std::vector<Timed> timed_;  // a few distinct duration sets, within kMaxTimedDoubles
  mutable size_t timed_doubles_ = 0;
  static constexpr size_t kMaxTimedDoubles = size_t(1) << 23;  // 64 MiB
};

// The rank whose pipeline column a whole step's timed bound times (CostModel::step_lower_bound_ms):
// the busiest of the ranks evaluate_step times, and whether those are a sample (fewer than the
// plan's ranks), which evaluate_step times column by column, each column on its own
// (PairMode::Symmetric).
struct BoundRank {
  int rank = -1;
  bool sampled = false;
};

// Runs `work` on a thread that would otherwise idle and returns true, or returns false at once
// when none is free: the step search lends its idle threads to the price it waits for this way.
using ThreadLender = std::function<bool(std::function<void()>)>;

class CostModel {
 public:
  CostModel(const Topology& topology, Calibration calibration, CostOptions options = {});
  ~CostModel();
  // Builds (the needed part of) the schedule of `plan` and prices it.
  CostBreakdown evaluate(const Plan& plan) const;
  // Prices an already-built schedule (all ranks present or a representative subset).
  CostBreakdown evaluate(const Plan& plan, const Schedule& schedule) const;
  // Times, compute and MFU only (no volume, no memory): what changes with the GPU order.
  CostBreakdown evaluate_times(const Plan& plan, const Schedule& schedule, Timing timing = Timing::Estimate) const;
  // The same with the schedule's timing structure prepared beforehand (for any GPU order of
  // the plan it was prepared with). Without `with_parts`, `parts` stays empty (the search prices
  // every GPU order and needs the parts of the chosen one only).
  CostBreakdown evaluate_times(const Plan& plan, const PreparedTiming& prepared, bool with_parts = true) const;
  MemoryEstimate memory(const Plan& plan, const Schedule& schedule) const;
  // The whole step of `plan` (its scope must be Step): the timed ranks' step templates unrolled to
  // every layer and timed (docs/cost-model.md). Where it times several groups of programs (a
  // sample's columns), it stops once the latest end among those timed exceeds `stop_above_ms()`
  // (read on the calling thread before and after each group; another thread may lower it
  // meanwhile, never raise it) with groups left (CostBreakdown::stopped): the search needs no
  // more of a step that cannot beat the best ones. The groups are timed in one order whatever
  // the stop, so a stopped pricing's latest ends are the first ones of the whole pricing's, but
  // for the last when a group passed the stop at full speed (then the whole pricing's
  // latest_full_speed_ends_ms). Threads from `lend` time a sample's columns side by side; the
  // result is the same with or without them.
  CostBreakdown evaluate_step(const Plan& plan, const std::function<double()>& stop_above_ms = {},
                              const ThreadLender& lend = {}) const;
  // A lower bound of evaluate_step(plan).step_ms without timing: the busiest timed rank's compute
  // stream, which runs one op at a time (every layer's compute ops included), plus, in a
  // pipeline, the earlier stages' compute of one micro-batch that must run before its first
  // forward and after its last backward. The timed ranks are those evaluate_step times: the
  // sample of timed_ranks within the op budget (build_timed).
  // `busiest`, when given, receives the timed rank with the most compute (M micro-batches'
  // forward and backward and the epilogue; the first in timed_ranks order on ties) and whether
  // the timed ranks are a sample.
  // `memory`, when given, receives the step memory evaluate_step reports (step_memory of the
  // timed ranks' attention programs), found from the programs the bound builds anyway. A memory
  // above `memory_budget_GiB` leaves the bound untaken (infinity, `busiest` untouched): a search
  // rejects that candidate on its memory, and the templates are most of the bound's work.
  // `memo`, when given, keeps what the bound learns for the next plan that differs only in its
  // placement, and supplies what it learnt of the last one: the same bound and memory.
  double step_compute_bound_ms(const Plan& plan, BoundRank* busiest = nullptr, MemoryEstimate* memory = nullptr,
                               double memory_budget_GiB = std::numeric_limits<double>::infinity(),
                               StepBoundMemo* memo = nullptr) const;
  // A lower bound of evaluate_step(plan).step_ms that counts communication: the whole step of
  // `busiest.rank`'s pipeline column (the rank alone without pipeline parallelism); rank -1 takes
  // the busiest of step_compute_bound_ms (under a causal contiguous layout the first rank has the
  // least attention work and the most slack).
  // When evaluate_step times a sample (`busiest.sampled`, as step_compute_bound_ms finds it, for
  // a rank it times), the column is timed exactly as evaluate_step times it, each column on its own
  // with its messages met by its own symmetric ends: the step is the latest end of those columns,
  // so the bound is one of them. Otherwise (every rank timed, whose messages meet their real other
  // ends; any rank gives a bound) its ops start when their own rank allows and only the stage
  // messages wait for their other end (PairMode::StagesOnly): pairing only delays ops, and the
  // step ends with its last rank.
  double step_lower_bound_ms(const Plan& plan, BoundRank busiest = {}) const;
  // step_lower_bound_ms of each plan, in their order. Plans that differ only in their placement
  // (which permutes the GPUs, not the ranks' programs) and time the same rank share the column's
  // templates, unrolled orders and timeline; only their ops are priced for each.
  using BoundedPlan = std::pair<const Plan*, BoundRank>;
  std::vector<double> step_lower_bounds_ms(const std::vector<BoundedPlan>& plans) const;
  // A lower bound of step_lower_bound_ms (of each plan, in their order) taken without timing: the
  // data-parallel synchronisation of the same column, every unrolled copy of its ops (gradient
  // buckets; under ZeRO 3 the weight gathers too) priced as the step prices them and summed on
  // the stream that runs them (its own, or LSS's collective stream), the longest of the column's
  // programs, less a margin for adding them in another order than a run does. A stream runs one
  // op at a time, so no program ends before they have run; under ZeRO 3 on many GPUs they hold
  // most of a communication-bound candidate's step, ten times its compute bound.
  // 0 for a column whose layers cannot be composed (docs/cost-model.md: its copies would need
  // every layer unrolled). Plans that differ only in their placement share the column's templates.
  std::vector<double> step_sync_bounds_ms(const std::vector<BoundedPlan>& plans) const;
  const Topology& topology() const { return topology_; }
  const Calibration& calibration() const { return calibration_; }
  const CostOptions& options() const { return options_; }
  // The share of its speed compute keeps while its rank communicates: the calibration's with
  // CostOptions::comm_slowdown, else 1.
  double compute_kept_under_comm() const {
    return options_.comm_slowdown ? calibration_.compute_slowdown_under_comm() : 1.0;
  }
  // Appends to `schedule` the programs of timed ranks it does not hold yet (timed_ranks order),
  // until it holds `max_ranks` (0 = the whole sample) or the op budget is spent. Fills dims and
  // flow sets when the schedule is empty. The programs do not depend on the GPU order.
  void build_timed(const Plan& plan, Schedule& schedule, int max_ranks = 0) const;
  // The ranks evaluate(plan) would time, in priority order (all ranks when few).
  std::vector<int> timed_ranks(const Plan& plan) const;
  // The attention programs step_memory reads for `plan`: those of the ranks build_timed builds,
  // or with CostOptions::build_per_sequence_rank one for each sequence rank among them, built
  // BuildMode::ComputeOnly (the same buffers, bindings and compute: the same memory and compute
  // bound).
  Schedule memory_programs(const Plan& plan) const;
  // attention_footprint of memory_programs(plan), remembered by plan (the attention programs do
  // not depend on the ZeRO stage or the checkpointing mode, so a search under other memory
  // settings, as the suggestions run, finds it again). `programs`, when given and the footprint
  // is not known yet, receives the programs it was read off.
  // With `memo`, the sequence ranks it knows are not built again (`programs` holds the others).
  AttentionFootprint memory_footprint(const Plan& plan, Schedule* programs = nullptr,
                                      StepBoundMemo* memo = nullptr) const;

 private:
  // memory_programs' programs with `memo`: those of the sequence ranks it does not know yet
  // (remembered there with their footprints and op counts), and in `footprint` the largest of
  // the sequence ranks walked.
  Schedule sequence_rank_programs(const Plan& plan, StepBoundMemo& memo, AttentionFootprint& footprint) const;
  // What of a prepared schedule's op durations does not depend on the GPU order (OrderFree).
  void prepare_order_free(const Plan& plan, const PreparedTiming& prepared, detail::NetworkPricer& network) const;
  // Durations of the prepared schedule's ops (by program, then op) on the plan's GPU order: the
  // order-free part computed once per PreparedTiming, the distinct transfers priced by `network`.
  std::vector<std::vector<double>> order_durations(const Plan& plan, const PreparedTiming& prepared,
                                                   detail::NetworkPricer& network) const;
  // Times the programs of a timeline shape with their ops' durations (by program, then op).
  CostBreakdown time_schedule(const Plan& plan, const detail::TimelineShape& shape,
                              const std::vector<std::vector<double>>& duration, bool with_parts) const;
  // Where the step goes on the critical program, given (critical program, step, mean and busiest
  // compute seconds of the timed programs).
  using PartsOf = std::function<StepParts(size_t, double, double, double)>;
  // The times of timed programs (by program) as a breakdown: the step ends with the last of them
  // (its critical program the first on ties); `parts`, when given, fills the parts.
  CostBreakdown summarize_timings(const Plan& plan, const std::vector<detail::RankTiming>& timings,
                                  const PartsOf* parts) const;
  // The whole step of `plan` from its timed ranks' step templates (evaluate_step's timing).
  CostBreakdown time_step_templates(const Plan& plan, const Schedule& step, const std::vector<StepTemplate>& templates,
                                    const std::function<double()>& stop_above_ms, const ThreadLender& lend) const;
  // Durations of the template ops (by template, then op), priced within `step`'s flow sets and
  // tokens: what each of their unrolled copies lasts.
  std::vector<std::vector<double>> template_op_durations(const Plan& plan, const Schedule& step,
                                                         const std::vector<const RankProgram*>& templates) const;
  // Of each template, the seconds its gradient and weight synchronisation ops (GradSync,
  // ParamGather) last together on the stream where they last longest, each op as often as
  // `copies[template][op]`, priced as template_op_durations prices them.
  std::vector<double> template_sync_seconds(const Plan& plan, const Schedule& step,
                                            const std::vector<const RankProgram*>& templates,
                                            const std::vector<std::vector<uint32_t>>& copies) const;

  const Topology& topology_;
  Calibration calibration_;
  CostOptions options_;
  std::shared_ptr<detail::TreePriceCache> tree_prices_;  // shared by copies: a search prices many plans
  std::shared_ptr<detail::FlowPriceCache> flow_prices_;  // likewise
  // Attention footprints of the plans whose memory was asked for (memory_footprint).
  std::shared_ptr<detail::FootprintCache> footprints_;
};

// Dense peak used for MFU and the fallback efficiency: BF16 or FP16 by dtype; FP32 the device's
// fp32 peak where the topology gives one (a CPU), else, like BF16 on a GPU without BF16 (V100),
// the FP16 peak (see dtype_issue).
double kernel_peak_tflops(const GpuModel& gpu, DType dtype);
// Why this GPU cannot run this dtype ("V100-SXM2-16GB has no bf16 tensor cores; use --dtype fp16"),
// empty when it can.
std::string dtype_issue(const GpuModel& gpu, DType dtype);
// What the calibration does not know about this GPU model for this workload and is therefore
// priced at an assumed efficiency: the attention kernels (fallback_efficiency of the dense peak),
// and with `whole_step` the GEMMs (the same) and the memory-bound kernels (a default HBM share).
// One sentence naming the model, the efficiencies and how to add them; empty when nothing falls back.
std::string calibration_gap(const Calibration& calibration, const GpuModel& gpu, const Workload& workload,
                            bool whole_step);

// Weights, gradients and Adam state per GPU in bytes: 16 bytes per parameter in mixed precision
// (2 bf16 weights, 2 bf16 gradients, 12 fp32 master weights and moments), sharded over all
// `ranks` GPUs (data-parallel x sequence-parallel) by ZeRO stage: 0 none, 1 optimizer state,
// 2 + gradients, 3 + weights.
double model_state_bytes(const Workload& workload, int ranks);
// The same for `params` parameters (a pipeline stage's, a tensor shard's).
double parameter_state_bytes(const Workload& workload, double params, int ranks);
// Memory of a whole step (docs/step.md): model state by ZeRO stage, every layer's stored
// activations by checkpointing mode (times the micro-batches a pipeline stage holds in flight),
// one layer's attention buffers (from the attention schedule of the ranks given) and the largest
// transient, on the fullest pipeline stage.
MemoryEstimate step_memory(const Plan& plan, const Schedule& attention);
AttentionFootprint attention_footprint(const Plan& plan, const Schedule& attention);
// The footprint of one attention program (attention_footprint is the largest of its programs').
AttentionFootprint program_footprint(const Plan& plan, const ScheduleDims& dims, const RankProgram& program,
                                     const TokenSetPool& pool);
MemoryEstimate step_memory(const Plan& plan, const AttentionFootprint& footprint);
// Model state and checkpointed activations of a plan on `ranks` GPUs, without the attention
// buffers (those need the schedule).
MemoryEstimate base_memory(const Workload& workload, int ranks);

// WallFacer's memory model (docs/algorithms.md §11, paper Eq. 8-10) read off a schedule: M model state,
// A = B·N·H/P activation elements (times the element size here), Y+1 checkpoints, and the Q, K, V
// the busiest rank holds at the forward peak (per field, its largest buffer), which is 3A for Ring
// Attention and 3C·A for WallFacer. peak = M + (Y+1)·A + qkv.
struct PaperMemoryTerms {
  double model_state_bytes = 0;
  double activation_bytes = 0;  // A·s, one activation slice
  int layers = 0;               // Y
  double qkv_bytes = 0;
  double peak_bytes() const { return model_state_bytes + (layers + 1) * activation_bytes + qkv_bytes; }
};
PaperMemoryTerms paper_memory_terms(const Plan& plan, const Schedule& schedule);

// Bytes of one rank's buffers at capacity (WeightGrad excluded: it is model state).
double buffer_bytes(const ScheduleDims& dims, const RankProgram& program);

// Transfers (sends and collectives) per rank of `schedule`'s programs by tier, mean over them.
void count_transfers(const Topology& topology, const Plan& plan, const Schedule& schedule, StepParts& parts);

// Communication volume of a full or partial schedule (sent bytes per rank, max over ranks).
CommVolume comm_volume(const Schedule& schedule);

}  // namespace wallfacer
