// Unrolling a step template into a flat program of n layers (step.hpp), and the model FLOPs of a
// step (docs/step.md).
#include <wallfacer/schedule/step.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include "pipeline_parallel.hpp"

namespace wallfacer {
namespace {

enum class Section { Prologue, Forward, Head, GradientIn, Backward, Tail, Epilogue };
constexpr int kSections = 7;

Section section_of(const StepSections& s, uint32_t op) {
  if (op < s.prologue_end) return Section::Prologue;
  if (op < s.forward_end) return Section::Forward;
  if (op < s.head_end) return Section::Head;
  if (op < s.gradient_in_end) return Section::GradientIn;
  if (op < s.backward_end) return Section::Backward;
  if (op < s.tail_end) return Section::Tail;
  return Section::Epilogue;
}

bool is_layer(Section s) {
  return s == Section::Forward || s == Section::Backward;
}

// Where the chunk-dependent variant of a section begins (its end when it has none): chunks after
// the rank's first take the variant of the prologue and the tail, chunks before its last the
// variant of the head and the gradient input (step.hpp).
uint32_t variant_begin(const StepSections& s, Section section, uint32_t end) {
  switch (section) {
    case Section::Prologue:
      return s.prologue_variant;
    case Section::Head:
      return s.head_variant;
    case Section::GradientIn:
      return s.gradient_in_variant;
    case Section::Tail:
      return s.tail_variant;
    default:
      return end;
  }
}

// A receive is posted when the rank's program reaches it, after the compute op before it in the
// unrolled (interleaved 1F1B) order, not as soon as its receive stream is free (docs/step.md
// "Receives"). The frameworks post a receive where their program issues it: Megatron-LM's and
// PyTorch's pipeline schedules after the compute before a micro-batch's item, ring attention
// (Transformer Engine's and PyTorch's context parallelism, ring-flash-attention) the next step's
// K,V right before the current step's block. Posted as soon as the stream is free, a receive
// would wait beside compute that runs before its data can be sent (the next layer's ring during
// the whole layer before it), which the cost model and the simulator slow. A ring's dK,dV
// accumulator is posted after the block before it, as the implementations post its hop; they run
// the hop beside the next block and add the received sum after it, where here the next block
// accumulates into it in place and waits for it (docs/step.md "Receives").
bool is_receive(const Op& op) {
  return op.kind == OpKind::Recv;
}

// Lays the template's section instances out in (interleaved) 1F1B order and copies them,
// resolving every dependency to the instance it means (step.hpp).
class Unroller {
 public:
  Unroller(const StepTemplate& step, int layers, std::vector<uint32_t>* origin)
      : t_(step),
        s_(step.sections),
        n_(layers),
        m_(step.microbatches),
        v_(step.chunks),
        chunk_layers_(layers / step.chunks),
        origin_(origin) {
    position_.stage = step.stage;
    position_.stages = step.stages;
    position_.chunks = step.chunks;
    position_.microbatches = step.microbatches;
    const uint32_t bounds[kSections + 1] = {0,
                                            s_.prologue_end,
                                            s_.forward_end,
                                            s_.head_end,
                                            s_.gradient_in_end,
                                            s_.backward_end,
                                            s_.tail_end,
                                            uint32_t(step.program.ops.size())};
    for (int k = 0; k <= kSections; ++k)
      bound_[k] = bounds[k];
    // Instance ids, section by section; each owns a slice of `flat_` (template op -> flat index).
    uint32_t at = 0;
    for (int k = 0; k < kSections; ++k) {
      const int count = instances(Section(k));
      first_id_[k] = int32_t(instance_base_.size());
      for (int i = 0; i < count; ++i) {
        instance_base_.push_back(at);
        at += bound_[k + 1] - bound_[k];
      }
    }
    flat_.assign(at, kNotYet);
    for (auto& runs : last_run_)
      runs[0] = runs[1] = -1;
  }

  RankProgram run() {
    RankProgram out;
    const RankProgram& p = t_.program;
    out.rank = p.rank;
    out.batch_begin = p.batch_begin;
    out.batch_end = p.batch_end;
    out.collectives = p.collectives;  // several instances of an op name the same (identical) spec
    lay_out_buffers(out);
    bind(p.inputs, out.inputs);
    bind(p.outputs, out.outputs);
    out.ops.reserve(flat_.size());
    lay_out([&](uint32_t i, int micro, int layer, const std::vector<int32_t>& deps) {
      Op op = p.ops[i];
      for (int32_t& b : op.buf)
        b = buffer(b, micro, layer);
      if (origin_) origin_->push_back(i);
      return out.add(op, deps);
    });
    return out;
  }

