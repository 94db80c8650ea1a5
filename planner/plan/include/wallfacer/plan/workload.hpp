// The workload: a model shape (layers, hidden, heads, ...) and the training shape (sequence
// length, micro-batch, dtype, mask). Model presets live in models/*.yaml and are embedded in the
// binary; every field can be overridden by a CLI flag.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace wallfacer {

enum class DType { BF16, FP16, FP32 };
const char* to_string(DType dtype);
DType parse_dtype(const std::string& name);  // throws InputError
int bytes_of(DType dtype);

// What the backward recomputes instead of storing (docs/step.md): nothing, the cheap memory-bound
// ops (norms, activations, rotary), or the whole layer forward from its input.
enum class Checkpointing { None, Selective, Full };
const char* to_string(Checkpointing mode);
Checkpointing parse_checkpointing(const std::string& name);  // throws InputError

struct Workload {
  std::string model = "custom";  // preset name or "custom"
  int layers = 0;
  int64_t hidden = 0;  // H = heads * head_dim for the presets
  int heads = 0;       // query heads h
  int kv_heads = 0;    // key/value heads h_kv (GQA when < heads)
  int head_dim = 0;    // d
  int64_t ffn = 0;     // FFN inner size
  int64_t vocab = 0;
  bool gated_ffn = true;  // SwiGLU (3 matrices) vs GELU MLP (2 matrices)
  int64_t seq = 0;        // N, tokens per sequence
  int batch = 1;          // B, sequences per step (split over data-parallel replicas)
  DType dtype = DType::BF16;
  bool causal = true;
  int zero_stage = 1;  // 0..3: how gradients, optimizer state and weights are sharded
  Checkpointing checkpointing = Checkpointing::Selective;
  int grad_bucket_MiB = 25;  // gradient synchronisation bucket (PyTorch DDP's default bucket_cap_mb)
  // The layers' GEMMs in fp8 (Transformer Engine's recipe); attention, the LM head and activations
  // stay in `dtype`.
  bool fp8_linear = false;
  // The dtype gradients travel in (reduce-scatters and all-reduces), which frameworks set apart
  // from `dtype`: fp32 by default, as Megatron-LM forces under bf16, NeMo's bf16 recipe and
  // torchtitan's FSDP reduce; DeepSpeed's fp16/bf16 ZeRO reduces in the gradients' dtype
  // (docs/step.md "Gradients and ZeRO").
  DType grad_comm_dtype = DType::FP32;
  // M, micro-batches per step: each data-parallel replica's batch / D sequences run as M
  // micro-batches of batch / (D * M) (docs/step.md "Pipeline parallelism"); M divides batch / D.
  int microbatches = 1;

  int64_t q_width() const { return int64_t(heads) * head_dim; }      // H
  int64_t kv_width() const { return int64_t(kv_heads) * head_dim; }  // H_kv
  // Parameters of the whole model (attention, FFN, norms, embeddings and untied output head).
  int64_t parameter_count() const;
  int64_t attention_parameters_per_layer() const;  // W_q, W_k, W_v, W_o
  int64_t layer_parameter_count() const;           // one layer: attention, FFN and its two norms
  // Parameters of pipeline stage `stage` of `stages` (layers / stages layers; the embedding on the
  // first stage, the final norm and output head on the last). stages = 1: parameter_count().
  int64_t stage_parameter_count(int stage, int stages) const;
};

// Optional overrides, one per CLI flag. Unset fields keep the preset's value.
struct WorkloadOverrides {
  std::optional<int> layers, heads, kv_heads, head_dim, batch, zero_stage, grad_bucket_MiB, microbatches;
  std::optional<int64_t> hidden, ffn, vocab, seq;
  std::optional<std::string> dtype, checkpointing, grad_comm_dtype;
  std::optional<bool> causal, fp8_linear;
};

// Parses a model preset file. Throws InputError("FILE:LINE: error: ...") on bad input.
Workload parse_workload(const std::string& yaml_text, const std::string& source);
// Loads a path or an embedded preset name ("llama-3-8b"); applies overrides and validates.
Workload load_workload(const std::string& path_or_preset, const WorkloadOverrides& overrides = {});
std::vector<std::string> model_preset_names();
// Checks the ranges and relations of the fields (heads % kv_heads, hidden, seq > 0 ...).
// `source` names the origin in messages. Throws InputError.
void validate(const Workload& workload, const std::string& source);

namespace detail {
// Reads a workload mapping inside another file (the `workload:` section of a plan) and validates
// it, blaming the offending line. `all_fields` requires every field of Workload (a plan records
// them all) and rejects the preset-only keys `description` and `source`.
Workload workload_from_yaml(const YAML::Node& node, const std::string& source, bool all_fields);
}  // namespace detail

}  // namespace wallfacer
