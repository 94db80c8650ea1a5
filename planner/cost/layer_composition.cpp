// A sampled column's whole step timed from a few of its layers (layer_composition.hpp).
#include "layer_composition.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

namespace wallfacer::detail {
namespace {

enum Section { kPrologue, kForward, kHead, kGradientIn, kBackward, kTail, kEpilogue, kSections };

// Where each section's ops lie in the template and in a flat step of one micro-batch and one
// chunk: every section runs its main ops (a variant runs only on other chunks), layer sections
// once per layer, forward in layer order and backward in reverse.
struct Layout {
  std::array<uint32_t, kSections> begin{};  // first template op
  std::array<size_t, kSections> count{};    // main ops

  explicit Layout(const StepTemplate& step) {
    const StepSections& s = step.sections;
    const auto ops = uint32_t(step.program.ops.size());
    begin = {0, s.prologue_end, s.forward_end, s.head_end, s.gradient_in_end, s.backward_end, s.tail_end};
    const std::array<uint32_t, kSections> main_end = {
        s.prologue_variant, s.forward_end, s.head_variant, s.gradient_in_variant, s.backward_end, s.tail_variant, ops};
    for (size_t k = 0; k < kSections; ++k)
      count[k] = main_end[k] - begin[k];
  }
  size_t forward_ops() const { return count[kForward]; }
  size_t backward_ops() const { return count[kBackward]; }
  size_t head_ops() const { return count[kHead] + count[kGradientIn]; }  // with the gradient input
  size_t tail_ops() const { return count[kTail] + count[kEpilogue]; }    // with the epilogue
  size_t size(int layers) const { return tail(layers) + tail_ops(); }
  size_t forward(int layer) const { return count[kPrologue] + size_t(layer) * forward_ops(); }
  size_t head(int layers) const { return forward(layers); }
  // The backward layer run `position`-th (layer layers - 1 - position).
  size_t backward(int layers, int position) const {
    return head(layers) + head_ops() + size_t(position) * backward_ops();
  }
  size_t tail(int layers) const { return backward(layers, layers); }

  // Calls `visit(template op)` for each op of `layers` layers in order while it returns true;
  // whether it always did.
  template <typename Visit>
  bool each_op(int layers, Visit&& visit) const {
    auto instance = [&](Section k) {
      for (size_t j = 0; j < count[k]; ++j)
        if (!visit(begin[k] + uint32_t(j))) return false;
      return true;
    };
    bool ok = instance(kPrologue);
    for (int l = 0; l < layers && ok; ++l)
      ok = instance(kForward);
    ok = ok && instance(kHead) && instance(kGradientIn);
    for (int l = 0; l < layers && ok; ++l)
      ok = instance(kBackward);
    return ok && instance(kTail) && instance(kEpilogue);
  }
  // Whether `flat` is this layout of `layers` layers, op for op.
  bool lays_out(const FlatStep& flat, int layers) const {
    size_t at = 0;
    return flat.size() == size(layers) && each_op(layers, [&](uint32_t op) { return flat.origin[at++] == op; });
  }
};

// Whether every section's main ops hold as many sends as receives of each tag, so that the k-th
// send of a tag and its k-th receive (pair_symmetric) are always in one instance of one section.
bool messages_pair_within_sections(const RankProgram& program, const Layout& layout) {
  for (size_t k = 0; k < kSections; ++k) {
    std::unordered_map<int32_t, int> balance;
    for (size_t j = 0; j < layout.count[k]; ++j) {
      const Op& op = program.ops[layout.begin[k] + j];
      if (is_message(op)) balance[op.tag] += op.kind == OpKind::Send ? 1 : -1;
    }
    if (std::any_of(balance.begin(), balance.end(), [](const auto& b) { return b.second != 0; })) return false;
  }
  return true;
}

// What each op of a flat step waits for before it starts, as a lone column's timeline runs it: its
// stream predecessor and its dependencies, and for a message end those of its other end (the k-th
// send of a tag meets the k-th receive of it).
struct Waits {
  std::vector<uint32_t> begin;  // by op, and one past the last: its slice of `ops`
  std::vector<int32_t> ops;
};

Waits waits_of(const RankProgram& program, const FlatStep& flat) {
  const size_t n = flat.size();
  std::vector<int32_t> stream_previous(n, -1), partner(n, -1);
  std::array<int32_t, kNumStreams> last;
  last.fill(-1);
  std::unordered_map<int32_t, std::array<std::vector<int32_t>, 2>> ends;  // by tag: sends, receives
  for (size_t i = 0; i < n; ++i) {
    const Op& op = program.ops[flat.origin[i]];
    stream_previous[i] = std::exchange(last[size_t(op.stream)], int32_t(i));
    if (is_message(op)) ends[op.tag][op.kind == OpKind::Send ? 0 : 1].push_back(int32_t(i));
  }
  for (const auto& [tag, sides] : ends)
    for (size_t k = 0; k < std::min(sides[0].size(), sides[1].size()); ++k) {
      partner[size_t(sides[0][k])] = sides[1][k];
      partner[size_t(sides[1][k])] = sides[0][k];
    }
  Waits w;
  w.begin.reserve(n + 1);
  w.begin.push_back(0);
  auto own = [&](size_t i, size_t self) {
    if (stream_previous[i] >= 0 && size_t(stream_previous[i]) != self) w.ops.push_back(stream_previous[i]);
    for (uint32_t d = flat.dep_begin[i]; d < flat.dep_begin[i + 1]; ++d)
      if (size_t(flat.deps[d]) != self) w.ops.push_back(flat.deps[d]);
  };
  for (size_t i = 0; i < n; ++i) {
    own(i, i);
    if (partner[i] >= 0) own(size_t(partner[i]), i);
    w.begin.push_back(uint32_t(w.ops.size()));
  }
  return w;
}

// The step unrolled to some layers and its timeline, timed alone.
struct LayerRun {
  std::shared_ptr<const FlatStep> flat;
  std::unique_ptr<TimelineShape> shape;

