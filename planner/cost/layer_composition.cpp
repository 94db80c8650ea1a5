// A sampled column's whole step timed from a few of its layers (layer_composition.hpp).
#include "layer_composition.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "step_parts.hpp"

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
    return each_op_in(layers, [&](uint32_t op, Section) { return visit(op); });
  }
  // The same with the section of each op: `visit(template op, section)`.
  template <typename Visit>
  bool each_op_in(int layers, Visit&& visit) const {
    auto instance = [&](Section k) {
      for (size_t j = 0; j < count[k]; ++j)
        if (!visit(begin[k] + uint32_t(j), k)) return false;
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
// Pipeline stage messages meet their real other end, on another stage: none may sit in a layer.
bool messages_pair_within_sections(const RankProgram& program, const Layout& layout) {
  for (size_t k = 0; k < kSections; ++k) {
    std::unordered_map<int32_t, int> balance;
    for (size_t j = 0; j < layout.count[k]; ++j) {
      const Op& op = program.ops[layout.begin[k] + j];
      if (!is_message(op)) continue;
      if (is_stage_message(op)) {
        if (k == kForward || k == kBackward) return false;
        continue;
      }
      balance[op.tag] += op.kind == OpKind::Send ? 1 : -1;
    }
    if (std::any_of(balance.begin(), balance.end(), [](const auto& b) { return b.second != 0; })) return false;
  }
  return true;
}

// A program of the column: its template and layout, and where its ops begin in the runs of K and
// of K + 1 layers, which time the column's programs one after another.
struct Member {
  const StepTemplate* step;
  Layout layout;
  size_t at = 0, at1 = 0;
};

// What each op of the column's runs waits for before it starts, as a sampled column's timeline
// runs it: its stream predecessor and its dependencies, and for a message end those of its other
// end (the k-th send of a tag meets the k-th receive of it on the same program; a pipeline stage
// message meets its real other end, the k-th of the same source, destination and tag). Ops are
// numbered through the programs one after another.
struct Waits {
  std::vector<uint32_t> begin;  // by op, and one past the last: its slice of `ops`
  std::vector<int32_t> ops;
};

Waits waits_of(const std::vector<Member>& members, const std::vector<const FlatStep*>& flats) {
  size_t n = 0;
  for (const FlatStep* flat : flats)
    n += flat->size();
  std::vector<int32_t> stream_previous(n, -1), partner(n, -1);
  std::map<std::array<int32_t, 3>, std::array<std::vector<int32_t>, 2>> stage_ends;  // sends, receives
  auto pair_up = [&](const std::array<std::vector<int32_t>, 2>& sides) {
    for (size_t k = 0; k < std::min(sides[0].size(), sides[1].size()); ++k) {
      partner[size_t(sides[0][k])] = sides[1][k];
      partner[size_t(sides[1][k])] = sides[0][k];
    }
  };
  for (size_t m = 0; m < members.size(); ++m) {
    const RankProgram& program = members[m].step->program;
    const FlatStep& flat = *flats[m];
    std::array<int32_t, kNumStreams> last;
    last.fill(-1);
    std::unordered_map<int32_t, std::array<std::vector<int32_t>, 2>> ends;  // by tag: sends, receives
    for (size_t i = 0; i < flat.size(); ++i) {
      const Op& op = program.ops[flat.origin[i]];
      const auto at = int32_t(members[m].at + i);
      stream_previous[size_t(at)] = std::exchange(last[size_t(op.stream)], at);
      if (!is_message(op)) continue;
      const int side = op.kind == OpKind::Send ? 0 : 1;
      if (is_stage_message(op))
        stage_ends[side == 0 ? std::array{program.rank, op.peer, op.tag} : std::array{op.peer, program.rank, op.tag}]
                  [size_t(side)]
                      .push_back(at);
      else
        ends[op.tag][size_t(side)].push_back(at);
    }
    for (const auto& [tag, sides] : ends)
      pair_up(sides);
  }
  for (const auto& [key, sides] : stage_ends)
    pair_up(sides);
  Waits w;
  w.begin.reserve(n + 1);
  w.begin.push_back(0);
  auto own = [&](size_t i, size_t self) {
    if (stream_previous[i] >= 0 && size_t(stream_previous[i]) != self) w.ops.push_back(stream_previous[i]);
    size_t m = 0;
    while (m + 1 < members.size() && members[m + 1].at <= i)
      ++m;
    const FlatStep& flat = *flats[m];
    const size_t local = i - members[m].at;
    for (uint32_t d = flat.dep_begin[local]; d < flat.dep_begin[local + 1]; ++d) {
      const size_t dep = members[m].at + size_t(flat.deps[d]);
      if (dep != self) w.ops.push_back(int32_t(dep));
    }
  };
  for (size_t i = 0; i < n; ++i) {
    own(i, i);
    if (partner[i] >= 0) own(size_t(partner[i]), i);
    w.begin.push_back(uint32_t(w.ops.size()));
  }
  return w;
}

// The column unrolled to some layers and its timeline, its programs timed together; its ends run
// through the programs one after another.
struct LayerRun {
  std::vector<std::shared_ptr<const FlatStep>> flats;  // by program
  std::unique_ptr<TimelineShape> shape;

  LayerRun(const std::vector<Member>& members, int layers) {
    std::vector<ProgramView> views;
    for (const Member& m : members) {
      flats.push_back(std::make_shared<const FlatStep>(unroll_flat(*m.step, layers)));
      views.emplace_back(m.step->program, *flats.back());
    }
    shape = std::make_unique<TimelineShape>(std::move(views), PairMode::Symmetric, nullptr);
  }
  // Every op's end; none when a meeting is called off.
  std::optional<std::vector<double>> ends(const std::vector<const std::vector<double>*>& once) const {
    TimelineShape::RunOptions options;
    options.by_template_op = true;
    size_t called_off = 0;
    options.called_off = &called_off;
    std::vector<std::vector<double>> durations;
    for (const std::vector<double>* seconds : once)
      durations.push_back(*seconds);
    std::vector<std::vector<double>> ends;
    shape->run(durations, &ends, options);
    if (called_off > 0) return std::nullopt;
    if (ends.size() == 1) return std::move(ends[0]);
    std::vector<double> all;
    for (const std::vector<double>& program : ends)
      all.insert(all.end(), program.begin(), program.end());
    return all;
  }
};

constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// The K-layer run, what its ops wait for, and how the L-layer step moves each op against it.
// Every op ends `shift[op]` later per layer added to every forward and backward (by position from
// the start of its section), or, in a regime, each layer `rate[op]` after the one before. What an
// op of another section waits for is a layer's copy counted from the end of its section (the
// backward's m-th runs after the forward's m-th from the end; the head follows the last): those
// move by `shift_from_end[op]` per layer added.
class Composer {
 public:
  Composer(const std::vector<Member>& members, int K, const std::vector<double>& ends,
           const std::vector<double>& more_ends, const Waits& waits, std::vector<double> seconds,
           const std::vector<uint8_t>& section)
      : members_(members),
        K_(K),
        e_(ends),
        e1_(more_ends),
        seconds_(std::move(seconds)),
        section_(section),
        waits_(waits),
        shift_(e_.size(), kUnknown),
        shift_from_end_(e_.size(), kUnknown),
        rate_(e_.size(), kUnknown),
        steady_(members.size()) {
    tolerance_ = 1e-10 * std::max(1e-3, *std::max_element(e1_.begin(), e1_.end()));
  }

  bool regimes() {
    for (size_t m = 0; m < members_.size(); ++m)
      if (!member_regimes(m)) return false;
    return junctions_hold();
  }

  // Every op's end with L layers, by program.
  std::vector<std::vector<double>> compose(int L) const {
    std::vector<std::vector<double>> ends;
    for (size_t m = 0; m < members_.size(); ++m)
      ends.push_back(compose_member(m, L));
    return ends;
  }

  // Whether composing K + 1 layers gives the K + 1-layer run, op for op.
  bool composes_the_longer_run() const {
    for (size_t m = 0; m < members_.size(); ++m) {
      const std::vector<double> ends = compose_member(m, K_ + 1);
      for (size_t i = 0; i < ends.size(); ++i)
        if (!(std::abs(ends[i] - e1_[members_[m].at1 + i]) <= tolerance_)) return false;
    }
    return true;
  }

 private:
  // Where a program's layers settle: its forward's first regime layer (a moved forward's first
  // regime copy, observed before), its backward's first regime run.
  struct Steady {
    bool moved = false;  // its prologue moves when layers are added (a later pipeline stage's)
    int forward = -1, backward = -1;
  };

  bool near(double a, double b) const { return std::abs(a - b) <= tolerance_; }
  double start(size_t op) const { return e_[op] - seconds_[op]; }

  bool member_regimes(size_t m) {
    const Member& p = members_[m];
    const Layout& layout = p.layout;
    Steady& steady = steady_[m];
    if (!observe(p.at, p.at1, layout.count[kPrologue])) return false;
    for (size_t i = 0; i < layout.count[kPrologue]; ++i)
      steady.moved = steady.moved || shift_[p.at + i] > tolerance_;
    if (!forward_regime(m, steady.moved)) return false;
    // The head, and then every backward run whose forward layer is in the regime, move by what
    // adding a layer moved them; the backward's regime starts at one of those.
    if (!observe(p.at + layout.head(K_), p.at1 + layout.head(K_ + 1), layout.head_ops())) return false;
    const int last = std::min(K_ - 2, K_ - 1 - (steady.forward - 1));
    for (int r = 0; r <= last; ++r) {
      if (!observe(p.at + layout.backward(K_, r), p.at1 + layout.backward(K_ + 1, r), layout.backward_ops()))
        return false;
      if (r >= 1 && backward_regime(m, r)) {
        steady.backward = r;
        break;
      }
    }
    if (steady.backward < 0) return false;
    // The runs from the one before the regime on, counted from the end (the tail waits for the
    // last), move by the regime's start's shift plus one rate per layer.
    moved_from_end(p.at + layout.backward(K_, 0), p.at + layout.backward(K_, steady.backward - 1),
                   p.at + layout.backward(K_, steady.backward), p.at + layout.backward(K_, K_), layout.backward_ops(),
                   true);
    return observe(p.at + layout.tail(K_), p.at1 + layout.tail(K_ + 1), layout.tail_ops());
  }

  // Every op's end with L layers, of program m.
  std::vector<double> compose_member(size_t m, int L) const {
    const Member& p = members_[m];
    const Layout& layout = p.layout;
    const Steady& steady = steady_[m];
    std::vector<double> ends(layout.size(L));
    const double added = double(L - K_);
    const size_t f = layout.forward_ops(), b = layout.backward_ops();
    auto moved = [&](size_t from, size_t to, size_t n) {
      for (size_t j = 0; j < n; ++j)
        ends[to + j] = e_[p.at + from + j] + added * shift_[p.at + from + j];
    };
    if (steady.moved) {  // the prologue and the forward's first layers moved, the later ones in the regime
      moved(0, 0, layout.count[kPrologue]);
      for (int l = 0; l <= steady.forward; ++l)
        moved(layout.forward(l), layout.forward(l), f);
      const size_t at = p.at + layout.forward(steady.forward);
      for (int l = steady.forward + 1; l < L; ++l)
        for (size_t j = 0; j < f; ++j)
          ends[layout.forward(l) + j] =
              e_[at + j] + added * shift_[at + j] + double(l - steady.forward) * rate_[at + j];
    } else {
      std::copy(e_.begin() + std::ptrdiff_t(p.at), e_.begin() + std::ptrdiff_t(p.at + layout.forward(K_)),
                ends.begin());
      const size_t last = p.at + layout.forward(K_ - 1);
      for (int l = K_; l < L; ++l)
        for (size_t j = 0; j < f; ++j)
          ends[layout.forward(l) + j] = e_[last + j] + double(l - K_ + 1) * rate_[last + j];
    }
    moved(layout.head(K_), layout.head(L), layout.head_ops());
    const size_t at = p.at + layout.backward(K_, steady.backward);
    for (int r = 0; r <= steady.backward; ++r)
      moved(layout.backward(K_, r), layout.backward(L, r), b);
    for (int r = steady.backward + 1; r < L; ++r)
      for (size_t j = 0; j < b; ++j)
        ends[layout.backward(L, r) + j] =
            e_[at + j] + added * shift_[at + j] + double(r - steady.backward) * rate_[at + j];
    moved(layout.tail(K_), layout.tail(L), layout.tail_ops());
    return ends;
  }

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

  // Whether the copies of layers or runs after `at` (n ops each, `count` of them from `at` on)
  // each end the regime's rate after the one before: the run shows it, the rule proves it.
  bool keeps_rate(size_t at, size_t n, int count) {
    for (int c = 1; c < count; ++c)
      for (size_t j = 0; j < n; ++j) {
        const size_t o = at + size_t(c) * n + j;
        rate_[o] = e_[o] - e_[o - n];
        if (!near(rate_[o], rate_[at + j])) return false;
      }
    return true;
  }

  // A section's copies from `first` on (n ops each, where the regime starts at `at`, one copy
  // later, and goes on to `end`), counted from the section's end, move by the regime's first copy's
  // shift (`observed`; none in a forward whose first layers do not move) plus one rate per layer
  // added. Copies before those are not known so counted: nothing of another section may wait for
  // them.
  void moved_from_end(size_t begin, size_t first, size_t at, size_t end, size_t n, bool observed) {
    std::fill(shift_from_end_.begin() + std::ptrdiff_t(begin), shift_from_end_.begin() + std::ptrdiff_t(first),
              kUnknown);
    for (size_t o = first; o < end; ++o) {
      const size_t j = (o - first) % n;
      shift_from_end_[o] = (observed ? shift_[at + j] : 0.0) + rate_[at + j];
    }
  }

  // The forward's regime: the first layer from which it holds, given that some does by the last
  // layer but one. When the prologue does not move, the first K layers are the longer run's; when
  // it moves (a later stage's, which waits for the stage before), its layers are observed to move,
  // as a backward's runs are, until the regime starts.
  bool forward_regime(size_t m, bool moved) {
    const Member& p = members_[m];
    const Layout& layout = p.layout;
    const size_t f = layout.forward_ops();
    for (int l = moved ? 0 : 1; l + 1 < K_; ++l) {
      if (moved && !observe(p.at + layout.forward(l), p.at1 + layout.forward(l), f)) return false;
      if (l == 0 || !regime(p.at + layout.forward(l - 1), p.at + layout.forward(l), f, p.at + layout.forward(0),
                            p.at + layout.forward(K_), moved))
        continue;
      if (!keeps_rate(p.at + layout.forward(l), f, K_ - l)) return false;
      steady_[m].forward = l;
      moved_from_end(p.at + layout.forward(0), p.at + layout.forward(l - 1), p.at + layout.forward(l),
                     p.at + layout.forward(K_), f, moved);
      return true;
    }
    return false;
  }

  // The backward's regime from run r on; its ops before run r were observed.
  bool backward_regime(size_t m, int r) {
    const Member& p = members_[m];
    const Layout& layout = p.layout;
    const size_t b = layout.backward_ops();
    const size_t begin = p.at + layout.backward(K_, 0), end = p.at + layout.backward(K_, K_);
    if (!regime(p.at + layout.backward(K_, r - 1), p.at + layout.backward(K_, r), b, begin, end, true)) return false;
    return keeps_rate(p.at + layout.backward(K_, r), b, K_ - r);
  }

  // Ops [at, at + n) of the K-layer run move by what they moved by in the K + 1-layer run (ops
  // [at1, at1 + n)).
  bool observe(size_t at, size_t at1, size_t n) {
    for (size_t j = 0; j < n; ++j) {
      shift_[at + j] = shift_from_end_[at + j] = e1_[at1 + j] - e_[at + j];
      if (!(shift_[at + j] >= -tolerance_)) return false;
      junctions_.push_back(at + j);
    }
    return true;
  }

  // Each op observed moves, per layer added, by at least what any op it waits for moves: then the
  // op it waits for last in the K + 1-layer run moves by as much as it does, and keeps being the
  // one it waits for last however many layers are added (the others fall behind or keep pace). An
  // op of the same layer section moves as counted from the section's start, any other as counted
  // from its end.
  bool junctions_hold() const {
    for (const size_t o : junctions_)
      for (uint32_t w = waits_.begin[o]; w < waits_.begin[o + 1]; ++w) {
        const auto p = size_t(waits_.ops[w]);
        const bool same_layers = section_[p] == section_[o] && layer_section(section_[p]);
        const double moved = same_layers ? shift_[p] : shift_from_end_[p];
        if (!(moved <= shift_[o] + tolerance_)) return false;  // also when it is not known
      }
    return true;
  }
  static bool layer_section(uint8_t section) {
    return section % kSections == kForward || section % kSections == kBackward;
  }

  const std::vector<Member>& members_;
  int K_;
  const std::vector<double>&e_, &e1_;
  std::vector<double> seconds_;          // by op of the K-layer run
  const std::vector<uint8_t>& section_;  // by op of the K-layer run: program · kSections + section
  const Waits& waits_;
  std::vector<double> shift_, shift_from_end_, rate_;
  std::vector<size_t> junctions_;
  double tolerance_ = 0;
  std::vector<Steady> steady_;  // by program
};

}  // namespace

// Runs of K and K + 1 layers, made when first needed.
struct Attempt {
  int K = 0;
  std::optional<bool> laid_out;  // once made: whether the runs are the layout
  std::vector<Member> members;   // with their places in these runs
  std::unique_ptr<LayerRun> run, more;
  Waits waits;                   // of the K-layer run
  std::vector<uint8_t> section;  // of the K-layer run: by op, program · kSections + section
};

struct LayerComposer::Impl {
  std::vector<Member> members;
  std::vector<Attempt> attempts;  // K, then 2K where the layers allow
  int layers = 0;
  std::mutex making;  // columns sharing the composer may ask for an attempt's runs at once
  std::vector<std::shared_ptr<const FlatStep>> full;  // by member, unrolled when first asked for

  // The attempt's runs, made the first time; false when they are not the layout.
  bool ready(Attempt& a) {
    const std::lock_guard lock(making);
    if (!a.laid_out) a.laid_out = make(a);
    return *a.laid_out;
  }
  // Unrolls and lays out the attempt's runs and what each op waits for; false when the runs are
  // not the layout.
  bool make(Attempt& a) {
    a.members = members;
    size_t at = 0, at1 = 0;
    for (Member& m : a.members) {
      m.at = at, m.at1 = at1;
      at += m.layout.size(a.K), at1 += m.layout.size(a.K + 1);
    }
    a.run = std::make_unique<LayerRun>(a.members, a.K);
    a.more = std::make_unique<LayerRun>(a.members, a.K + 1);
    std::vector<const FlatStep*> flats;
    for (size_t m = 0; m < a.members.size(); ++m) {
      const Layout& layout = a.members[m].layout;
      if (!layout.lays_out(*a.run->flats[m], a.K) || !layout.lays_out(*a.more->flats[m], a.K + 1)) return false;
      flats.push_back(a.run->flats[m].get());
      layout.each_op_in(a.K, [&](uint32_t, Section k) {
        a.section.push_back(uint8_t(m * kSections + k));
        return true;
      });
    }
    a.waits = waits_of(a.members, flats);
    return true;
  }
  std::optional<std::vector<std::vector<double>>> compose(Attempt& a,
                                                          const std::vector<const std::vector<double>*>& once) {
    if (!ready(a)) return std::nullopt;
    const std::optional<std::vector<double>> ends = a.run->ends(once);
    if (!ends) return std::nullopt;
    const std::optional<std::vector<double>> more_ends = a.more->ends(once);
    if (!more_ends) return std::nullopt;
    std::vector<double> seconds;
    seconds.reserve(ends->size());
    for (size_t m = 0; m < members.size(); ++m)
      for (const uint32_t op : a.run->flats[m]->origin)
        seconds.push_back((*once[m])[op]);
    Composer composer(a.members, a.K, *ends, *more_ends, a.waits, std::move(seconds), a.section);
    if (!composer.regimes() || !composer.composes_the_longer_run()) return std::nullopt;
    return composer.compose(layers);
  }
  std::optional<std::vector<std::vector<double>>> compose(const std::vector<const std::vector<double>*>& once) {
    for (Attempt& a : attempts)
      if (std::optional<std::vector<std::vector<double>>> ends = compose(a, once)) return ends;
    return std::nullopt;
  }
  // A program's timing read off its composed ends; its compute as `bounds` sums it.
  RankTiming timing(size_t m, const std::vector<double>& ends, double compute_forward_s,
                    double compute_backward_s) const {
    RankTiming t;
    t.compute_forward_s = compute_forward_s;
    t.compute_backward_s = compute_backward_s;
    const std::vector<Op>& ops = members[m].step->program.ops;
    size_t i = 0;
    members[m].layout.each_op(layers, [&](uint32_t op) {
      const double end = ends[i++];
      if (ops[op].phase == Phase::Forward) t.forward_end_s = std::max(t.forward_end_s, end);
      t.end_s = std::max(t.end_s, end);
      return true;
    });
    return t;
  }
  // Program m's compute-stream time per phase, summed over every layer in the order a run adds it.
  std::pair<double, double> compute(size_t m, const std::vector<double>& once) const {
    double forward = 0, backward = 0;
    const std::vector<Op>& ops = members[m].step->program.ops;
    members[m].layout.each_op(layers, [&](uint32_t op) {
      if (ops[op].stream == Stream::Compute) (ops[op].phase == Phase::Forward ? forward : backward) += once[op];
      return true;
    });
    return {forward, backward};
  }
};

LayerComposer::LayerComposer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerComposer::~LayerComposer() = default;

namespace {

// The composer of `column` (one template, or a pipeline column's), none when its layers cannot be
// composed from K (see prepare).
std::unique_ptr<LayerComposer::Impl> composer_of(const std::vector<const StepTemplate*>& column, int K) {
  if (column.empty() || K < 4) return nullptr;
  const int L = column.front()->layers;
  auto impl = std::make_unique<LayerComposer::Impl>();
  impl->layers = L;
  for (const StepTemplate* step : column) {
    if (step->layers != L || L < K + 2 || step->microbatches != 1 || step->chunks != 1) return nullptr;
    Layout layout(*step);
    if (layout.forward_ops() == 0 || layout.backward_ops() == 0 ||
        !messages_pair_within_sections(step->program, layout))
      return nullptr;
    impl->members.push_back(Member{step, layout});
  }
  impl->attempts.emplace_back().K = K;
  if (L >= 2 * K + 2) impl->attempts.emplace_back().K = 2 * K;
  return impl;
}

}  // namespace

std::unique_ptr<LayerComposer> LayerComposer::prepare(const StepTemplate& step, const FlatStep* full,
                                                      int timed_layers) {
  if (step.stages != 1) return nullptr;
  std::unique_ptr<Impl> impl = composer_of({&step}, timed_layers);
  if (!impl || (full && !impl->members.front().layout.lays_out(*full, step.layers))) return nullptr;
  return std::unique_ptr<LayerComposer>(new LayerComposer(std::move(impl)));
}

std::unique_ptr<LayerComposer> LayerComposer::prepare(const std::vector<const StepTemplate*>& column,
                                                      int timed_layers) {
  if (column.size() == 1) return prepare(*column.front(), nullptr, timed_layers);
  std::unique_ptr<Impl> impl = composer_of(column, timed_layers);
  if (!impl) return nullptr;
  return std::unique_ptr<LayerComposer>(new LayerComposer(std::move(impl)));
}

std::optional<ComposedColumn> LayerComposer::compose(const std::vector<double>& once, const LoneBounds& bounds) {
  std::optional<std::vector<std::vector<double>>> ends = impl_->compose({&once});
  if (!ends) return std::nullopt;
  ComposedColumn out;
  out.timing = impl_->timing(0, ends->front(), bounds.compute_forward_s, bounds.compute_backward_s);
  out.ends = std::move(ends->front());
  return out;
}

std::optional<std::vector<ComposedColumn>> LayerComposer::compose(const std::vector<const std::vector<double>*>& once) {
  std::optional<std::vector<std::vector<double>>> ends = impl_->compose(once);
  if (!ends) return std::nullopt;
  std::vector<ComposedColumn> out(ends->size());
  for (size_t m = 0; m < out.size(); ++m) {
    const auto [forward, backward] = impl_->compute(m, *once[m]);
    out[m].timing = impl_->timing(m, (*ends)[m], forward, backward);
    out[m].ends = std::move((*ends)[m]);
  }
  return out;
}

std::optional<LoneBounds> LayerComposer::bounds(const std::vector<double>& once) {
  Attempt& a = impl_->attempts.front();
  if (!impl_->ready(a)) return std::nullopt;
  const Member& member = impl_->members.front();
  // Whether the forward runs first is a matter of the sections, which the few layers have alike.
  const std::optional<LoneBounds> few = lone_bounds(ProgramView(member.step->program, *a.run->flats.front()), once);
  if (!few) return std::nullopt;
  LoneBounds b;
  double forward_s = 0;
  const std::vector<Op>& ops = member.step->program.ops;
  member.layout.each_op(impl_->layers, [&](uint32_t op) {
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

std::vector<uint32_t> LayerComposer::copies(size_t program) const {
  const Member& member = impl_->members.at(program);
  std::vector<uint32_t> copies(member.step->program.ops.size(), 0);
  member.layout.each_op(impl_->layers, [&](uint32_t op) {
    ++copies[op];
    return true;
  });
  return copies;
}

std::shared_ptr<const FlatStep> LayerComposer::full_order(size_t program) const {
  const std::lock_guard lock(impl_->making);
  if (impl_->full.empty()) impl_->full.resize(impl_->members.size());
  std::shared_ptr<const FlatStep>& full = impl_->full.at(program);
  if (!full) full = std::make_shared<const FlatStep>(unroll_flat(*impl_->members[program].step));
  return full;
}

std::shared_ptr<const FlatStep> LayerComposer::few_layers() const {
  const Attempt& a = impl_->attempts.front();
  return a.laid_out.value_or(false) ? a.run->flats.front() : nullptr;
}

namespace {

// The place in the column of the program of `rank`, or -1.
int place_of(const std::vector<int>& ranks, int rank) {
  const auto at = std::find(ranks.begin(), ranks.end(), rank);
  return at == ranks.end() ? -1 : int(at - ranks.begin());
}

// Whether the ops of `a` (in a column of `a_ranks`) and of `b` (in `b_ranks`), of one unrolled
// order, are alike in all a sampled column's timeline and the composition read of them.
bool ops_alike(const RankProgram& a, const std::vector<int>& a_ranks, const RankProgram& b,
               const std::vector<int>& b_ranks) {
  std::unordered_map<int32_t, int32_t> group_to, group_from;  // a's collective groups <-> b's
  auto group = [](const RankProgram& p, const Op& op) {
    return is_collective_stream(op.stream) && op.coll >= 0 ? p.collectives[size_t(op.coll)].group : -1;
  };
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op &x = a.ops[i], &y = b.ops[i];
    if (x.stream != y.stream || x.phase != y.phase || x.kind != y.kind) return false;
    const int32_t gx = group(a, x), gy = group(b, y);
    if ((gx < 0) != (gy < 0)) return false;
    if (gx >= 0 &&
        (group_to.try_emplace(gx, gy).first->second != gy || group_from.try_emplace(gy, gx).first->second != gx))
      return false;
    if (!is_message(x)) continue;
    if (x.tag != y.tag || is_stage_message(x) != is_stage_message(y)) return false;
    if (is_stage_message(x) && place_of(a_ranks, x.peer) != place_of(b_ranks, y.peer)) return false;
  }
  return true;
}

}  // namespace

bool LayerComposer::serves(const std::vector<const StepTemplate*>& column) const {
  const std::vector<Member>& members = impl_->members;
  if (column.size() != members.size()) return false;
  std::vector<int> own, other;
  for (size_t m = 0; m < column.size(); ++m) {
    own.push_back(members[m].step->program.rank);
    other.push_back(column[m]->program.rank);
  }
  for (size_t m = 0; m < column.size(); ++m) {
    const StepTemplate &a = *members[m].step, &b = *column[m];
    if (&a != &b && !(same_unrolled_order(a, b) && ops_alike(a.program, own, b.program, other))) return false;
  }
  return true;
}

std::optional<ComposedColumn> compose_layers(const StepTemplate& step, const FlatStep& full,
                                             const std::vector<double>& once, const LoneBounds& bounds,
                                             int timed_layers) {
  const std::unique_ptr<LayerComposer> composer = LayerComposer::prepare(step, &full, timed_layers);
  if (!composer) return std::nullopt;
  return composer->compose(once, bounds);
}

std::optional<ComposedColumn> compose_slowed(LayerComposer& composer, const ProgramView& full,
                                             const std::vector<double>& once, const ComposedColumn& composed,
                                             double kept, std::vector<double>& slowed) {
  double added = 0;
  slowed = lengthened(full, once, true, composed.ends, kept, &added);
  const std::optional<LoneBounds> bounds = composer.bounds(slowed);
  if (!bounds) return std::nullopt;
  std::optional<ComposedColumn> again = composer.compose(slowed, *bounds);
  if (again) again->timing.slowdown_s = added;
  return again;
}

std::optional<std::vector<ComposedColumn>> compose_slowed(LayerComposer& composer, const std::vector<ProgramView>& full,
                                                          const std::vector<const std::vector<double>*>& once,
                                                          const std::vector<ComposedColumn>& composed, double kept,
                                                          std::vector<std::vector<double>>& slowed) {
  slowed.assign(full.size(), {});
  std::vector<const std::vector<double>*> seconds;
  std::vector<double> added(full.size(), 0.0);
  for (size_t k = 0; k < full.size(); ++k) {
    slowed[k] = lengthened(full[k], *once[k], true, composed[k].ends, kept, &added[k]);
    seconds.push_back(&slowed[k]);
  }
  std::optional<std::vector<ComposedColumn>> again = composer.compose(seconds);
  for (size_t k = 0; again && k < full.size(); ++k)
    (*again)[k].timing.slowdown_s = added[k];
  return again;
}

}  // namespace wallfacer::detail