  FlatStep run_flat() {
    FlatStep out;
    out.origin.reserve(flat_.size());
    // Each instance copies at most its template ops' dependencies.
    size_t deps = 0;
    for (int k = 0; k < kSections; ++k)
      for (uint32_t i = bound_[k]; i < bound_[k + 1]; ++i)
        deps += size_t(instances(Section(k))) * t_.program.ops[i].dep_count;
    out.deps.reserve(deps);
    out.dep_begin.reserve(flat_.size() + 1);
    out.dep_begin.push_back(0);
    lay_out([&](uint32_t i, int, int, const std::vector<int32_t>& deps) {
      out.origin.push_back(i);
      out.deps.insert(out.deps.end(), deps.begin(), deps.end());
      out.dep_begin.push_back(uint32_t(out.deps.size()));
      return int32_t(out.origin.size() - 1);
    });
    return out;
  }

 private:
  static constexpr int32_t kNotYet = -2, kSkipped = -1;

  // Layer sections have an instance per micro-batch and layer of the rank (chunk after chunk),
  // the others one per micro-batch and chunk.
  int instances(Section s) const {
    if (s == Section::Epilogue) return 1;
    return is_layer(s) ? m_ * n_ : m_ * v_;
  }
  int32_t instance(Section s, int micro, int layer_or_chunk) const {
    const int32_t first = first_id_[int(s)];
    if (s == Section::Epilogue) return first;
    return first + (is_layer(s) ? micro * n_ + layer_or_chunk : micro * v_ + layer_or_chunk);
  }

  // Every section instance in (interleaved) 1F1B order, each op handed to `emit(template op,
  // micro-batch, layer, its flat dependencies)`, which returns its flat index.
  template <typename Emit>
  void lay_out(Emit&& emit) {
    const int total = m_ * v_, w = std::min(t_.warmup, total);
    for (int k = 0; k < w; ++k)
      forward(position_.forward_slot(k), emit);
    for (int k = 0; k + w < total; ++k) {
      forward(position_.forward_slot(k + w), emit);
      backward(position_.backward_slot(k), emit);
    }
    for (int k = std::max(0, total - w); k < total; ++k)
      backward(position_.backward_slot(k), emit);
    copy(Section::Epilogue, m_ - 1, -1, 0, emit);
  }

  template <typename Emit>
  void forward(detail::PipelineSlot at, Emit& emit) {
    const int first = at.chunk * chunk_layers_;
    copy(Section::Prologue, at.micro, -1, at.chunk, emit);
    for (int l = first; l < first + chunk_layers_; ++l)
      copy(Section::Forward, at.micro, l, at.chunk, emit);
    copy(Section::Head, at.micro, -1, at.chunk, emit);
  }
  template <typename Emit>
  void backward(detail::PipelineSlot at, Emit& emit) {
    const int first = at.chunk * chunk_layers_;
    copy(Section::GradientIn, at.micro, -1, at.chunk, emit);
    for (int l = first + chunk_layers_ - 1; l >= first; --l)
      copy(Section::Backward, at.micro, l, at.chunk, emit);
    copy(Section::Tail, at.micro, -1, at.chunk, emit);
  }

  // Whether chunk `chunk` runs the variant of a section rather than its main ops.
  bool takes_variant(Section section, int chunk) const {
    const bool later = section == Section::Prologue || section == Section::Tail;
    return later ? chunk > 0 : chunk < v_ - 1;
  }
  // The model layer of the rank's layer `layer` (chunk after chunk), for buffer names: chunk k of
  // stage p holds model chunk k Pp + p, whose layers the template's stage share numbers.
  int model_layer(int layer) const {
    const int full_chunk = t_.layers / v_;
    const int chunk = layer / chunk_layers_, within = layer % chunk_layers_;
    if (v_ == 1) return t_.first_layer + layer;
    return (chunk * t_.stages + t_.stage) * full_chunk + within;
  }