  LayerRun(const StepTemplate& step, int layers) : flat(std::make_shared<const FlatStep>(unroll_flat(step, layers))) {
    shape = std::make_unique<TimelineShape>(std::vector<ProgramView>{ProgramView(step.program, *flat)},
                                            PairMode::Symmetric, nullptr);
  }
  // Every op's end; none when a meeting is called off.
  std::optional<std::vector<double>> ends(const std::vector<double>& once) const {
    TimelineShape::RunOptions options;
    options.by_template_op = true;
    size_t called_off = 0;
    options.called_off = &called_off;
    options.ends_of = [](const std::vector<RankTiming>&) { return size_t(0); };
    std::vector<std::vector<double>> ends;
    shape->run({once}, &ends, options);
    if (called_off > 0) return std::nullopt;
    return std::move(ends[0]);
  }
};

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// The K-layer run, what its ops wait for, and how the L-layer step moves each op against it.
// Every op ends `shift[op]` later per layer added to both the forward and the backward (by
// position from the end for what follows the forward), or, in a regime, each layer `rate[op]`
// after the one before.
class Composer {
 public:
  Composer(const Layout& layout, int K, const std::vector<double>& ends, const std::vector<double>& more_ends,
           const Waits& waits, const std::vector<uint32_t>& origin, const std::vector<double>& once)
      : layout_(layout),
        K_(K),
        e_(ends),
        e1_(more_ends),
        once_(once),
        waits_(waits),
        origin_(origin),
        shift_(e_.size(), kUnknown),
        rate_(e_.size(), kUnknown) {
    tolerance_ = 1e-10 * std::max(1e-3, *std::max_element(e1_.begin(), e1_.end()));
  }

  bool regimes() {
    if (!forward_regime()) return false;
    for (size_t i = 0; i < layout_.count[kPrologue]; ++i)
      shift_[i] = 0;
    // The head, and then every backward run whose forward layer is in the regime, move by what
    // adding a layer moved them (`junction`); the backward's regime starts at one of those.
    if (!observe(layout_.head(K_), layout_.head(K_ + 1), layout_.head_ops())) return false;
    const int last = std::min(K_ - 2, K_ - 1 - (steady_forward_ - 1));
    for (int m = 0; m <= last; ++m) {
      if (!observe(layout_.backward(K_, m), layout_.backward(K_ + 1, m), layout_.backward_ops())) return false;
      if (m >= 1 && backward_regime(m)) {
        steady_backward_ = m;
        break;
      }
    }
    if (steady_backward_ < 0) return false;
    // The last backward layer (the tail's) moves by its regime's start plus one rate per layer.
    const size_t b0 = layout_.backward(K_, K_ - 1), at = layout_.backward(K_, steady_backward_);
    for (size_t j = 0; j < layout_.backward_ops(); ++j)
      shift_[b0 + j] = shift_[at + j] + rate_[at + j];
    return observe(layout_.tail(K_), layout_.tail(K_ + 1), layout_.tail_ops()) && junctions_hold();
  }

