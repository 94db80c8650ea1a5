#include "replay.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/all_reduce.hpp>
#include <wallfacer/schedule/ring_channels.hpp>
#include "rank_actor.hpp"

namespace wallfacer::sim {
namespace {

ChannelKey channel_key(int src, int dst, int group, int lane) {
  return {(uint64_t(src) << 32) | uint32_t(dst), (uint64_t(uint32_t(group + 1)) << 32) | uint32_t(lane)};
}

bool is_compute(OpKind kind) {
  return kind == OpKind::AttnFwd || kind == OpKind::AttnBwd || kind == OpKind::BwdPrep || kind == OpKind::Copy ||
         is_step_compute(kind);
}

}  // namespace

Replay::Replay(const Plan& plan, const Topology& topology, const Schedule& schedule, const SimOptions& options,
               SimEngine& engine, std::vector<int> host_of_gpu)
    : plan_(plan),
      topology_(topology),
      schedule_(schedule),
      options_(options),
      engine_(engine),
      host_of_gpu_(std::move(host_of_gpu)),
      timer_(topology.gpu(), options.calibration, plan.workload) {
  peak_flops_ = kernel_peak_tflops(topology.gpu(), plan.workload.dtype) * 1e12;
  if (!(peak_flops_ > 0))
    throw InputError(fmt::format("topology '{}': GPU model '{}' has no {} peak rate", topology.name(),
                                 topology.gpu().name, to_string(plan.workload.dtype)));
  slowdown_ = options.comm_slowdown && options.calibration.compute_slowdown_under_comm() < 1.0;
  expand_options_.all_to_all = options.all_to_all == "direct" ? AllToAllAlgorithm::Direct : AllToAllAlgorithm::Pairwise;
  expand_options_.max_ring_steps = options.max_ring_steps;
  expand_options_.grad_elem_bytes = schedule_.dims.grad_elem_bytes;
  validate_schedule();
  if (!options.trace_ranks.empty()) {
    traced_.assign(size_t(plan.num_ranks()), false);
    for (int rank : options.trace_ranks) {
      if (rank < 0 || rank >= plan.num_ranks())
        throw InputError("--trace-ranks", 0,
                         fmt::format("rank {} does not exist (the plan has ranks 0..{})", rank, plan.num_ranks() - 1));
      traced_[size_t(rank)] = true;
    }
  }
  std::vector<int> gpus;
  for (const auto& rank : plan.ranks)
    gpus.push_back(rank.gpu);
  std::sort(gpus.begin(), gpus.end());
  compute_alone_ = options.shortcuts && !slowdown_ && std::adjacent_find(gpus.begin(), gpus.end()) == gpus.end();
  size_t ranks = schedule.ranks.size();
  steps_.resize(ranks);
  expanded_bytes_.resize(ranks);
  op_channels_.resize(ranks);
  outcomes_.resize(ranks);
  resource_bytes_.assign(topology.links().size() * 2, 0.0);
  for (int rank = 0; rank < int(ranks); ++rank)
    prepare_rank(rank);
}

Replay::~Replay() = default;

void Replay::validate_schedule() const {
  if (schedule_.ranks.size() != size_t(plan_.num_ranks()))
    throw ScheduleError(
        fmt::format("schedule has {} rank programs for a plan of {} ranks", schedule_.ranks.size(), plan_.num_ranks()));
  for (size_t i = 0; i < schedule_.ranks.size(); ++i) {
    if (schedule_.ranks[i].rank != int(i))
      throw ScheduleError(fmt::format("rank program {} is numbered {}", i, schedule_.ranks[i].rank));
    int gpu = plan_.ranks[i].gpu;
    if (gpu < 0 || gpu >= topology_.num_gpus())
      throw InputError(
          fmt::format("plan places rank {} on GPU {}, but the topology has {} GPUs", i, gpu, topology_.num_gpus()));
  }
}

int Replay::add_channel(int src, int dst, int group, int lane) {
  auto [it, inserted] = channels_.try_emplace(channel_key(src, dst, group, lane), 0);
  if (inserted) {
    std::string name = group < 0  ? fmt::format("p{}>{}", src, dst)
                       : lane > 0 ? fmt::format("c{}.{}:{}>{}", group, lane, src, dst)
                                  : fmt::format("c{}:{}>{}", group, src, dst);
    it->second = engine_.add_channel(name);
    WF_ASSERT(size_t(it->second) == channel_ends_.size(), "channels are numbered in creation order");
    channel_ends_.emplace_back(src, dst);
    channel_bytes_.push_back(0);
    // A channel joins two ranks, so its first use is the first time their GPUs need a route.
    gpu_pairs_.emplace_back(gpu_of_rank(src), gpu_of_rank(dst));
  }
  return it->second;
}

void Replay::spread_channel_bytes() {
  for (size_t channel = 0; channel < channel_bytes_.size(); ++channel) {
    if (channel_bytes_[channel] == 0) continue;
    int src = gpu_of_rank(channel_ends_[channel].first), dst = gpu_of_rank(channel_ends_[channel].second);
    if (src == dst) continue;
    for (const Hop& hop : topology_.route(src, dst).hops)
      resource_bytes_[size_t(topology_.resource_of(hop))] += channel_bytes_[channel];
  }
}

void Replay::prepare_rank(int rank) {
  const RankProgram& program = schedule_.ranks[size_t(rank)];
  int ranks = plan_.num_ranks();
  steps_[size_t(rank)].resize(program.collectives.size());
  expanded_bytes_[size_t(rank)].assign(program.collectives.size(), -1.0);
  op_channels_[size_t(rank)].assign(program.ops.size(), -1);
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
      if (op.peer < 0 || op.peer >= ranks)
        throw ScheduleError(
            fmt::format("rank {} op {}: {} peer {} out of range", rank, i, to_string(op.kind), op.peer));
      bool send = op.kind == OpKind::Send;
      int src = send ? rank : op.peer, dst = send ? op.peer : rank;
      op_channels_[size_t(rank)][i] = add_channel(src, dst, -1, 0);
      if (send) channel_bytes_[size_t(op_channels_[size_t(rank)][i])] += double(op.bytes);
    } else if (is_collective(op.kind)) {
      prepare_collective(rank, i);
    } else if (!is_compute(op.kind)) {
      throw ScheduleError(fmt::format("rank {} op {}: unknown op kind", rank, i));
    }
    if (int(op.stream) >= kNumStreams) throw ScheduleError(fmt::format("rank {} op {}: bad stream", rank, i));
  }
}

