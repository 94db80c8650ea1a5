#include <wallfacer/train/model.hpp>

#include <fmt/format.h>

#include <cmath>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/hash_mix.hpp>

namespace wallfacer::train {

const char* to_string(Positions positions) {
  return positions == Positions::Rotary ? "rotary" : "learned";
}

Positions parse_positions(const std::string& name) {
  if (name == "rotary") return Positions::Rotary;
  if (name == "learned") return Positions::Learned;
  throw InputError(fmt::format("positions must be rotary or learned, got '{}'", name));
}

ModelShape model_shape(const Workload& w, Positions positions, double rotary_base) {
  if (!w.causal) throw InputError("the workload's mask is full (causal: false); a decoder trains with a causal mask");
  if (positions == Positions::Rotary && w.head_dim % 2 != 0)
    throw InputError(fmt::format("rotary positions need an even head_dim, the workload has {}", w.head_dim));
  if (!(rotary_base > 1) || !std::isfinite(rotary_base))
    throw InputError(fmt::format("the rotary base must be a finite number above 1, got {}", rotary_base));
  ModelShape s;
  s.layers = w.layers;
  s.hidden = w.hidden;
  s.heads = w.heads;
  s.kv_heads = w.kv_heads;
  s.head_dim = w.head_dim;
  s.ffn = w.ffn;
  s.vocab = w.vocab;
  s.gated_ffn = w.gated_ffn;
  s.seq = w.seq;
  s.positions = positions;
  s.rotary_base = rotary_base;
  return s;
}

int64_t ParameterTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t ParameterLayout::add(const std::string& name, std::vector<int64_t> shape, bool decay, double init_scale) {
  ParameterTensor t{name, std::move(shape), size_, decay, init_scale};
  size_ += t.numel();
  tensors_.push_back(t);
  return t.offset;
}

ParameterLayout::ParameterLayout(const ModelShape& s) {
  const double residual_scale = 0.02 / std::sqrt(2.0 * std::max(1, s.layers));
  embed_ = add("embed", {s.vocab, s.hidden}, true, 0.02);
  if (s.positions == Positions::Learned) pos_embed_ = add("pos_embed", {s.seq, s.hidden}, true, 0.02);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("layer{}.", l);
    LayerOffsets o;
    o.norm1 = add(p + "norm1", {s.hidden}, false, 0);
    o.wq = add(p + "wq", {s.hidden, s.q_width()}, true, 0.02);
    o.wk = add(p + "wk", {s.hidden, s.kv_width()}, true, 0.02);
    o.wv = add(p + "wv", {s.hidden, s.kv_width()}, true, 0.02);
    o.wo = add(p + "wo", {s.q_width(), s.hidden}, true, residual_scale);
    o.norm2 = add(p + "norm2", {s.hidden}, false, 0);
    if (s.gated_ffn) o.w_gate = add(p + "w_gate", {s.hidden, s.ffn}, true, 0.02);
    o.w_up = add(p + "w_up", {s.hidden, s.ffn}, true, 0.02);
    o.w_down = add(p + "w_down", {s.ffn, s.hidden}, true, residual_scale);
    layers_.push_back(o);
  }
  final_norm_ = add("final_norm", {s.hidden}, false, 0);
  lm_head_ = add("lm_head", {s.hidden, s.vocab}, true, 0.02);
}

int64_t ParameterLayout::matmul_weights() const {
  int64_t w = 0;
  for (const ParameterTensor& t : tensors_)
    if (t.shape.size() == 2 && t.name != "embed" && t.name != "pos_embed") w += t.numel();
  return w;
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's step
  return splitmix64_mix(x + kSplitmix64Golden);
}

double unit(uint64_t bits) {  // (0, 1)
  return (double(bits >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

std::vector<double> initial_parameters(const ParameterLayout& layout, uint64_t seed) {
  std::vector<double> values(size_t(layout.size()));
  for (size_t t = 0; t < layout.tensors().size(); ++t) {
    const ParameterTensor& tensor = layout.tensors()[t];
    const uint64_t stream = mix(seed ^ mix(t + 1));
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      double v = 1.0;
      if (tensor.init_scale > 0) {  // Box-Muller on two counter-based uniforms
        const double a = unit(mix(stream + 2 * uint64_t(i))), b = unit(mix(stream + 2 * uint64_t(i) + 1));
        v = tensor.init_scale * std::sqrt(-2.0 * std::log(a)) * std::cos(2.0 * M_PI * b);
      }
      values[size_t(tensor.offset + i)] = v;
    }
  }
  return values;
}

}  // namespace wallfacer::train