  // Per-layer buffers once per layer and micro-batch (names get ".L<model layer>", and ".M<j>"
  // with several micro-batches), the others once.
  void lay_out_buffers(RankProgram& out) {
    const RankProgram& p = t_.program;
    buffer_at_.assign(p.buffers.size(), -1);
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      buffer_at_[b] = int32_t(out.buffers.size());
      if (!per_layer(int32_t(b))) {
        out.buffers.push_back(p.buffers[b]);
        continue;
      }
      for (int j = 0; j < m_; ++j)
        for (int l = 0; l < n_; ++l) {
          out.buffers.push_back(p.buffers[b]);
          out.buffers.back().name += fmt::format(".L{}", model_layer(l));
          if (m_ > 1) out.buffers.back().name += fmt::format(".M{}", j);
        }
    }
  }
  bool per_layer(int32_t buf) const {
    return size_t(buf) < t_.per_layer_buffer.size() && t_.per_layer_buffer[size_t(buf)];
  }
  // A buffer as layer `layer` of micro-batch `micro` sees it (-1: outside any layer, layer 0).
  int32_t buffer(int32_t buf, int micro, int layer) const {
    if (buf < 0) return buf;
    if (!per_layer(buf)) return buffer_at_[size_t(buf)];
    return buffer_at_[size_t(buf)] + micro * n_ + std::max(layer, 0);
  }
  void bind(const std::vector<Binding>& from, std::vector<Binding>& to) const {
    for (const Binding& b : from) {
      const int copies = per_layer(b.buf) ? m_ * n_ : 1;
      for (int c = 0; c < copies; ++c) {
        to.push_back(b);
        to.back().buf = buffer(b.buf, c / n_, c % n_);
      }
    }
  }

  // The flat index of template op `target` as an op of section `from`, micro-batch `micro`, chunk
  // `chunk` and layer `layer` sees it: a layer op sees its own layer's instance, anything else the
  // chunk's instance; the epilogue sees the instance of the target's section (and variant) that
  // ran last. -1: the instance was left out, or it ran the other variant.
  int32_t resolve(uint32_t target, Section from, int micro, int layer, int chunk) const {
    const Section to = section_of(s_, target);
    int32_t id = 0;
    if (from == Section::Epilogue) {
      id = last_run_[int(to)][target >= variant_begin(s_, to, bound_[int(to) + 1]) ? 1 : 0];
      if (id < 0) return kSkipped;
    } else {
      if (is_layer(to) && !is_layer(from))
        layer = chunk * chunk_layers_ + (to == Section::Forward ? chunk_layers_ - 1 : 0);
      id = instance(to, micro, is_layer(to) ? layer : chunk);
    }
    const int32_t flat = flat_[instance_base_[size_t(id)] + (target - bound_[int(to)])];
    WF_ASSERT(flat != kNotYet, fmt::format("rank {}: template op {} depends on op {}, which has not run yet",
                                           t_.program.rank, int(from), target));
    return flat;
  }

  // The template's previous-layer dependency of op `i`, resolved to the copy of the layer that ran
  // just before in the same micro-batch and chunk (forward: layer - 1; backward: layer + 1).
  void add_previous_layer_dep(uint32_t i, Section section, int micro, int layer) {
    const auto& pairs = t_.previous_layer_deps;
    const auto it = std::lower_bound(pairs.begin(), pairs.end(), std::pair<uint32_t, uint32_t>{i, 0});
    if (it == pairs.end() || it->first != i) return;
    const int before = section == Section::Forward ? layer - 1 : layer + 1;
    if (before < 0 || before >= n_ || before / chunk_layers_ != layer / chunk_layers_) return;
    const int32_t flat =
        flat_[instance_base_[size_t(instance(section, micro, before))] + (it->second - bound_[int(section)])];
    if (flat >= 0) deps_.push_back(flat);
  }

  // Gradient synchronisation of ZeRO 0/1 runs in the last micro-batch only (gradients accumulate).
  bool skipped(const Op& op, int micro) const {
    return op.label == StepOp::GradSync && !t_.sync_every_microbatch && micro < m_ - 1;
  }

  template <typename Emit>
  void copy(Section section, int micro, int layer, int chunk, Emit& emit) {
    const RankProgram& p = t_.program;
    const uint32_t begin = bound_[int(section)], end = bound_[int(section) + 1];
    const int32_t id = instance(section, micro, is_layer(section) ? layer : chunk);
    int32_t* flat = &flat_[instance_base_[size_t(id)]];
    // A section with a variant runs either its main ops or the variant's; the others are left out.
    const uint32_t split = variant_begin(s_, section, end);
    const bool variant = split < end && takes_variant(section, chunk);
    last_run_[int(section)][variant ? 1 : 0] = id;
    for (uint32_t i = begin; i < end; ++i) {
      const Op& op = p.ops[i];
      if (split < end && (i >= split) != variant) {
        flat[i - begin] = kSkipped;
        continue;
      }
      if (skipped(op, micro)) {
        flat[i - begin] = kSkipped;
        continue;
      }
      deps_.clear();
      for (const int32_t* d = p.deps_begin(op); d != p.deps_end(op); ++d) {
        const int32_t resolved = resolve(uint32_t(*d), section, micro, layer, chunk);
        if (resolved >= 0) deps_.push_back(resolved);
      }
      if (is_layer(section)) add_previous_layer_dep(i, section, micro, layer);
      if (is_receive(op) && last_compute_ >= 0) deps_.push_back(last_compute_);
      flat[i - begin] = emit(i, micro, layer, deps_);
      if (op.stream == Stream::Compute) last_compute_ = flat[i - begin];
    }
  }

