// Memory per GPU (cost_model.hpp): model state sharded by ZeRO stage, the layer checkpoints of
// WallFacer's Eq. 8-10 and the schedule's attention buffers. Conventions: docs/cost-model.md.
#include <algorithm>

#include <wallfacer/cost/cost_model.hpp>

namespace wallfacer {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A = B·N·H/P activation elements times the element size (WallFacer Eq. 8).
double activation_slice_bytes(const Workload& w, int ranks) {
  return double(w.batch) * double(w.seq) * double(w.hidden) / std::max(ranks, 1) * bytes_of(w.dtype);
}

int rows_of(const RankProgram& program) {
  return std::max(program.batch_end - program.batch_begin, 1);
}

double field_bytes(const ScheduleDims& dims, const BufferDecl& buf, Field field, int batch) {
  return double(payload_bytes(dims, field_bit(field), buf.capacity_tokens, buf.heads.size(), batch, buf.fp32));
}

}  // namespace

double model_state_bytes(const Workload& workload, int ranks) {
  return parameter_state_bytes(workload, double(workload.parameter_count()), ranks);
}

double parameter_state_bytes(const Workload& workload, double params, int ranks) {
  const double shards = std::max(ranks, 1);
  // bf16 weights (2 B), bf16 gradients (2 B), fp32 master weights + Adam moments (12 B).
  switch (workload.zero_stage) {
    case 0:
      return 16 * params;
    case 1:
      return (2 + 2) * params + 12 * params / shards;
    case 2:
      return 2 * params + (2 + 12) * params / shards;
    default:
      return 16 * params / shards;
  }
}

double buffer_bytes(const ScheduleDims& dims, const RankProgram& program) {
  double total = 0;
  const FieldMask weight = field_bit(Field::WeightGrad);
  for (const BufferDecl& buf : program.buffers) {
    const FieldMask fields = FieldMask(buf.fields & ~weight);
    if (!fields) continue;
    total += double(payload_bytes(dims, fields, buf.capacity_tokens, buf.heads.size(), rows_of(program), buf.fp32));
  }
  return total;
}

MemoryEstimate base_memory(const Workload& w, int ranks) {
  MemoryEstimate m;
  m.model_state_GiB = model_state_bytes(w, ranks) / kGiB;
  m.activations_GiB = (w.layers + 1) * activation_slice_bytes(w, ranks) / kGiB;
  m.total_GiB = m.model_state_GiB + m.activations_GiB;
  return m;
}

MemoryEstimate CostModel::memory(const Plan& plan, const Schedule& schedule) const {
  MemoryEstimate m = base_memory(plan.workload, plan.num_ranks());
  double busiest = 0;
  for (const RankProgram& program : schedule.ranks)
    busiest = std::max(busiest, buffer_bytes(schedule.dims, program));
  m.attention_GiB = busiest / kGiB;
  m.total_GiB = m.model_state_GiB + m.activations_GiB + m.attention_GiB;
  return m;
}

namespace {

// Elements per row (token of one sequence) a layer keeps for its backward (docs/step.md): the
// layer input, norm outputs, Q, K, V, attention output, the residual, the MLP's inputs and
// activation; selective recomputation drops the norm and activation outputs, full keeps the input.
double stored_elements_per_row(const Workload& w, Checkpointing mode) {
  const double H = double(w.hidden), Hkv = double(w.kv_width()), F = double(w.ffn);
  const double mlp = w.gated_ffn ? 3 * F : 2 * F;  // gate, up, activation (GELU: up, activation)
  switch (mode) {
    case Checkpointing::None:
      return 6 * H + 2 * Hkv + mlp;
    case Checkpointing::Selective:
      return 4 * H + 2 * Hkv + mlp - F;
    case Checkpointing::Full:
      return H;
  }
  return 0;
}

// Layer activations stage `stage` holds at its peak. Under 1F1B it holds min(Pp - p, M)
// micro-batches of its L / Pp layers. Under interleaved 1F1B it has run its warmup chunk forwards
// and one more before the first backward frees one: min(2 (Pp - p - 1) + (v - 1) Pp + 1, v M)
// chunks of L / (Pp v) layers (the warmup of Megatron-LM's interleaved schedule, docs/step.md
// "Interleaved 1F1B").
double in_flight_layers(const StrategyParams& params, const Workload& w, int stage) {
  const int Pp = params.pipeline_parallel, v = std::max(1, params.virtual_stages), M = w.microbatches;
  if (v == 1) return double(w.layers / Pp) * std::min(Pp - stage, M);
  const int warmup = std::min(2 * (Pp - stage - 1) + (v - 1) * Pp, v * M);
  return double(w.layers / (Pp * v)) * std::min(warmup + 1, v * M);
}

}  // namespace

