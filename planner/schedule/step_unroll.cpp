// Unrolling a step template into a flat program of n layers (step.hpp), and the model FLOPs of a
// step (docs/step.md).
#include <wallfacer/schedule/step.hpp>

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>

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

// Lays the template's section instances out in 1F1B order and copies them, resolving every
// dependency to the instance it means (step.hpp).
class Unroller {
 public:
  Unroller(const StepTemplate& step, int layers, std::vector<uint32_t>* origin)
      : t_(step), s_(step.sections), n_(layers), m_(step.microbatches), origin_(origin) {
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
    const int w = std::min(t_.warmup, m_);
    for (int j = 0; j < w; ++j)
      forward(out, j);
    for (int j = 0; j + w < m_; ++j) {
      forward(out, j + w);
      backward(out, j);
    }
    for (int j = std::max(0, m_ - w); j < m_; ++j)
      backward(out, j);
    copy(out, Section::Epilogue, m_ - 1, -1);
    return out;
  }

 private:
  static constexpr int32_t kNotYet = -2, kSkipped = -1;

  int instances(Section s) const {
    if (s == Section::Epilogue) return 1;
    return is_layer(s) ? m_ * n_ : m_;
  }
  int32_t instance(Section s, int micro, int layer) const {
    const int32_t first = first_id_[int(s)];
    if (s == Section::Epilogue) return first;
    return first + (is_layer(s) ? micro * n_ + layer : micro);
  }

  void forward(RankProgram& out, int j) {
    copy(out, Section::Prologue, j, -1);
    for (int l = 0; l < n_; ++l)
      copy(out, Section::Forward, j, l);
    copy(out, Section::Head, j, -1);
  }
  void backward(RankProgram& out, int j) {
    copy(out, Section::GradientIn, j, -1);
    for (int l = n_ - 1; l >= 0; --l)
      copy(out, Section::Backward, j, l);
    copy(out, Section::Tail, j, -1);
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
          out.buffers.back().name += fmt::format(".L{}", t_.first_layer + l);
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

  // The flat index of template op `target` as an op of section `from`, micro-batch `micro` and
  // layer `layer` sees it: a layer op sees its own layer's instance, anything else the instance
  // that ran last; the epilogue sees the last micro-batch. -1: the instance was left out.
  int32_t resolve(uint32_t target, Section from, int micro, int layer) const {
    const Section to = section_of(s_, target);
    if (is_layer(to) && !is_layer(from)) layer = to == Section::Forward ? n_ - 1 : 0;
    const int32_t id = instance(to, micro, is_layer(to) ? layer : 0);
    const int32_t flat = flat_[instance_base_[size_t(id)] + (target - bound_[int(to)])];
    WF_ASSERT(flat != kNotYet, fmt::format("rank {}: template op {} depends on op {}, which has not run yet",
                                           t_.program.rank, int(from), target));
    return flat;
  }

  // Gradient synchronisation of ZeRO 0/1 runs in the last micro-batch only (gradients accumulate).
  bool skipped(const Op& op, int micro) const {
    return op.label == StepOp::GradSync && !t_.sync_every_microbatch && micro < m_ - 1;
  }

  void copy(RankProgram& out, Section section, int micro, int layer) {
    const RankProgram& p = t_.program;
    const uint32_t begin = bound_[int(section)], end = bound_[int(section) + 1];
    int32_t* flat = &flat_[instance_base_[size_t(instance(section, micro, layer))]];
    std::vector<int32_t> deps;
    for (uint32_t i = begin; i < end; ++i) {
      Op op = p.ops[i];
      if (skipped(op, micro)) {
        flat[i - begin] = kSkipped;
        continue;
      }
      deps.clear();
      for (const int32_t* d = p.deps_begin(op); d != p.deps_end(op); ++d) {
        const int32_t resolved = resolve(uint32_t(*d), section, micro, layer);
        if (resolved >= 0) deps.push_back(resolved);
      }
      for (int32_t& b : op.buf)
        b = buffer(b, micro, layer);
      flat[i - begin] = out.add(op, deps);
      if (origin_) origin_->push_back(i);
    }
  }

  const StepTemplate& t_;
  const StepSections s_;
  const int n_, m_;
  std::vector<uint32_t>* origin_;  // may be null
  uint32_t bound_[kSections + 1] = {};
  int32_t first_id_[kSections] = {};
  std::vector<uint32_t> instance_base_;  // by instance id: its slice of flat_
  std::vector<int32_t> flat_;            // template op of an instance -> flat index
  std::vector<int32_t> buffer_at_;
};

}  // namespace

RankProgram unroll(const StepTemplate& step, int layers, std::vector<uint32_t>* origin) {
  const int n = layers == 0 ? step.layers : layers;
  if (n < 1 || n > step.layers)
    throw InputError(fmt::format("cannot unroll {} layers of a {}-layer step", n, step.layers));
  if (origin) origin->clear();
  return Unroller(step, n, origin).run();
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
