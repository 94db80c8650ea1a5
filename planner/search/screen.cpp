// Screening estimates for the heuristic search on large clusters (screen.hpp): the
// closed forms of docs/algorithms.md §10.2 and §10.4 per strategy, with one latency and bandwidth for
// links inside a node and one for links between nodes (for ring collectives, that of their channels,
// one per NIC). Rough by design: they only choose which candidates the schedule-based cost model
// prices.
#include "screen.hpp"

#include <algorithm>
#include <cmath>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/all_reduce.hpp>

namespace wallfacer::detail {
namespace {

struct LinkClass {
  double alpha_s = 0, bytes_per_s = 1;
  double time(double bytes) const { return alpha_s + bytes / bytes_per_s; }
};

struct Screen {
  const Workload& w;
  const StrategyParams& p;
  KernelCurve fwd_curve, bwd_curve;
  LinkClass intra, inter;
  int gpus_per_node = 1;
  double s = 2;                                  // bytes per element
  std::optional<AllReduceAlgorithm> all_reduce;  // forced on the plans (SearchOptions)
  int tree_channels = 1;
  int nics = 1;  // per node

  // A group of `members` ranks `stride` apart stays inside a node when it fits in one.
  const LinkClass& link(int members, int stride) const {
    return int64_t(members) * stride <= gpus_per_node ? intra : inter;
  }
  // The same group's ring collectives: between nodes on one ring channel per NIC its members
  // reach on a node (ring_estimate_bytes_per_s), as the cost model prices them.
  LinkClass ring_link(int members, int stride) const {
    if (int64_t(members) * stride <= gpus_per_node) return intra;
    const int per_node = std::min(members, std::max(gpus_per_node / std::max(stride, 1), 1));
    return {inter.alpha_s, ring_estimate_bytes_per_s((members + per_node - 1) / per_node, per_node, nics,
                                                     intra.bytes_per_s, inter.bytes_per_s)};
  }
  // Seconds of a q x k block over `head_fraction` of the heads, with `live` of its pairs computed.
  double block(double q, double k, double head_fraction, double live, bool backward) const {
    const double batch = double(w.batch) / p.data_parallel;
    const double flops = 4 * batch * q * k * double(w.q_width()) * head_fraction * live * (backward ? 2.5 : 1.0);
    const double tflops = (backward ? bwd_curve : fwd_curve).tflops(int64_t(q), int64_t(k));
    return tflops > 0 ? flops / (tflops * 1e12) : 0;
  }
  // Pass-KV ring of `members` rounds: blocks overlap the next transfer (§10.4).
  static double ring(double block, double transfer, int members) {
    return block + (members - 1) * std::max(block, transfer);
  }
  // Ring all-gather / reduce-scatter where each member sends `bytes` in total.
  static double ring_collective(const LinkClass& l, int members, double bytes) {
    return members < 2 ? 0 : (members - 1) * l.alpha_s + bytes / l.bytes_per_s;
  }
};

// Fraction of pairs the busiest rank computes: half under a balanced (zigzag) causal layout, all
// of them for the last rank of a contiguous one.
double live_fraction(const Workload& w, bool balanced) {
  return w.causal && balanced ? 0.5 : 1.0;
}

// Pass-KV ring of `ring` members `ring_stride` ranks apart, after a Ulysses all-to-all over
// `ulysses` ranks. With window w > 1 (double ring) the ring runs as ring/w windows of w members:
// (w-1) hops of each window stay on the window's links and one hop per window moves between
// windows; block sizes are those of the whole ring either way.
std::pair<double, double> ring_like(const Screen& c, int ring, int ring_stride, int ulysses, int a2a_stride,
                                    bool balanced, int window = 0) {
  const Workload& w = c.w;
  const double batch = double(w.batch) / c.p.data_parallel;
  const double per_rank = double(w.seq) / (double(ring) * ulysses);  // tokens before the all-to-all
  const double per_member = double(w.seq) / ring;                    // tokens per ring member after it
  const double heads = 1.0 / ulysses;
  const double kv = 2 * batch * per_member * double(w.kv_width()) * heads * c.s;
  const LinkClass& rl = c.link(ring, ring_stride);
  const double live = live_fraction(w, balanced);
  const double fb = c.block(per_member, per_member, heads, live, false);
  const double bb = c.block(per_member, per_member, heads, live, true);
  // Backward, each block's fp32 dK,dV accumulator (twice the K,V bytes) follows its K,V one hop
  // behind and must arrive before the next block is computed: K,V move under the compute, every
  // accumulator hop is exposed, and the last one goes home.
  auto backward_hop = [&](const LinkClass& l) { return std::max(bb, l.time(kv)) + l.time(2 * kv); };
  double fwd = Screen::ring(fb, rl.time(kv), ring);
  double bwd = ring > 1 ? bb + (ring - 1) * backward_hop(rl) + rl.time(2 * kv) : bb;
  if (window > 1 && window < ring) {
    const LinkClass& wl = c.link(window, ring_stride);
    const double windows = double(ring) / window, inner_hops = windows * (window - 1), outer_hops = windows - 1;
    fwd = fb + inner_hops * std::max(fb, wl.time(kv)) + outer_hops * std::max(fb, rl.time(kv));
    bwd = bb + inner_hops * backward_hop(wl) + outer_hops * backward_hop(rl) + rl.time(2 * kv);
  }
  if (ulysses > 1) {
    const LinkClass& al = c.link(ulysses, a2a_stride);
    const double slice = batch * per_rank * double(2 * w.q_width() + 2 * w.kv_width()) * c.s;
    const double a2a = 2 * (ulysses - 1) * al.alpha_s + slice * (ulysses - 1) / ulysses / al.bytes_per_s;
    fwd += a2a;
    bwd += 2 * a2a;
  }
  return {fwd, bwd};
}

std::pair<double, double> gather_like(const Screen& c, int S, double kv_fraction_of_hidden) {
  const Workload& w = c.w;
  const double batch = double(w.batch) / c.p.data_parallel;
  const double n = double(w.seq) / S;
  const double bytes = (S - 1) * 2 * batch * n * double(w.kv_width()) * c.s * kv_fraction_of_hidden;
  const LinkClass l = c.ring_link(S, 1);
  const double fwd = Screen::ring_collective(l, S, bytes) + c.block(n, double(w.seq), 1, 1, false);
  const double bwd = Screen::ring_collective(l, S, bytes) + Screen::ring_collective(l, S, 2 * bytes) +
                     c.block(n, double(w.seq), 1, 1, true);
  return {fwd, bwd};
}

std::pair<double, double> wallfacer(const Screen& c) {
  const Workload& w = c.w;
  const WallFacerKnobs& k = knobs_of<WallFacerKnobs>(StrategyKind::WallFacer, c.p);
  const int S = c.p.sequence_parallel, C = std::max(k.team, 1), G = int(std::max<int64_t>(S / (int64_t(C) * C), 1));
  const bool collect_intra = k.placement != TeamPlacement::P2PIntra;
  const LinkClass team = collect_intra ? c.ring_link(C, 1) : c.ring_link(C, G);
  const LinkClass& sub = collect_intra ? c.link(G, C) : c.link(G, 1);
  const double batch = double(w.batch) / c.p.data_parallel;
  const double n = double(w.seq) / S;
  const double gather = (C - 1) * batch * n * double(w.q_width() + 2 * w.kv_width()) * c.s;
  const double scatter = (C - 1) * batch * n * double(w.q_width()) * 4;
  const double kv = 2 * C * batch * n * double(w.kv_width()) * c.s;
  const double bundle = C * batch * n * double(w.q_width()) * (2 * c.s + 4);
  const double live = live_fraction(w, true);
  const double fb = c.block(C * n, C * n, 1, live, false), bb = c.block(C * n, C * n, 1, live, true);
  const double fwd = Screen::ring_collective(team, C, gather) + sub.time(kv) + Screen::ring(fb, sub.time(kv), G) +
                     Screen::ring_collective(team, C, scatter);
  const double bwd = 2 * Screen::ring_collective(team, C, gather) + Screen::ring(bb, sub.time(bundle), G) +
                     sub.time(bundle) + 2 * Screen::ring_collective(team, C, scatter);
  return {fwd, bwd};
}

// The weight-gradient all-reduce of the attention projections, in the workload's grad_comm_dtype
// as all_reduce.cpp prices it, over `members` ranks, as a ring or a tree, whichever the plan will
// choose (all_reduce.hpp). Every strategy but LSS runs it over all ranks after the backward pass.
double grad_allreduce(const Screen& c, int members) {
  if (members < 2) return 0;
  const LinkClass l = c.ring_link(members, 1);
  const double bytes = double(c.w.attention_parameters_per_layer()) * bytes_of(c.w.grad_comm_dtype);
  const double ring = ring_all_reduce_estimate_s(members, bytes, l.alpha_s, l.bytes_per_s);
  const int per_node = std::min(members, c.gpus_per_node);
  const double tree =
      tree_all_reduce_estimate_s((members + per_node - 1) / per_node, per_node, c.tree_channels, bytes, c.intra.alpha_s,
                                 c.intra.bytes_per_s, c.inter.alpha_s, c.inter.bytes_per_s);
  if (c.all_reduce && members >= 3) return *c.all_reduce == AllReduceAlgorithm::Tree ? tree : ring;
  return std::min(ring, tree);
}

LinkClass link_between(const Topology& topology, int a, int b) {
  const Route& r = topology.route(a, b);
  return {r.latency_us * 1e-6, r.bottleneck_GBps * 1e9};
}

}  // namespace

double screen_estimate_ms(StrategyKind strategy, const StrategyParams& params, const Workload& workload,
                          const Topology& topology, const Calibration& calibration,
                          std::optional<AllReduceAlgorithm> all_reduce) {
  const GpuModel& gpu = topology.gpu();
  const double peak = kernel_peak_tflops(gpu, workload.dtype);
  Screen c{workload,
           params,
           calibration.curve(gpu.name, KernelOp::AttnFwd, workload.dtype, workload.head_dim, peak),
           calibration.curve(gpu.name, KernelOp::AttnBwd, workload.dtype, workload.head_dim, peak),
           {},
           {},
           std::max(topology.gpus_per_node(), 1),
           double(bytes_of(workload.dtype)),
           all_reduce,
           tree_channels(topology),
           node_nics(topology)};
  const int g = topology.gpus_per_node();
  c.intra = g > 1 ? link_between(topology, 0, 1) : LinkClass{};
  c.inter = topology.num_nodes() > 1 ? link_between(topology, 0, g) : c.intra;
  if (g <= 1) c.intra = c.inter;

  const int S = params.sequence_parallel;
  const bool context_first = placement_of(params) == Placement::ContextFirst;
  std::pair<double, double> t{0, 0};
  switch (strategy) {
    case StrategyKind::Ring:
      t = ring_like(c, S, 1, 1, 1, false);
      break;
    case StrategyKind::Zigzag:
      t = ring_like(c, S, 1, 1, 1, true);
      break;
    case StrategyKind::Ulysses:
      t = ring_like(c, 1, 1, S, 1, true);
      break;
    case StrategyKind::Usp:
    case StrategyKind::DoubleRing: {
      const auto* usp = std::get_if<UspKnobs>(&params.knobs);
      const auto* dr = std::get_if<DoubleRingKnobs>(&params.knobs);
      if (!usp && !dr) throw_knobs_mismatch(strategy);
      const int u = std::max(usp ? usp->ulysses : dr->ulysses, 1), r = std::max(S / u, 1);
      const int window = dr ? dr->window : 0;
      t = ring_like(c, r, context_first ? 1 : u, u, context_first ? r : 1, true, window);
      break;
    }
    case StrategyKind::AllGather:
      t = gather_like(c, S, 1.0);
      break;
    case StrategyKind::Lss:
      t = gather_like(c, S, double(workload.q_width()) / double(workload.kv_width()));
      break;
    case StrategyKind::WallFacer:
      t = wallfacer(c);
      break;
  }
  const int D = std::max(params.data_parallel, 1);
  t.second += strategy == StrategyKind::Lss ? grad_allreduce(c, S) + grad_allreduce(c, D) : grad_allreduce(c, S * D);
  return (t.first + t.second) * 1e3;
}

}  // namespace wallfacer::detail