// Expands a collective op's spec into transfers once; the whole step's unrolled layers run many
// ops of one spec, each sending the same bytes. Every op counts its bytes on the channels.
void Replay::prepare_collective(int rank, size_t i) {
  const RankProgram& program = schedule_.ranks[size_t(rank)];
  const Op& op = program.ops[i];
  if (op.coll < 0 || size_t(op.coll) >= program.collectives.size())
    throw ScheduleError(fmt::format("rank {} op {}: collective index {} out of range", rank, i, op.coll));
  const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
  if (spec.group < 0 || spec.group >= int(plan_.groups.size()))
    throw ScheduleError(fmt::format("rank {} op {}: group {} out of range", rank, i, spec.group));
  double& expanded = expanded_bytes_[size_t(rank)][size_t(op.coll)];
  CollectiveSteps& steps = steps_[size_t(rank)][size_t(op.coll)];
  if (expanded >= 0) {
    if (expanded != double(op.bytes))
      throw ScheduleError(fmt::format("rank {} op {}: collective {} is run with {} and {} bytes", rank, i, op.coll,
                                      expanded, op.bytes));
    for (const auto& send : steps.sends)
      channel_bytes_[size_t(send.channel)] += send.bytes;
    return;
  }
  expanded = double(op.bytes);
  const TreeGroup* tree =
      op.kind == OpKind::AllReduce && spec.algorithm == AllReduceAlgorithm::Tree ? &tree_group(spec.group) : nullptr;
  const RingChannels* rings = tree || op.kind == OpKind::AllToAll ? nullptr : &ring_channels_of(spec.group);
  steps = expand_collective(spec, double(op.bytes), tree ? tree->members : plan_.groups[size_t(spec.group)].ranks, rank,
                            schedule_.tokens, expand_options_, tree ? &tree->rounds : nullptr, rings);
  // Each ring channel pairs through its own mailboxes: two channels may join the same two ranks.
  for (auto& send : steps.sends) {
    send.channel = add_channel(rank, send.peer, spec.group, send.lane);
    channel_bytes_[size_t(send.channel)] += send.bytes;
    int src = gpu_of_rank(rank), dst = gpu_of_rank(send.peer);
    if (send.merged > 1 && src != dst) send.delay = (send.merged - 1) * route_latency_s(src, dst);
    // The tree's first send starts once the pipeline has filled: the member's last flow ends
    // the tree's longest path latency plus its flows' transfer times after it starts.
    if (tree && &send == &steps.sends[0]) send.delay = std::max(0.0, tree->latency_s - route_latency_s(src, dst));
  }
  for (auto& recv : steps.recvs)
    recv.channel = add_channel(recv.peer, rank, spec.group, recv.lane);
}