  const StepTemplate& t_;
  const StepSections s_;
  const int n_, m_, v_;
  const int chunk_layers_;  // n / v
  detail::PipelinePosition position_;
  std::vector<uint32_t>* origin_;  // may be null
  // By section: the instance that ran last of its main ops [0] and of its variant [1].
  int32_t last_run_[kSections][2] = {};
  uint32_t bound_[kSections + 1] = {};
  int32_t first_id_[kSections] = {};
  std::vector<uint32_t> instance_base_;  // by instance id: its slice of flat_
  std::vector<int32_t> flat_;            // template op of an instance -> flat index
  std::vector<int32_t> buffer_at_;
  std::vector<int32_t> deps_;  // the op being copied
  int32_t last_compute_ = -1;  // the flat index of the last compute op laid out so far
};

void check_layers(const StepTemplate& step, int n) {
  if (n < 1 || n > step.layers)
    throw InputError(fmt::format("cannot unroll {} layers of a {}-layer step", n, step.layers));
  if (n % step.chunks != 0)
    throw InputError(fmt::format("cannot unroll {} layers over {} virtual stages: a multiple of {} is needed", n,
                                 step.chunks, step.chunks));
}

}  // namespace

RankProgram unroll(const StepTemplate& step, int layers, std::vector<uint32_t>* origin) {
  const int n = layers == 0 ? step.layers : layers;
  check_layers(step, n);
  if (origin) origin->clear();
  return Unroller(step, n, origin).run();
}

FlatStep unroll_flat(const StepTemplate& step, int layers) {
  const int n = layers == 0 ? step.layers : layers;
  check_layers(step, n);
  return Unroller(step, n, nullptr).run_flat();
}

bool same_unrolled_order(const StepTemplate& a, const StepTemplate& b) {
  const StepSections &x = a.sections, &y = b.sections;
  const bool same_sections = x.prologue_end == y.prologue_end && x.forward_end == y.forward_end &&
                             x.head_end == y.head_end && x.gradient_in_end == y.gradient_in_end &&
                             x.backward_end == y.backward_end && x.tail_end == y.tail_end &&
                             x.prologue_variant == y.prologue_variant && x.head_variant == y.head_variant &&
                             x.gradient_in_variant == y.gradient_in_variant && x.tail_variant == y.tail_variant;
  if (!same_sections || a.layers != b.layers || a.microbatches != b.microbatches || a.warmup != b.warmup ||
      a.chunks != b.chunks || a.stage != b.stage || a.stages != b.stages ||
      a.sync_every_microbatch != b.sync_every_microbatch || a.previous_layer_deps != b.previous_layer_deps ||
      a.program.ops.size() != b.program.ops.size())
    return false;
  // What the Unroller reads of an op: its dependencies, whether it is a gradient synchronisation
  // (skipped in all but the last micro-batch under ZeRO 0/1), a compute op or a receive.
  for (size_t i = 0; i < a.program.ops.size(); ++i) {
    const Op &p = a.program.ops[i], &q = b.program.ops[i];
    if ((p.label == StepOp::GradSync) != (q.label == StepOp::GradSync)) return false;
    if ((p.stream == Stream::Compute) != (q.stream == Stream::Compute)) return false;
    if (is_receive(p) != is_receive(q)) return false;
    if (!std::equal(a.program.deps_begin(p), a.program.deps_end(p), b.program.deps_begin(q), b.program.deps_end(q)))
      return false;
  }
  return true;
}

double layer_attention_flops(const Workload& w) {
  const double forward = 4.0 * w.batch * double(w.seq) * double(w.seq) * w.heads * w.head_dim * (w.causal ? 0.5 : 1.0);
  return 3.5 * forward;
}

double step_model_flops(const Workload& w) {
  const double matrix_weights = double(w.parameter_count()) - double(w.vocab) * double(w.hidden)  // embedding
                                - double(w.hidden) * (2.0 * w.layers + 1);                        // norms
  const double tokens = double(w.seq) * w.batch;
  return 6.0 * tokens * matrix_weights + w.layers * layer_attention_flops(w);
}

}  // namespace wallfacer