  // Every op's end with L layers.
  std::vector<double> compose(int L) const {
    std::vector<double> ends(layout_.size(L));
    const double added = double(L - K_);
    std::copy(e_.begin(), e_.begin() + std::ptrdiff_t(layout_.forward(K_)), ends.begin());
    const size_t f = layout_.forward_ops(), b = layout_.backward_ops(), last = layout_.forward(K_ - 1);
    for (int l = K_; l < L; ++l)
      for (size_t j = 0; j < f; ++j)
        ends[layout_.forward(l) + j] = e_[last + j] + double(l - K_ + 1) * rate_[last + j];
    auto moved = [&](size_t from, size_t to, size_t n) {
      for (size_t j = 0; j < n; ++j)
        ends[to + j] = e_[from + j] + added * shift_[from + j];
    };
    moved(layout_.head(K_), layout_.head(L), layout_.head_ops());
    for (int m = 0; m <= steady_backward_; ++m)
      moved(layout_.backward(K_, m), layout_.backward(L, m), b);
    const size_t at = layout_.backward(K_, steady_backward_);
    for (int m = steady_backward_ + 1; m < L; ++m)
      for (size_t j = 0; j < b; ++j)
        ends[layout_.backward(L, m) + j] =
            e_[at + j] + added * shift_[at + j] + double(m - steady_backward_) * rate_[at + j];
    moved(layout_.tail(K_), layout_.tail(L), layout_.tail_ops());
    return ends;
  }

  // Whether composing K + 1 layers gives the K + 1-layer run, op for op.
  bool composes_the_longer_run() const {
    const std::vector<double> ends = compose(K_ + 1);
    for (size_t i = 0; i < ends.size(); ++i)
      if (!(std::abs(ends[i] - e1_[i]) <= tolerance_)) return false;
    return true;
  }

 private:
  bool near(double a, double b) const { return std::abs(a - b) <= tolerance_; }
  double start(size_t op) const { return e_[op] - once_[origin_[op]]; }

  // A regime of layers from `at` (a forward layer, or a backward run) on, whose ops each end
  // `rate` after their copy in the layer before (`previous`). It holds for good when no op waits
  // for a regime op of a higher rate than its own, and some op of its own rate that ends when it
  // starts is what it waits for last: then every later layer runs `rate` after the one before
  // (what does not repeat only ends earlier from layer to layer, or stays). Ops are regime ops
  // between [regime_begin, regime_end). `moved`: the two layers were observed to move by what
  // adding a layer moved them, which must then be alike (and the op waited for last must move
  // as the op does), so that the regime holds in the longer step too.
  bool regime(size_t previous, size_t at, size_t n, size_t regime_begin, size_t regime_end, bool moved) {
    for (size_t j = 0; j < n; ++j) {
      rate_[previous + j] = rate_[at + j] = e_[at + j] - e_[previous + j];
      if (!(rate_[at + j] >= -tolerance_)) return false;
      if (moved && !near(shift_[previous + j], shift_[at + j])) return false;
    }
    for (size_t j = 0; j < n; ++j) {
      const size_t o = at + j;
      bool met = false;
      for (uint32_t w = waits_.begin[o]; w < waits_.begin[o + 1]; ++w) {
        const auto p = size_t(waits_.ops[w]);
        if (p < regime_begin || p >= regime_end) continue;  // ends no later from layer to layer
        if (p < previous || p >= at + n) return false;      // waits past the layer before
        if (rate_[p] > rate_[o] + tolerance_) return false;
        met = met || (near(e_[p], start(o)) && near(rate_[p], rate_[o]) && (!moved || near(shift_[p], shift_[o])));
      }
      if (!met) return false;
    }
    return true;
  }

