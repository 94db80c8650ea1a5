// Unrolling a step template into a flat program of n layers (step.hpp), and the model FLOPs of a
// step (docs/step.md).
#include <wallfacer/schedule/step.hpp>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>

namespace wallfacer {
namespace {

enum class Section { Prologue, Forward, Head, Backward, Epilogue };

Section section_of(const StepSections& s, uint32_t op) {
  if (op < s.prologue_end) return Section::Prologue;
  if (op < s.forward_end) return Section::Forward;
  if (op < s.head_end) return Section::Head;
  if (op < s.backward_end) return Section::Backward;
  return Section::Epilogue;
}

// Where the instances of each section start in the flat program, and which buffers each layer
// instance uses.
class Unroller {
 public:
  Unroller(const StepTemplate& step, int layers) : t_(step), s_(step.sections), n_(layers) {
    const uint32_t forward = s_.forward_end - s_.prologue_end, head = s_.head_end - s_.forward_end;
    const uint32_t backward = s_.backward_end - s_.head_end;
    forward_at_ = s_.prologue_end;
    head_at_ = forward_at_ + uint32_t(n_) * forward;
    backward_at_ = head_at_ + head;
    epilogue_at_ = backward_at_ + uint32_t(n_) * backward;
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
    out.ops.reserve(size_t(epilogue_at_ + (uint32_t(p.ops.size()) - s_.backward_end)));
    copy(out, 0, s_.prologue_end, -1);
    for (int l = 0; l < n_; ++l)
      copy(out, s_.prologue_end, s_.forward_end, l);
    copy(out, s_.forward_end, s_.head_end, -1);
    for (int l = n_ - 1; l >= 0; --l)
      copy(out, s_.head_end, s_.backward_end, l);
    copy(out, s_.backward_end, uint32_t(p.ops.size()), -1);
    return out;
  }

 private:
  // Per-layer buffers once per layer (names get ".L<layer>"), the others once.
  void lay_out_buffers(RankProgram& out) {
    const RankProgram& p = t_.program;
    buffer_at_.assign(p.buffers.size(), -1);
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      const bool per_layer = b < t_.per_layer_buffer.size() && t_.per_layer_buffer[b];
      buffer_at_[b] = int32_t(out.buffers.size());
      for (int l = 0; l < (per_layer ? n_ : 1); ++l) {
        out.buffers.push_back(p.buffers[b]);
        if (per_layer) out.buffers.back().name += fmt::format(".L{}", l);
      }
    }
  }
  bool per_layer(int32_t buf) const {
    return size_t(buf) < t_.per_layer_buffer.size() && t_.per_layer_buffer[size_t(buf)];
  }
  // A buffer as layer `layer` sees it (-1: outside any layer, the last layer that ran).
  int32_t buffer(int32_t buf, int layer) const {
    if (buf < 0) return buf;
    if (!per_layer(buf)) return buffer_at_[size_t(buf)];
    return buffer_at_[size_t(buf)] + (layer >= 0 ? layer : 0);
  }
  void bind(const std::vector<Binding>& from, std::vector<Binding>& to) const {
    for (const Binding& b : from)
      for (int l = 0; l < (per_layer(b.buf) ? n_ : 1); ++l) {
        to.push_back(b);
        to.back().buf = buffer(b.buf, l);
      }
  }

  // The flat index of template op `target` as seen from an op of `layer` (-1: not in a layer).
  // A layer op sees its own layer's instance; anything else sees the instance that ran last.
  int32_t resolve(uint32_t target, int layer) const {
    const uint32_t forward = s_.forward_end - s_.prologue_end, backward = s_.backward_end - s_.head_end;
    switch (section_of(s_, target)) {
      case Section::Prologue:
        return int32_t(target);
      case Section::Forward:
        return int32_t(forward_at_ + uint32_t(layer >= 0 ? layer : n_ - 1) * forward + (target - s_.prologue_end));
      case Section::Head:
        return int32_t(head_at_ + (target - s_.forward_end));
      case Section::Backward:
        // Backward instances run from layer n-1 down to 0: layer l's is the (n-1-l)-th.
        return int32_t(backward_at_ + uint32_t(n_ - 1 - (layer >= 0 ? layer : 0)) * backward + (target - s_.head_end));
      case Section::Epilogue:
        return int32_t(epilogue_at_ + (target - s_.backward_end));
    }
    return -1;
  }

  void copy(RankProgram& out, uint32_t begin, uint32_t end, int layer) {
    const RankProgram& p = t_.program;
    std::vector<int32_t> deps;
    for (uint32_t i = begin; i < end; ++i) {
      Op op = p.ops[i];
      deps.clear();
      for (const int32_t* d = p.deps_begin(op); d != p.deps_end(op); ++d)
        deps.push_back(resolve(uint32_t(*d), layer));
      for (int32_t& b : op.buf)
        b = buffer(b, layer);
      out.add(op, deps);
    }
  }

  const StepTemplate& t_;
  const StepSections s_;
  const int n_;
  uint32_t forward_at_ = 0, head_at_ = 0, backward_at_ = 0, epilogue_at_ = 0;
  std::vector<int32_t> buffer_at_;
};

}  // namespace

RankProgram unroll(const StepTemplate& step, int layers) {
  const int n = layers == 0 ? step.layers : layers;
  if (n < 1 || n > step.layers)
    throw InputError(fmt::format("cannot unroll {} layers of a {}-layer step", n, step.layers));
  return Unroller(step, n).run();
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
