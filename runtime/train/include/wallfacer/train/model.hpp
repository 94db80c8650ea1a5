// The trainer's model: a GPT-style decoder whose shape comes from a plan's workload (token
// embedding over 256 byte values or the workload's vocabulary, rotary or learned positions,
// pre-norm blocks of attention and a GELU or SwiGLU MLP, a final RMS norm, an untied LM head),
// its parameters as named tensors in one flat array, and their seeded initialisation. The flat
// array is what the gradient synchronisation, the optimizer and the checkpoints see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <wallfacer/plan/workload.hpp>

namespace wallfacer::train {

enum class Positions { Rotary, Learned };
inline constexpr double kDefaultRotaryBase = 10000.0;  // RoFormer's, GPT-NeoX's, Llama 2's
const char* to_string(Positions positions);
Positions parse_positions(const std::string& name);  // throws InputError

struct ModelShape {
  int layers = 0;
  int64_t hidden = 0;  // H, the residual width
  int heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ffn = 0;
  int64_t vocab = 0;
  bool gated_ffn = false;
  int64_t seq = 0;  // positions of a learned position table
  Positions positions = Positions::Rotary;
  // Rotary positions turn pair i of a head by position * rotary_base^(-2i / head_dim): a larger base
  // leaves more pairs nearly unturned over long distances, where attention can match on content.
  double rotary_base = kDefaultRotaryBase;
  int64_t q_width() const { return int64_t(heads) * head_dim; }
  int64_t kv_width() const { return int64_t(kv_heads) * head_dim; }
};

// The model of a workload. Throws InputError when the workload cannot be trained here (a
// non-causal mask, an odd head_dim under rotary positions) or the rotary base is not above 1.
ModelShape model_shape(const Workload& workload, Positions positions, double rotary_base = kDefaultRotaryBase);

struct ParameterTensor {
  std::string name;  // "embed", "pos_embed", "layer3.wq", "final_norm", "lm_head"
  std::vector<int64_t> shape;
  int64_t offset = 0;        // into the flat parameter array
  bool decay = true;         // AdamW weight decay applies (matrices and embeddings, not norm gains)
  double init_scale = 0.02;  // standard deviation of the normal initialisation; 0: ones (gains)
  int64_t numel() const;
};

// Offsets of every parameter of one layer (and the rest) in the flat array.
struct LayerOffsets {
  int64_t norm1 = 0, wq = 0, wk = 0, wv = 0, wo = 0, norm2 = 0;
  int64_t w_gate = -1, w_up = 0, w_down = 0;  // w_gate only for SwiGLU
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelShape& shape);
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  int64_t size() const { return size_; }
  const LayerOffsets& layer(int l) const { return layers_[size_t(l)]; }
  int64_t embed() const { return embed_; }
  int64_t pos_embed() const { return pos_embed_; }  // -1 under rotary positions
  int64_t final_norm() const { return final_norm_; }
  int64_t lm_head() const { return lm_head_; }
  // Weights of the matrix products per token (the layers' projections and MLP, the LM head): the
  // W of the 6 * tokens * W model FLOPs (docs/step.md, "FLOPs").
  int64_t matmul_weights() const;

 private:
  int64_t add(const std::string& name, std::vector<int64_t> shape, bool decay, double init_scale);
  std::vector<ParameterTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  int64_t size_ = 0, embed_ = 0, pos_embed_ = -1, final_norm_ = 0, lm_head_ = 0;
};

// Seeded initialisation, identical on every rank and for every rank count: element i of tensor
// t is a function of (seed, t, i) only.
std::vector<double> initial_parameters(const ParameterLayout& layout, uint64_t seed);

}  // namespace wallfacer::train