  // The forward's regime: the first layer from which it holds, given that some does by the last
  // layer but one. Layers from the one before it on move by their rate per added layer.
  bool forward_regime() {
    const size_t f = layout_.forward_ops();
    for (int l = 1; l + 1 < K_; ++l) {
      if (!regime(layout_.forward(l - 1), layout_.forward(l), f, layout_.forward(0), layout_.forward(K_), false))
        continue;
      // The later layers' rates: each is the regime's (the run shows it, the rule proves it).
      for (int m = l + 1; m < K_; ++m)
        for (size_t j = 0; j < f; ++j) {
          rate_[layout_.forward(m) + j] = e_[layout_.forward(m) + j] - e_[layout_.forward(m - 1) + j];
          if (!near(rate_[layout_.forward(m) + j], rate_[layout_.forward(l) + j])) return false;
        }
      steady_forward_ = l;
      for (int m = l - 1; m < K_; ++m)
        for (size_t j = 0; j < f; ++j)
          shift_[layout_.forward(m) + j] = rate_[layout_.forward(l) + j];
      return true;
    }
    return false;
  }

  // The backward's regime from run m on; its ops before run m were observed.
  bool backward_regime(int m) {
    const size_t b = layout_.backward_ops();
    const size_t begin = layout_.backward(K_, 0), end = layout_.backward(K_, K_);
    if (!regime(layout_.backward(K_, m - 1), layout_.backward(K_, m), b, begin, end, true)) return false;
    for (int r = m + 1; r < K_; ++r)
      for (size_t j = 0; j < b; ++j) {
        const double rate = e_[layout_.backward(K_, r) + j] - e_[layout_.backward(K_, r - 1) + j];
        if (!near(rate, rate_[layout_.backward(K_, m) + j])) return false;
      }
    return true;
  }

  // Ops [at, at + n) of the K-layer run move by what they moved by in the K + 1-layer run (ops
  // [at1, at1 + n)).
  bool observe(size_t at, size_t at1, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      shift_[at + j] = e1_[at1 + j] - e_[at + j];
      if (!(shift_[at + j] >= -tolerance_)) return false;
      junctions_.push_back(at + j);
    }
    return true;
  }

  // Each op observed moves, per layer added, by at least what any op it waits for moves: then the
  // op it waits for last in the K + 1-layer run moves by as much as it does, and keeps being the
  // one it waits for last however many layers are added (the others fall behind or keep pace).
  bool junctions_hold() const {
    for (const size_t o : junctions_)
      for (uint32_t w = waits_.begin[o]; w < waits_.begin[o + 1]; ++w) {
        const double moved = shift_[size_t(waits_.ops[w])];
        if (!(moved <= shift_[o] + tolerance_)) return false;  // also when it is not known
      }
    return true;
  }

  const Layout& layout_;
  int K_;
  const std::vector<double>&e_, &e1_;
  const std::vector<double>& once_;
  const Waits& waits_;
  const std::vector<uint32_t>& origin_;  // by op of the K-layer run: its template op
  std::vector<double> shift_, rate_;
  std::vector<size_t> junctions_;
  double tolerance_ = 0;
  int steady_forward_ = -1, steady_backward_ = -1;
};

}  // namespace

// Runs of K and K + 1 layers, made when first needed.
struct Attempt {
  int K = 0;
  std::unique_ptr<LayerRun> run, more;
  Waits waits;  // of the K-layer run
};

struct LayerComposer::Impl {
  const StepTemplate& step;
  Layout layout;
  std::vector<Attempt> attempts;  // K, then 2K where the layers allow

  // The attempt's runs, made the first time; false when they are not the layout.
  bool ready(Attempt& a) const {
    if (a.run) return true;
    a.run = std::make_unique<LayerRun>(step, a.K);
    a.more = std::make_unique<LayerRun>(step, a.K + 1);
    if (!layout.lays_out(*a.run->flat, a.K) || !layout.lays_out(*a.more->flat, a.K + 1)) return false;
    a.waits = waits_of(step.program, *a.run->flat);
    return true;
  }
  std::optional<std::vector<double>> compose(Attempt& a, const std::vector<double>& once) const {
    if (!ready(a)) return std::nullopt;
    const std::optional<std::vector<double>> ends = a.run->ends(once);
    if (!ends) return std::nullopt;
    const std::optional<std::vector<double>> more_ends = a.more->ends(once);
    if (!more_ends) return std::nullopt;
    Composer composer(layout, a.K, *ends, *more_ends, a.waits, a.run->flat->origin, once);
    if (!composer.regimes() || !composer.composes_the_longer_run()) return std::nullopt;
    return composer.compose(step.layers);
  }
};

