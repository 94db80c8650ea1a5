// Schedule checker, the parts that know about layers and the whole step (docs/checker.md): which
// layer each buffer belongs to, block coverage per layer and pass (forward, backward,
// recomputation), binding coverage per layer, the sizes of Gemm and Pointwise ops and the flat
// gradient and parameter collectives.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "checker_impl.hpp"

namespace wallfacer::detail::check {
namespace {

// Layer instances are numbered layer + micro-batch * kMicroStride.
constexpr int kMicroStride = 1 << 20;

// The decimal number of name[begin, end), -1 when it is not one (or too long).
int number_at(const std::string& name, size_t begin, size_t end) {
  if (begin >= end || end - begin > 6) return -1;
  int n = 0;
  for (size_t c = begin; c < end; ++c) {
    if (name[c] < '0' || name[c] > '9') return -1;
    n = n * 10 + (name[c] - '0');
  }
  return n;
}

// The layer instance of a buffer named "<name>.L<n>" or "<name>.L<n>.M<j>" (how unroll() names
// per-layer copies, the second with several micro-batches): n + j * kMicroStride; -1 when the
// name has no such suffix.
int layer_suffix(const std::string& name) {
  const size_t micro = name.rfind(".M");
  const size_t layer = name.rfind(".L", micro == std::string::npos ? std::string::npos : micro);
  if (layer == std::string::npos) return -1;
  if (micro == std::string::npos || micro < layer) return number_at(name, layer + 2, name.size());
  const int n = number_at(name, layer + 2, micro), j = number_at(name, micro + 2, name.size());
  return n < 0 || j < 0 ? -1 : n + j * kMicroStride;
}

const char* pass_name(int pass) {
  switch (Pass(pass % kNumPasses)) {
    case Pass::Forward:
      return "forward";
    case Pass::Backward:
      return "backward";
    case Pass::Recompute:
      return "forward recomputation";
  }
  return "?";
}

}  // namespace

// ---- layers ---------------------------------------------------------------------------------

void Checker::find_layers() {
  std::set<int> numbers;
  buffer_layer_.assign(sched_.ranks.size(), {});
  for (const RankProgram& prog : sched_.ranks) {
    auto& of = buffer_layer_[size_t(prog.rank)];
    for (const BufferDecl& b : prog.buffers) {
      of.push_back(layer_suffix(b.name));
      if (of.back() >= 0) numbers.insert(of.back());
    }
  }
  layer_numbers_.assign(numbers.begin(), numbers.end());
  for (auto& of : buffer_layer_)
    for (int32_t& n : of)
      if (n >= 0)
        n = int32_t(std::lower_bound(layer_numbers_.begin(), layer_numbers_.end(), n) - layer_numbers_.begin());
  report_.layers = std::max<int>(1, int(layer_numbers_.size()));
}

int Checker::layer_of_buffer(int rank, int32_t buf) const {
  if (buf < 0 || size_t(rank) >= buffer_layer_.size()) return -1;
  const auto& of = buffer_layer_[size_t(rank)];
  return size_t(buf) < of.size() ? of[size_t(buf)] : -1;
}

std::string Checker::layer_name(int slot) const {
  if (slot < 0 || size_t(slot) >= layer_numbers_.size()) return "?";
  const int n = layer_numbers_[size_t(slot)];
  if (n < kMicroStride) return std::to_string(n);
  return fmt::format("{} of micro-batch {}", n % kMicroStride, n / kMicroStride);
}

// The layer slot of an attention block: the layer all its buffers belong to; 0 in a schedule
// without layers; -1 (reported) when its buffers disagree or belong to no layer.
int Checker::block_layer(const RankProgram& prog, int32_t i) {
  if (layer_numbers_.empty()) return 0;
  const Op& op = prog.ops[size_t(i)];
  const int n = op.kind == OpKind::AttnFwd ? 3 : 4;
  const int layer = layer_of_buffer(prog.rank, op.buf[0]);
  for (int b = 0; b < n; ++b) {
    const int of = layer_of_buffer(prog.rank, op.buf[b]);
    if (of >= 0 && of == layer) continue;
    const std::string& name = prog.buffers[size_t(op.buf[b])].name;
    if (of < 0) {
      error("{}: buffer {} belongs to no layer (per-layer buffers are named <name>.L<n>)", where(prog.rank, i), name);
    } else {
      error("{}: buffers {} and {} belong to different layers", where(prog.rank, i),
            prog.buffers[size_t(op.buf[0])].name, name);
    }
    return -1;
  }
  return layer;
}

// ---- whole-step ops ---------------------------------------------------------------------------

std::string Checker::step_compute_problem(const Op& op) const {
  for (int32_t b : op.buf)
    if (b != -1) return fmt::format("names buffer slot {}, but whole-step compute touches no attention buffer", b);
  for (int32_t t : op.tok)
    if (t != -1) return fmt::format("names token set {}, but whole-step compute has no token axis", t);
  if (!(op.flops >= 0) || op.bytes < 0) return fmt::format("negative size: flops {}, bytes {}", op.flops, op.bytes);
  if (op.kind == OpKind::Pointwise) {
    const bool fp8 = op.label == StepOp::Fp8Cast || op.label == StepOp::Fp8Scale;
    if (fp8 && !plan_.workload.fp8_linear) return "an fp8 cast or scale update in a workload without fp8_linear";
    return "";
  }
  const int32_t m = op.gemm[0], n = op.gemm[1], k = op.gemm[2];
  if (m <= 0 || n <= 0 || k <= 0) return fmt::format("GEMM dimensions {} x {} x {} are not positive", m, n, k);
  const double expect = 2.0 * double(m) * double(n) * double(k);
  if (std::abs(op.flops - expect) > 1e-9 * expect)
    return fmt::format("flops {} differ from 2 m n k = {} (m, n, k = {}, {}, {})", op.flops, expect, m, n, k);
  return "";
}

// A flat collective: AllReduce, or AllGather / ReduceScatter of exactly one of WeightGrad and
// Weight, with no token or head lists; an all-reduce runs the algorithm the plan gives its group.
std::string Checker::flat_collective_problem(const RankProgram& prog, const Op& op) const {
  const CollectiveSpec& spec = prog.collectives[size_t(op.coll)];
  const CommGroup& group = plan_.groups[size_t(spec.group)];
  if (spec.kind == OpKind::AllReduce) {
    if (spec.algorithm == group.all_reduce) return "";
    return fmt::format("all-reduce runs as a {} but the plan gives group {} a {}", to_string(spec.algorithm),
                       group.name, to_string(group.all_reduce));
  }
  if (spec.kind == OpKind::AllToAll) return "an all-to-all cannot move flat vectors (WeightGrad, Weight)";
  if (spec.fields != field_bit(Field::WeightGrad) && spec.fields != field_bit(Field::Weight) &&
      spec.fields != field_bit(Field::Activation))
    return fmt::format("a flat {} moves one of WeightGrad, Weight and Activation, not {}", to_string(spec.kind),
                       fields_to_string(spec.fields));
  if (!spec.in_tokens.empty() || !spec.out_tokens.empty() || !spec.in_heads.empty() || !spec.out_heads.empty())
    return fmt::format("a flat {} of {} lists tokens or heads", to_string(spec.kind), fields_to_string(spec.fields));
  return "";
}

// The bytes a member sends (docs/schedule.md): an all-reduce 2 (p - 1) / p of its fp32 vector, a
// flat gather or reduce-scatter (p - 1) / p of it, gradients in fp32 and parameters in the dtype.
void Checker::check_flat_bytes(const RankProgram& prog, int32_t i) {
  const Op& op = prog.ops[size_t(i)];
  const CollectiveSpec& spec = prog.collectives[size_t(op.coll)];
  const int64_t p = int64_t(plan_.groups[size_t(spec.group)].ranks.size());
  int64_t expect = 0;
  if (p > 1 && spec.kind == OpKind::AllReduce) {
    expect = 2 * (p - 1) * spec.elements * dims_.grad_elem_bytes / p;
  } else if (p > 1) {
    expect =
        (p - 1) * spec.elements * (has(spec.fields, Field::WeightGrad) ? dims_.grad_elem_bytes : dims_.elem_bytes) / p;
  }
  if (op.bytes != expect)
    error("{}: sends {} bytes, but {} elements of {} over {} members are {} bytes", where(prog.rank, i), op.bytes,
          spec.elements, fields_to_string(spec.fields), p, expect);
}

// A pipeline stage message: both ends flat activations, between neighbours of one pipeline group
// in the direction its tag says (0 activations forward, 1 their gradients back), whole rows of
// the model width on both ends. With virtual stages the last stage also feeds the first (and the
// gradients go back from the first to the last).
void Checker::check_stage_pair(int s, int32_t i, int r, int32_t j) {
  const Op& so = sched_.ranks[size_t(s)].ops[size_t(i)];
  const Op& ro = sched_.ranks[size_t(r)].ops[size_t(j)];
  rv_.partner[size_t(rv_.offset[size_t(s)] + i)] = rv_.offset[size_t(r)] + j;
  rv_.partner[size_t(rv_.offset[size_t(r)] + j)] = rv_.offset[size_t(s)] + i;
  if (!is_stage_message(so) || !is_stage_message(ro))
    return error("{}: a stage message of activations pairs with {}, which moves {}", where(s, i), where(r, j),
                 fields_to_string(is_stage_message(so) ? ro.fields : so.fields));
  int step = 0;  // stage distance from sender to receiver within their pipeline group
  for (const CommGroup& g : plan_.groups) {
    if (g.kind != GroupKind::Pipeline) continue;
    const auto a = std::find(g.ranks.begin(), g.ranks.end(), s), b = std::find(g.ranks.begin(), g.ranks.end(), r);
    if (a != g.ranks.end() && b != g.ranks.end()) step = int(b - a);
  }
  const int expect = so.tag == 0 ? 1 : so.tag == 1 ? -1 : 0;
  const int Pp = plan_.params.pipeline_parallel;
  const bool wrap = plan_.params.virtual_stages > 1 && Pp > 1 && step == -expect * (Pp - 1);
  if (expect == 0 || (step != expect && !wrap))
    error("{}: a stage message with tag {} goes to rank {}, which is not its {} stage neighbour in a pipeline group",
          where(s, i), so.tag, r, so.tag == 0 ? "next" : "previous");
  const int64_t row = int64_t(dims_.elem_bytes) * plan_.workload.hidden;
  if (so.bytes <= 0 || so.bytes % row != 0)
    error("{}: {} bytes are not whole rows of {} activations ({} bytes each)", where(s, i), so.bytes,
          plan_.workload.hidden, row);
}

// ---- (a) block coverage -----------------------------------------------------------------------

void Checker::check_compute_op(const RankProgram& prog, int32_t i) {
  const Op& op = prog.ops[size_t(i)];
  const TokenSet& q = sched_.tokens.get(op.tok[0]);
  const TokenSet& k = sched_.tokens.get(op.tok[1]);
  if (op.heads.begin < 0 || op.heads.end > dims_.heads || op.heads.size() <= 0)
    return error("{}: heads [{}, {}) outside [0, {})", where(prog.rank, i), op.heads.begin, op.heads.end, dims_.heads);
  if (op.mask == Mask::Causal && !dims_.causal)
    return error("{}: causal mask in a full-attention schedule", where(prog.rank, i));
  int64_t live = 0, all = 0;
  for (const TokenRange& qr : q)
    for (const TokenRange& kr : k) {
      all += qr.size() * kr.size();
      live += causal_pairs(qr, kr);
    }
  if (op.mask == Mask::None) {
    if (dims_.causal && live != all)
      error("{}: computes {} pairs the causal mask excludes (no Mask::Causal)", where(prog.rank, i), all - live);
    live = all;
  }
  if (live == 0) return error("{}: block has no live (query, key) pairs", where(prog.rank, i));
  double expect = 4.0 * (prog.batch_end - prog.batch_begin) * double(live) * op.heads.size() * dims_.head_dim *
                  (op.kind == OpKind::AttnBwd ? 2.5 : 1.0);
  if (std::abs(op.flops - expect) > 1e-9 * expect)
    error("{}: flops {} differ from the block's exact count {}", where(prog.rank, i), op.flops, expect);
}

// Sorts every attention block into its layer's forward, backward or recomputation pass, checks
// each block on its own, then counts the coverage of every pass that must be complete: every
// layer's forward, every layer's backward when the schedule has a backward, and every layer's
// recomputation when that layer recomputes anything.
void Checker::check_coverage() {
  const int layers = std::max<int>(1, int(layer_numbers_.size()));
  blocks_.assign(size_t(layers * kNumPasses), {});
  std::set<int> bounds{0, dims_.batch};
  for (const RankProgram& prog : sched_.ranks) {
    bounds.insert(prog.batch_begin);
    bounds.insert(prog.batch_end);
    for (int32_t i = 0; i < int32_t(prog.ops.size()); ++i) {
      const Op& op = prog.ops[size_t(i)];
      if (op.kind != OpKind::AttnFwd && op.kind != OpKind::AttnBwd) continue;
      const bool again = (op.flags & kOpRecompute) != 0;
      const Pass pass = op.kind == OpKind::AttnBwd ? Pass::Backward : again ? Pass::Recompute : Pass::Forward;
      ++(pass == Pass::Forward    ? report_.forward_blocks
         : pass == Pass::Backward ? report_.backward_blocks
                                  : report_.recomputed_blocks);
      has_backward_ = has_backward_ || pass == Pass::Backward;
      if (op.kind == OpKind::AttnBwd && again)
        error("{}: a backward block cannot be a recomputation", where(prog.rank, i));
      if (op.phase != (pass == Pass::Forward ? Phase::Forward : Phase::Backward))
        error("{}: phase is {}", where(prog.rank, i), to_string(op.phase));
      check_compute_op(prog, i);
      const int layer = block_layer(prog, i);
      if (layer >= 0) blocks_[size_t(layer * kNumPasses + int(pass))].push_back({prog.rank, i});
    }
  }
  const std::vector<int> b(bounds.begin(), bounds.end());
  for (int layer = 0; layer < layers; ++layer)
    for (int pass = 0; pass < kNumPasses; ++pass) {
      const int at = layer * kNumPasses + pass;
      if (Pass(pass) == Pass::Backward && !has_backward_) continue;
      if (Pass(pass) == Pass::Recompute && blocks_[size_t(at)].empty()) continue;
      for (size_t s = 0; s + 1 < b.size(); ++s)
        check_coverage_slice(b[s], b[s + 1], at);
    }
}

// Counts how often each cell of the grid of distinct head and token boundaries is computed
// (count_cover): O(rectangles + cells), never per token pair.
void Checker::check_coverage_slice(int b0, int b1, int pass) {
  std::vector<Rect> rects;
  for (const auto& [rank, i] : blocks_[size_t(pass)]) {
    const RankProgram& prog = sched_.ranks[size_t(rank)];
    const Op& op = prog.ops[size_t(i)];
    if (prog.batch_begin > b0 || prog.batch_end < b1) continue;
    if (op.heads.begin < 0 || op.heads.end > dims_.heads || op.heads.size() <= 0) continue;
    for (const TokenRange& q : sched_.tokens.get(op.tok[0]))
      for (const TokenRange& k : sched_.tokens.get(op.tok[1]))
        rects.push_back({prog.rank, i, op.heads, q, k});
  }
  std::vector<Box> boxes;
  boxes.reserve(rects.size());
  for (const Rect& r : rects)
    boxes.push_back({{r.heads.begin, r.q.begin, r.k.begin}, {r.heads.end, r.q.end, r.k.end}});
  int reported = 0;
  count_cover(boxes, {dims_.heads, dims_.seq, dims_.seq}, [&](const GridCell& c) {
    // Dead cells may be counted by causal blocks that skip them; unmasked blocks over dead pairs
    // are reported per op.
    bool live = !dims_.causal || c.lo[2] < c.hi[1];
    if (live && c.count != 1)
      report_cell(pass, b0, b1, rects, {int32_t(c.lo[0]), int32_t(c.hi[0])}, {c.lo[1], c.hi[1]}, {c.lo[2], c.hi[2]},
                  c.count, reported++ < 5);
  });
}

void Checker::report_cell(int pass, int b0, int b1, const std::vector<Rect>& rects, HeadRange h, TokenRange q,
                          TokenRange k, int32_t covered, bool detail) {
  std::string by;
  if (detail && covered > 1) {
    for (const Rect& r : rects) {
      if (heads_in_both(r.heads, h) > 0 && r.q.begin <= q.begin && r.q.end >= q.end && r.k.begin <= k.begin &&
          r.k.end >= k.end)
        by += (by.empty() ? ": by " : ", ") + where(r.rank, r.op);
    }
  }
  std::string label = pass_name(pass);
  if (!layer_numbers_.empty()) label += ", layer " + layer_name(pass / kNumPasses);
  const char* what = covered == 0 ? "missing block" : "block computed more than once";
  error("{} ({}): batch [{}, {}) heads [{}, {}) queries [{}, {}) x keys [{}, {}) computed {} times, needed once{}",
        what, label, b0, b1, h.begin, h.end, q.begin, q.end, k.begin, k.end, covered, by);
}

// ---- (f) inputs and outputs, per layer -----------------------------------------------------------

void Checker::check_bindings() {
  for (Field f : {Field::Q, Field::K, Field::V})
    check_binding_cover(f, false);
  for (Field f : {Field::O, Field::Lse})
    check_binding_cover(f, true);
  if (has_backward_) {
    check_binding_cover(Field::dO, false);
    for (Field f : {Field::dQ, Field::dK, Field::dV})
      check_binding_cover(f, true);
  }
}

// Bindings of one field over all ranks must cover every (batch, token, head) exactly once, in
// every layer: a binding belongs to the layer of its buffer.
void Checker::check_binding_cover(Field field, bool outputs) {
  const int heads = is_query_class(field) ? dims_.heads : dims_.kv_heads;
  const char* side = outputs ? "output" : "input";
  std::vector<std::vector<Box>> boxes(std::max<size_t>(1, layer_numbers_.size()));
  for (const RankProgram& prog : sched_.ranks)
    for (const Binding& bind : outputs ? prog.outputs : prog.inputs) {
      if (bind.field != field || bind.tokens < 0 || bind.tokens >= int32_t(sched_.tokens.size())) continue;
      if (bind.buf < 0 || size_t(bind.buf) >= prog.buffers.size()) continue;  // reported with the contents
      if (bind.heads.begin < 0 || bind.heads.end > heads || bind.heads.size() <= 0) {
        error("rank {}: {} binding of {} has heads [{}, {}) outside [0, {})", prog.rank, side, to_string(field),
              bind.heads.begin, bind.heads.end, heads);
        continue;
      }
      const int layer = layer_numbers_.empty() ? 0 : layer_of_buffer(prog.rank, bind.buf);
      if (layer < 0) {
        error("rank {}: {} binding of {} names buffer {}, which belongs to no layer", prog.rank, side, to_string(field),
              prog.buffers[size_t(bind.buf)].name);
        continue;
      }
      for (const TokenRange& t : sched_.tokens.get(bind.tokens))
        boxes[size_t(layer)].push_back(
            {{prog.batch_begin, bind.heads.begin, t.begin}, {prog.batch_end, bind.heads.end, t.end}});
    }
  for (size_t layer = 0; layer < boxes.size(); ++layer) {
    const std::string of = layer_numbers_.empty() ? "" : " (layer " + layer_name(int(layer)) + ")";
    count_cover(boxes[layer], {dims_.batch, heads, dims_.seq}, [&](const GridCell& c) {
      if (c.count != 1)
        error("{} {}{}: batch [{}, {}) heads [{}, {}) tokens [{}, {}) bound {} times, needed once", side,
              to_string(field), of, c.lo[0], c.hi[0], c.lo[1], c.hi[1], c.lo[2], c.hi[2], c.count);
    });
  }
}

}  // namespace wallfacer::detail::check