AttentionFootprint program_footprint(const Plan& plan, const ScheduleDims& dims, const RankProgram& program,
                                     const TokenSetPool& pool) {
  const Workload& w = plan.workload;
  const int T = plan.params.tensor_parallel, M = w.microbatches;
  // The attention programs hold the whole batch.
  const int64_t token_heads = query_token_heads(program, pool);
  return {double(token_heads) / std::max(1, w.heads / T) * rows_of(program) / M, buffer_bytes(dims, program) / M};
}

AttentionFootprint attention_footprint(const Plan& plan, const Schedule& attention) {
  AttentionFootprint f;
  for (const RankProgram& program : attention.ranks) {
    const AttentionFootprint one = program_footprint(plan, attention.dims, program, attention.tokens);
    f.rows = std::max(f.rows, one.rows);
    f.buffer_bytes = std::max(f.buffer_bytes, one.buffer_bytes);
  }
  return f;
}

MemoryEstimate step_memory(const Plan& plan, const Schedule& attention) {
  return step_memory(plan, attention_footprint(plan, attention));
}

MemoryEstimate step_memory(const Plan& plan, const AttentionFootprint& footprint) {
  const Workload& w = plan.workload;
  const int T = plan.params.tensor_parallel, Pp = plan.params.pipeline_parallel;
  const double rows = footprint.rows, buffers = footprint.buffer_bytes;
  const double e = bytes_of(w.dtype);
  const double lse = w.checkpointing == Checkpointing::Full ? 0 : 4.0 * w.heads;  // fp32 per head
  // With tensor (and Megatron's sequence) parallelism every stored activation is split T ways.
  const double layer_bytes = rows * (e * stored_elements_per_row(w, w.checkpointing) + lse) / T;
  const double logits = rows * double(w.vocab) / T * (e + 4);
  const double recomputed =
      w.checkpointing == Checkpointing::Full ? rows * e * stored_elements_per_row(w, Checkpointing::None) / T : 0;
  // The fullest stage: the first holds the most micro-batches in flight under 1F1B (min(Pp, M),
  // stage p min(Pp - p, M)), and under interleaved 1F1B the most chunks, the last the logits. A stage's model state is
  // 1/T of its parameters, sharded by ZeRO over its data x sequence parallel ranks.
  MemoryEstimate best;
  for (int stage : {0, Pp - 1}) {
    MemoryEstimate m;
    const double params = double(w.stage_parameter_count(stage, Pp)) / T;
    m.model_state_GiB = parameter_state_bytes(w, params, plan.num_ranks() / Pp / T) / kGiB;
    m.activations_GiB = in_flight_layers(plan.params, w, stage) * layer_bytes / kGiB;
    m.attention_GiB = buffers / kGiB;
    // The largest transient on top: the logits and their fp32 gradient at the head, or one layer's
    // recomputed activations inside a fully checkpointed backward.
    m.working_GiB = std::max(stage == Pp - 1 ? logits : 0.0, recomputed) / kGiB;
    m.total_GiB = m.model_state_GiB + m.activations_GiB + m.attention_GiB + m.working_GiB;
    if (m.total_GiB > best.total_GiB) best = m;
  }
  return best;
}

PaperMemoryTerms paper_memory_terms(const Plan& plan, const Schedule& schedule) {
  PaperMemoryTerms t;
  t.model_state_bytes = model_state_bytes(plan.workload, plan.num_ranks());
  t.activation_bytes = activation_slice_bytes(plan.workload, plan.num_ranks());
  t.layers = plan.workload.layers;
  // The forward peak holds each of Q, K, V once at its widest: the largest buffer of each field.
  for (const RankProgram& program : schedule.ranks) {
    double qkv = 0;
    for (Field field : {Field::Q, Field::K, Field::V}) {
      double widest = 0;
      for (const BufferDecl& buf : program.buffers)
        if (buf.fields & field_bit(field))
          widest = std::max(widest, field_bytes(schedule.dims, buf, field, rows_of(program)));
      qkv += widest;
    }
    t.qkv_bytes = std::max(t.qkv_bytes, qkv);
  }
  return t;
}

}  // namespace wallfacer