LayerComposer::LayerComposer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerComposer::~LayerComposer() = default;

std::unique_ptr<LayerComposer> LayerComposer::prepare(const StepTemplate& step, const FlatStep* full,
                                                      int timed_layers) {
  const int K = timed_layers, L = step.layers;
  if (K < 4 || L < K + 2 || step.microbatches != 1 || step.chunks != 1 || step.stages != 1) return nullptr;
  Layout layout(step);
  if (layout.forward_ops() == 0 || layout.backward_ops() == 0 || (full && !layout.lays_out(*full, L)) ||
      !messages_pair_within_sections(step.program, layout))
    return nullptr;
  auto impl = std::unique_ptr<Impl>(new Impl{step, layout, {}});
  impl->attempts.emplace_back().K = K;
  if (L >= 2 * K + 2) impl->attempts.emplace_back().K = 2 * K;
  return std::unique_ptr<LayerComposer>(new LayerComposer(std::move(impl)));
}

std::optional<ComposedColumn> LayerComposer::compose(const std::vector<double>& once, const LoneBounds& bounds) {
  std::optional<ComposedColumn> out;
  for (Attempt& a : impl_->attempts)
    if (std::optional<std::vector<double>> ends = impl_->compose(a, once)) {
      out.emplace();
      out->ends = std::move(*ends);
      break;
    }
  if (!out) return std::nullopt;
  out->timing.compute_forward_s = bounds.compute_forward_s;
  out->timing.compute_backward_s = bounds.compute_backward_s;
  const std::vector<Op>& ops = impl_->step.program.ops;
  size_t i = 0;
  impl_->layout.each_op(impl_->step.layers, [&](uint32_t op) {
    const double end = out->ends[i++];
    if (ops[op].phase == Phase::Forward) out->timing.forward_end_s = std::max(out->timing.forward_end_s, end);
    out->timing.end_s = std::max(out->timing.end_s, end);
    return true;
  });
  return out;
}

std::optional<LoneBounds> LayerComposer::bounds(const std::vector<double>& once) {
  Attempt& a = impl_->attempts.front();
  if (!impl_->ready(a)) return std::nullopt;
  // Whether the forward runs first is a matter of the sections, which the few layers have alike.
  const std::optional<LoneBounds> few = lone_bounds(ProgramView(impl_->step.program, *a.run->flat), once);
  if (!few) return std::nullopt;
  LoneBounds b;
  double forward_s = 0;
  const std::vector<Op>& ops = impl_->step.program.ops;
  impl_->layout.each_op(impl_->step.layers, [&](uint32_t op) {
    const double seconds = once[op];
    const bool forward = ops[op].phase == Phase::Forward;
    b.end_s += seconds;
    if (ops[op].stream == Stream::Compute) (forward ? b.compute_forward_s : b.compute_backward_s) += seconds;
    if (forward) forward_s += seconds;
    return true;
  });
  b.forward_end_s = few->forward_end_s < few->end_s ? forward_s : b.end_s;
  return b;
}

std::vector<uint32_t> LayerComposer::copies() const {
  std::vector<uint32_t> copies(impl_->step.program.ops.size(), 0);
  impl_->layout.each_op(impl_->step.layers, [&](uint32_t op) {
    ++copies[op];
    return true;
  });
  return copies;
}

std::shared_ptr<const FlatStep> LayerComposer::few_layers() const {
  return impl_->attempts.front().run ? impl_->attempts.front().run->flat : nullptr;
}

std::optional<ComposedColumn> compose_layers(const StepTemplate& step, const FlatStep& full,
                                             const std::vector<double>& once, const LoneBounds& bounds,
                                             int timed_layers) {
  const std::unique_ptr<LayerComposer> composer = LayerComposer::prepare(step, &full, timed_layers);
  if (!composer) return std::nullopt;
  return composer->compose(once, bounds);
}

}  // namespace wallfacer::detail