const RingChannels& Replay::ring_channels_of(int group) {
  auto [it, inserted] = ring_channels_.try_emplace(group);
  if (inserted) it->second = ring_channels(plan_, group, topology_);
  return it->second;
}

double Replay::route_latency_s(int src_gpu, int dst_gpu) {
  auto [it, inserted] = route_latency_s_.try_emplace((uint64_t(src_gpu) << 32) | uint32_t(dst_gpu), 0.0);
  if (inserted) it->second = topology_.route(src_gpu, dst_gpu).latency_us * 1e-6;
  return it->second;
}

const Replay::TreeGroup& Replay::tree_group(int group) {
  auto [it, inserted] = tree_groups_.try_emplace(group);
  TreeGroup& tree = it->second;
  if (inserted) {
    const TreeLayout layout = tree_layout(plan_, group, topology_);
    tree.members = layout.members;
    tree.rounds = index_tree_rounds(layout);
    tree.latency_s = tree_critical_latency_s(layout, [&](int a, int b) {
      return route_latency_s(gpu_of_rank(tree.members[size_t(a)]), gpu_of_rank(tree.members[size_t(b)]));
    });
  }
  return tree;
}

double Replay::op_seconds(const Op& op) {
  if ((op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd) && op.flops > 0) {
    for (int32_t id : {op.tok[0], op.tok[1]})
      if (id < 0 || size_t(id) >= schedule_.tokens.size())
        throw ScheduleError(fmt::format("{} op of {} FLOPs has no token set {}", to_string(op.kind), op.flops, id));
  }
  return timer_.seconds(op, schedule_.tokens);
}

void Replay::fail(double at_s, int rank, const std::string& message) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failure_.empty() || std::make_pair(at_s, rank) < std::make_pair(failure_at_s_, failure_rank_)) {
    failure_ = message;
    failure_at_s_ = at_s;
    failure_rank_ = rank;
  }
}

void Replay::prepare_actors() {
  const int ranks = int(schedule_.ranks.size());
  actors_.reserve(size_t(ranks));
  for (int rank = 0; rank < ranks; ++rank)
    actors_.push_back(std::make_unique<RankActor>(*this, rank));
}

void Replay::run() {
  const int ranks = int(schedule_.ranks.size());
  if (actors_.empty()) prepare_actors();
  for (int rank = 0; rank < ranks; ++rank) {
    RankActor* actor = actors_[size_t(rank)].get();
    engine_.spawn(fmt::format("rank{}", rank), host_of_rank(rank), [actor] { actor->run(); });
  }
  WF_LOG_DEBUG("simulator", "running {} rank actors", ranks);
  bool clean = engine_.run();
  spread_channel_bytes();
  if (!failure_.empty()) throw ScheduleError(failure_);
  std::string stuck;
  for (const auto& actor : actors_)
    if (!outcomes_[size_t(actor->rank())].finished && stuck.size() < 2000) stuck += "\n  " + actor->describe_wait();
  if (!stuck.empty() || !clean)
    throw ScheduleError("simulation deadlocked: ranks wait for activities that can never finish:" + stuck);
}

}  // namespace wallfacer::sim
