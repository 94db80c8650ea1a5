// The whole-step template of one rank (step.hpp): the strategy's attention program spliced into a
// layer of projections, MLP, norms and residuals, with recomputation, gradient synchronisation by
// ZeRO stage and the optimizer. Sizes and op order: docs/step.md.
#include <wallfacer/schedule/step.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "pipeline_parallel.hpp"
#include "step_writer.hpp"
#include "strategies/common.hpp"

namespace wallfacer {
namespace {

using detail::TemplateWriter;

// The largest number of collectives one gradient or parameter synchronisation is cut into: a
// bucket grows beyond the setting rather than flood a program with thousands of small messages.
constexpr int64_t kMaxBuckets = 64;

int64_t own_rows(const RankProgram& program, const TokenSetPool& pool, int heads);

// The strategy's attention program, taken apart for splicing.
struct Attention {
  RankProgram program;
  uint32_t split = 0;                // first backward op
  std::vector<bool> dropped;         // by op: the attention's own weight-gradient all-reduce
  std::vector<int32_t> grad_groups;  // the groups that all-reduce averaged over, in order
  std::vector<int32_t> busy_groups;  // groups of the attention's own (kept) collectives
  int64_t tokens = 0;                // the rank's own query rows (tokens x batch)
};

Attention take_apart(RankProgram program, int rank, const TokenSetPool& pool, int heads) {
  Attention a;
  const size_t n = program.ops.size();
  a.split = uint32_t(n);
  for (size_t i = 0; i < n; ++i)
    if (program.ops[i].phase == Phase::Backward) {
      a.split = uint32_t(i);
      break;
    }
  for (size_t i = a.split; i < n; ++i)
    WF_ASSERT(program.ops[i].phase == Phase::Backward,
              fmt::format("rank {}: attention op {} is forward after the backward began", rank, i));
  a.dropped.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Op& op = program.ops[i];
    if (op.kind != OpKind::AllReduce || !(op.fields & fieldset::kWeightGrad)) continue;
    a.dropped[i] = true;
    a.grad_groups.push_back(program.collectives[size_t(op.coll)].group);
  }
  for (size_t i = 0; i < n; ++i) {
    if (a.dropped[i]) continue;
    const Op& op = program.ops[i];
    if (is_collective(op.kind) && op.coll >= 0) a.busy_groups.push_back(program.collectives[size_t(op.coll)].group);
    for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d)
      WF_ASSERT(!a.dropped[size_t(*d)],
                fmt::format("rank {}: attention op {} waits for the weight-gradient all-reduce", rank, i));
  }
  a.tokens = own_rows(program, pool, heads);
  a.program = std::move(program);
  return a;
}

// Rows of the rank's own queries (tokens x sequences), whatever head ranges they are bound in.
int64_t own_rows(const RankProgram& program, const TokenSetPool& pool, int heads) {
  return query_token_heads(program, pool) / std::max(1, heads) * (program.batch_end - program.batch_begin);
}

// Sizes of the layer's matrices and of the rows one rank works on (docs/step.md). With tensor
// parallelism T, a rank holds 1/T of every matrix (h, hkv, f, v) and the sequence-parallel part of
// the layer (norms, residuals, embedding) works on m / T rows.
struct Shape {
  int64_t m = 0;           // rows of the products: the rank's tokens x sequences
  int64_t H = 0, Hkv = 0;  // query and key/value widths of the model
  int64_t F = 0, V = 0;    // MLP inner size, vocabulary
  int64_t e = 2;           // bytes per element of the dtype
  bool gated = true;
  int64_t T = 1;  // tensor parallel degree
  int64_t mlp_matrices() const { return gated ? 3 : 2; }
  int64_t h() const { return H / T; }
  int64_t hkv() const { return Hkv / T; }
  int64_t f() const { return F / T; }
  int64_t v() const { return V / T; }
  int64_t rows() const { return m / T; }  // sequence-parallel rows
};

// The layer forward's producers that the spliced attention waits for.
struct Producers {
  int32_t q = -1, k = -1, v = -1;  // Q and K after rotary, V after its projection
  int32_t dO = -1;                 // the output projection's data gradient (backward)
};

class StepTemplateBuilder {
 public:
  StepTemplateBuilder(const Plan& plan, Attention attention, TokenSetPool& pool, size_t attention_flow_sets)
      : plan_(plan),
        w_(plan.workload),
        a_(std::move(attention)),
        out_(),
        writer_(plan, out_.program, pool, detail::dims_of(detail::micro_workload(plan.workload))) {
    const int T = plan.params.tensor_parallel;
    shape_ = {a_.tokens, w_.q_width(), w_.kv_width(), w_.ffn, w_.vocab, bytes_of(w_.dtype), w_.gated_ffn, T};
    stage_ = detail::pipeline_position(plan, a_.program.rank);
    attention_flow_sets_ = attention_flow_sets;
    world_ = stage_.stage_ranks / T;
    const int local = a_.program.rank % stage_.stage_ranks;
    const std::string prefix = stage_.stages > 1 ? fmt::format("p{}.", stage_.stage) : "";
    if (T > 1) tensor_group_ = plan.find_group(fmt::format("{}tp{}", prefix, local / T));
    wraps_ = stage_.chunks > 1;
  }

  StepTemplate build() {
    out_.program.rank = a_.program.rank;
    out_.program.batch_begin = a_.program.batch_begin;
    out_.program.batch_end = a_.program.batch_end;
    out_.layers = stage_.layers;
    out_.first_layer = stage_.first_layer;
    out_.microbatches = stage_.microbatches;
    out_.warmup = stage_.warmup();
    out_.chunks = stage_.chunks;
    out_.stage = stage_.stage;
    out_.stages = stage_.stages;
    out_.sync_every_microbatch = w_.zero_stage >= 2;
    out_.tokens = shape_.m;
    copy_attention_storage();
    StepSections& sections = out_.sections;
    input_ = prologue();
    sections.prologue_variant = writer_.size();
    // Interleaved: the first stage's later chunks take the last stage's activations.
    if (wraps_ && stage_.first()) input_variant_ = wrap_message(OpKind::Recv, true, {});
    sections.prologue_end = writer_.size();
    forward_map_ = layer_forward();
    prefetch_one_layer(sections.prologue_end);
    sections.forward_end = writer_.size();
    const int32_t forward_last = writer_.last_compute();
    head();
    sections.head_variant = writer_.size();
    // Interleaved: the last stage's earlier chunks send their output to the first stage, and get
    // its gradient back from there.
    if (wraps_ && stage_.last()) {
      writer_.set_phase(Phase::Forward);
      wrap_message(OpKind::Send, true, after(forward_last));
    }
    sections.head_end = writer_.size();
    gradient_input_ = receive_gradient();
    sections.gradient_in_variant = writer_.size();
    if (wraps_ && stage_.last()) gradient_input_ = wrap_message(OpKind::Recv, false, {});
    sections.gradient_in_end = writer_.size();
    layer_backward();
    prefetch_one_layer(sections.gradient_in_end);
    sections.backward_end = writer_.size();
    const int32_t backward_last = writer_.last_compute();
    tail();
    sections.tail_variant = writer_.size();
    if (wraps_ && stage_.first()) {
      writer_.set_phase(Phase::Backward);
      wrap_message(OpKind::Send, false, after(backward_last));
    }
    sections.tail_end = writer_.size();
    epilogue();
    out_.per_layer_buffer.resize(out_.program.buffers.size(), false);
    return std::move(out_);
  }

 private:
  // Buffers, collectives and bindings of the attention program, minus its weight-gradient
  // all-reduce (the step synchronises every gradient itself).
  void copy_attention_storage() {
    RankProgram& t = out_.program;
    const RankProgram& src = a_.program;
    buffer_map_.assign(src.buffers.size(), -1);
    for (size_t b = 0; b < src.buffers.size(); ++b) {
      if (src.buffers[b].fields == fieldset::kWeightGrad) continue;
      buffer_map_[b] = int32_t(t.buffers.size());
      t.buffers.push_back(src.buffers[b]);
      out_.per_layer_buffer.push_back(true);
    }
    coll_map_.assign(src.collectives.size(), -1);
    for (size_t i = 0; i < src.ops.size(); ++i) {
      const Op& op = src.ops[i];
      if (a_.dropped[i] || op.coll < 0 || coll_map_[size_t(op.coll)] >= 0) continue;
      coll_map_[size_t(op.coll)] = int32_t(t.collectives.size());
      t.collectives.push_back(src.collectives[size_t(op.coll)]);
    }
    bound_.assign(src.buffers.size(), 0);
    for (const Binding& b : src.inputs) {
      if (buffer_map_[size_t(b.buf)] < 0) continue;
      bound_[size_t(b.buf)] |= field_bit(b.field);
      t.inputs.push_back(b);
      t.inputs.back().buf = buffer_map_[size_t(b.buf)];
    }
    for (const Binding& b : src.outputs) {
      if (buffer_map_[size_t(b.buf)] < 0) continue;
      t.outputs.push_back(b);
      t.outputs.back().buf = buffer_map_[size_t(b.buf)];
    }
  }

  // Copies attention ops [begin, end) into the template. Dependencies inside the range follow
  // `map` (filled here); dependencies before it follow `earlier` (the forward copy, for the
  // backward). Ops that read an input-bound buffer also wait for the projection producing it.
  // The first copied op of each stream also waits for `first_waits`.
  std::vector<int32_t> splice(uint32_t begin, uint32_t end, const std::vector<int32_t>* earlier,
                              const Producers& producers, uint8_t flags, std::optional<Phase> phase,
                              const std::vector<int32_t>& first_waits = {}) {
    const RankProgram& src = a_.program;
    std::vector<int32_t> map(src.ops.size(), -1);
    if (earlier) map = *earlier;
    std::vector<int32_t> deps;
    bool stream_started[kNumStreams] = {};
    for (uint32_t i = begin; i < end; ++i) {
      if (a_.dropped[i]) continue;
      Op op = src.ops[i];
      deps.clear();
      if (!std::exchange(stream_started[int(op.stream)], true))
        deps.insert(deps.end(), first_waits.begin(), first_waits.end());
      for (const int32_t* d = src.deps_begin(op); d != src.deps_end(op); ++d) {
        WF_ASSERT(map[size_t(*d)] >= 0,
                  fmt::format("attention op {} waits for op {}, which the step does not hold", i, *d));
        deps.push_back(map[size_t(*d)]);
      }
      for (int32_t& b : op.buf) {
        if (b < 0) continue;
        const FieldMask bound = bound_[size_t(b)];
        auto wait = [&](Field f, int32_t producer) {
          if ((bound & field_bit(f)) && producer >= 0) deps.push_back(producer);
        };
        wait(Field::Q, producers.q);
        wait(Field::K, producers.k);
        wait(Field::V, producers.v);
        wait(Field::dO, producers.dO);
        b = buffer_map_[size_t(b)];
      }
      if (op.coll >= 0) op.coll = coll_map_[size_t(op.coll)];
      op.flags |= flags;
      if (phase) op.phase = *phase;
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      map[i] = writer_.program().add(op, deps);
    }
    return map;
  }

  // A micro-batch's input: the embedding lookup on the first stage (read the rows of the table,
  // write the activations), the previous stage's activations on the others.
  int32_t prologue() {
    writer_.set_phase(Phase::Forward);
    if (stage_.first()) return writer_.pointwise(StepOp::Embedding, 2 * shape_.rows() * shape_.H * shape_.e);
    return stage_message(OpKind::Recv, -1);
  }

  // Stage messages carry the m / T sequence-parallel rows of width H; tags: 0 activations
  // (forward), 1 their gradients (backward), matched in order per pair of ranks.
  int32_t stage_message(OpKind kind, int direction) {
    const int peer = a_.program.rank + direction * stage_.stage_ranks;
    const bool forward = (kind == OpKind::Send) == (direction > 0);
    const int32_t flow_set = int32_t(attention_flow_sets_) + (forward ? 0 : 1);
    const std::vector<int32_t> deps = kind == OpKind::Send ? after(writer_.last_compute()) : std::vector<int32_t>{};
    return writer_.stage_message(kind, peer, forward ? 0 : 1, flow_set, shape_.rows() * shape_.H, deps);
  }

  // Interleaved 1F1B's messages between the last stage and the first (chunk k of the last stage
  // feeds chunk k + 1 of the first): activations (tag 0) from the last stage to the first, their
  // gradients (tag 1) back, in the flow sets of the other stage messages.
  int32_t wrap_message(OpKind kind, bool forward, const std::vector<int32_t>& deps) {
    const int span = (stage_.stages - 1) * stage_.stage_ranks;
    const int peer = a_.program.rank + (stage_.first() ? span : -span);
    const int32_t flow_set = int32_t(attention_flow_sets_) + (forward ? 0 : 1);
    return writer_.stage_message(kind, peer, forward ? 0 : 1, flow_set, shape_.rows() * shape_.H, deps);
  }

  // Non-last stages: the gradient of the stage's output, from the next stage.
  int32_t receive_gradient() {
    writer_.set_phase(Phase::Backward);
    return stage_.last() ? -1 : stage_message(OpKind::Recv, +1);
  }

  // Tensor parallel: gathers the m / T sequence-parallel rows of width H from the tensor group,
  // or reduce-scatters a row-parallel product back to them. Nothing without tensor parallelism.
  std::vector<int32_t> tensor_gather(std::vector<int32_t> after) {
    if (tensor_group_ < 0) return after;
    return {writer_.flat(OpKind::AllGather, tensor_group_, Field::Activation, shape_.m * shape_.H, StepOp::TensorGather,
                         after)};
  }
  int32_t tensor_scatter() {
    if (tensor_group_ < 0) return -1;
    const int32_t product = int32_t(writer_.size()) - 1;
    return writer_.flat(OpKind::ReduceScatter, tensor_group_, Field::Activation, shape_.m * shape_.H,
                        StepOp::TensorScatter, {product});
  }
  // The first op of the sequence-parallel part after a product: waits for its reduce-scatter.
  std::vector<int32_t> after(int32_t op) const { return op >= 0 ? std::vector<int32_t>{op} : std::vector<int32_t>{}; }

  // One layer's forward (or its recomputation inside the backward); returns the attention map.
  std::vector<int32_t> layer_forward(uint8_t flags = 0, std::optional<Phase> phase = std::nullopt, bool whole = true) {
    const Shape& s = shape_;
    writer_.set_flags(flags);
    const int32_t gathered = w_.zero_stage == 3 && !flags ? gather_parameters(layer_parameters(), {}) : -1;
    std::vector<int32_t> start = after(gathered);
    if (!flags && !stage_.first()) start.push_back(input_);              // the previous stage's activations
    if (!flags && input_variant_ >= 0) start.push_back(input_variant_);  // or the last stage's
    // Recomputation runs when the backward reaches the layer: after its output gradient arrived.
    if (flags && gradient_input_ >= 0) start.push_back(gradient_input_);
    writer_.pointwise(StepOp::Norm, 2 * s.rows() * s.H * s.e, start);
    std::vector<int32_t> input = tensor_gather(after(writer_.last_compute()));
    fp8_cast(s.m * s.H, input);
    fp8_cast((s.h() + 2 * s.hkv()) * s.H);
    Producers p;
    writer_.gemm(StepOp::QProj, GemmPart::Forward, s.m, s.h(), s.H, input);
    p.q = writer_.pointwise(StepOp::Rope, 2 * s.m * s.h() * s.e);
    writer_.gemm(StepOp::KProj, GemmPart::Forward, s.m, s.hkv(), s.H, input);
    p.k = writer_.pointwise(StepOp::Rope, 2 * s.m * s.hkv() * s.e);
    p.v = writer_.gemm(StepOp::VProj, GemmPart::Forward, s.m, s.hkv(), s.H, input);
    const uint32_t begin = writer_.size();
    // A recomputation overwrites the buffers of its layer's forward attention: it starts on each
    // stream once that forward has finished there (receives into its buffers included).
    std::vector<int32_t> map =
        splice(0, a_.split, nullptr, p, flags, phase, flags ? forward_attention_last_ : std::vector<int32_t>{});
    const std::vector<int32_t> last = writer_.last_per_stream(begin, writer_.size());
    if (!flags) forward_attention_last_ = last;
    fp8_cast(s.m * s.h(), last);
    fp8_cast(s.H * s.h());
    writer_.gemm(StepOp::OutProj, GemmPart::Forward, s.m, s.H, s.h(), last);
    writer_.pointwise(StepOp::Residual, 3 * s.rows() * s.H * s.e, after(tensor_scatter()));
    writer_.pointwise(StepOp::Norm, 2 * s.rows() * s.H * s.e);
    input = tensor_gather(after(writer_.last_compute()));
    fp8_cast(s.m * s.H, input);
    fp8_cast((s.mlp_matrices() - 1) * s.f() * s.H);
    if (s.gated) writer_.gemm(StepOp::MlpGate, GemmPart::Forward, s.m, s.f(), s.H, input);
    writer_.gemm(StepOp::MlpUp, GemmPart::Forward, s.m, s.f(), s.H, input);
    writer_.pointwise(StepOp::Activation, (s.gated ? 3 : 2) * s.m * s.f() * s.e);
    if (whole) {
      fp8_cast(s.m * s.f());
      fp8_cast(s.H * s.f());
      writer_.gemm(StepOp::MlpDown, GemmPart::Forward, s.m, s.H, s.f());
      writer_.pointwise(StepOp::Residual, 3 * s.rows() * s.H * s.e, after(tensor_scatter()));
    }
    fp8_scale(whole ? 8 : 6);  // the inputs and weights of the layer's 4 (3) linear layers
    writer_.set_flags(0);
    return map;
  }

  // The last stage's head: final norm, LM head, loss and their backward. The others send their
  // activations on to the next stage.
  void head() {
    const Shape& s = shape_;
    writer_.set_phase(Phase::Forward);
    if (!stage_.last()) {
      stage_message(OpKind::Send, +1);
      return;
    }
    writer_.pointwise(StepOp::Norm, 2 * s.rows() * s.H * s.e);
    writer_.gemm(StepOp::LmHead, GemmPart::Forward, s.m, s.v(), s.H, tensor_gather(after(writer_.last_compute())));
    // Softmax cross-entropy over the rank's vocabulary shard, fused with its backward: read the
    // logits, write their fp32 gradient.
    writer_.pointwise(StepOp::Loss, s.m * s.v() * (s.e + 4));
    writer_.set_phase(Phase::Backward);
    writer_.gemm(StepOp::LmHead, GemmPart::DataGrad, s.m, s.H, s.v());
    const int32_t wgrad = writer_.gemm(StepOp::LmHead, GemmPart::WeightGrad, s.H, s.v(), s.m);
    // The final norm's gain gradient travels in the head's buckets too: they wait for it.
    const int32_t norm = writer_.pointwise(StepOp::Norm, 3 * s.rows() * s.H * s.e, after(tensor_scatter()));
    sync_gradients(s.v() * s.H + s.H, {wgrad, norm});
  }

  void recompute() {
    const Shape& s = shape_;
    if (w_.checkpointing == Checkpointing::Full) {
      // From the layer's input: everything up to the MLP activation, attention included.
      recompute_map_ = layer_forward(kOpRecompute, Phase::Backward, false);
      return;
    }
    if (w_.checkpointing != Checkpointing::Selective) return;
    writer_.set_flags(kOpRecompute);
    writer_.pointwise(StepOp::Norm, 2 * s.rows() * s.H * s.e, after(gradient_input_));
    writer_.pointwise(StepOp::Rope, 2 * s.m * (s.h() + s.hkv()) * s.e);
    writer_.pointwise(StepOp::Norm, 2 * s.rows() * s.H * s.e);
    writer_.pointwise(StepOp::Activation, (s.gated ? 3 : 2) * s.m * s.f() * s.e);
    writer_.set_flags(0);
  }

  void layer_backward() {
    const Shape& s = shape_;
    writer_.set_phase(Phase::Backward);
    if (w_.zero_stage == 3) gather_parameters(layer_parameters(), {});
    recompute();
    // The layer's output gradient: the next stage's (first layer backward of a micro-batch on
    // other stages than the last) or the op before (stream order gives the rest).
    std::vector<int32_t> start = after(writer_.last_compute());
    if (gradient_input_ >= 0) start.push_back(gradient_input_);
    std::vector<int32_t> grad = tensor_gather(start);
    fp8_cast(s.m * s.H, grad);
    writer_.gemm(StepOp::MlpDown, GemmPart::DataGrad, s.m, s.f(), s.H, grad);
    writer_.gemm(StepOp::MlpDown, GemmPart::WeightGrad, s.f(), s.H, s.m, grad);
    writer_.pointwise(StepOp::Activation, (s.gated ? 5 : 3) * s.m * s.f() * s.e);
    fp8_cast((s.mlp_matrices() - 1) * s.m * s.f());
    if (s.gated) {
      writer_.gemm(StepOp::MlpGate, GemmPart::DataGrad, s.m, s.H, s.f());
      writer_.gemm(StepOp::MlpGate, GemmPart::WeightGrad, s.H, s.f(), s.m);
    }
    writer_.gemm(StepOp::MlpUp, GemmPart::DataGrad, s.m, s.H, s.f());
    const int32_t mlp_wgrad = writer_.gemm(StepOp::MlpUp, GemmPart::WeightGrad, s.H, s.f(), s.m);
    const int32_t mlp_norm = writer_.pointwise(StepOp::Norm, 3 * s.rows() * s.H * s.e, after(tensor_scatter()));
    writer_.pointwise(StepOp::Residual, 3 * s.rows() * s.H * s.e);
    grad = tensor_gather(after(writer_.last_compute()));
    fp8_cast(s.m * s.H, grad);
    Producers p;
    p.dO = writer_.gemm(StepOp::OutProj, GemmPart::DataGrad, s.m, s.h(), s.H, grad);
    writer_.gemm(StepOp::OutProj, GemmPart::WeightGrad, s.h(), s.H, s.m, grad);
    const uint32_t begin = writer_.size();
    const std::vector<int32_t>& forward = recompute_map_.empty() ? forward_map_ : recompute_map_;
    splice(a_.split, uint32_t(a_.program.ops.size()), &forward, p, 0, std::nullopt);
    writer_.pointwise(StepOp::Rope, 2 * s.m * (s.h() + s.hkv()) * s.e, writer_.last_per_stream(begin, writer_.size()));
    fp8_cast(s.m * (s.h() + 2 * s.hkv()));
    writer_.gemm(StepOp::QProj, GemmPart::WeightGrad, s.H, s.h(), s.m);
    writer_.gemm(StepOp::KProj, GemmPart::WeightGrad, s.H, s.hkv(), s.m);
    const int32_t attn_wgrad = writer_.gemm(StepOp::VProj, GemmPart::WeightGrad, s.H, s.hkv(), s.m);
    writer_.gemm(StepOp::QProj, GemmPart::DataGrad, s.m, s.H, s.h());
    writer_.gemm(StepOp::KProj, GemmPart::DataGrad, s.m, s.H, s.hkv());
    writer_.gemm(StepOp::VProj, GemmPart::DataGrad, s.m, s.H, s.hkv());
    const int32_t attn_norm = writer_.pointwise(StepOp::Norm, 3 * s.rows() * s.H * s.e, after(tensor_scatter()));
    writer_.pointwise(StepOp::Residual, 3 * s.rows() * s.H * s.e);
    fp8_scale(4);  // the output gradients of the layer's 4 linear layers
    // Gradient buckets run on the sync stream (sync_stream()), where they overlap the backward of
    // the layers before (docs/step.md). Each bucket also holds its norm's gain gradient, written
    // by the norm's backward after the weight gradients: it waits for both.
    sync_gradients(s.mlp_matrices() * s.H * s.f() + s.H, {mlp_wgrad, mlp_norm});
    sync_gradients(w_.attention_parameters_per_layer() / s.T + s.H, {attn_wgrad, attn_norm});
  }

  // The end of a micro-batch's backward: the embedding's gradient on the first stage, the
  // gradient of the stage's input sent back on the others.
  void tail() {
    const Shape& s = shape_;
    writer_.set_phase(Phase::Backward);
    if (!stage_.first()) {
      stage_message(OpKind::Send, -1);
      return;
    }
    const int32_t embedding = writer_.pointwise(StepOp::Embedding, 3 * s.rows() * s.H * s.e);
    sync_gradients(s.v() * s.H, {embedding});
  }

  // Once per step: the optimizer over the stage's parameters and the ZeRO 1/2 parameter gathers.
  void epilogue() {
    const Shape& s = shape_;
    writer_.set_phase(Phase::Backward);
    // The optimizer waits for every gradient: after the last op of every stream.
    const int64_t params = w_.stage_parameter_count(stage_.stage, stage_.stages) / s.T;
    const int64_t shard = w_.zero_stage >= 1 ? params / world_ : params;
    const int32_t step = writer_.pointwise(StepOp::Optimizer, kAdamBytesPerParameter * shard,
                                           writer_.last_per_stream(0, writer_.size()));
    if (w_.zero_stage == 1 || w_.zero_stage == 2) gather_parameters(params, {step});
  }

  // fp8 GEMMs (docs/step.md "fp8 GEMMs"): Transformer Engine casts each GEMM operand of the
  // dtype to fp8 once per use, writing the fp8 tensor and its fp8 transpose (Hopper's fp8 GEMMs
  // take only the TN layout, so the other product of the backward reads the transpose): e bytes
  // read and 2 written per element.
  void fp8_cast(int64_t elements, const std::vector<int32_t>& deps = {}) {
    if (w_.fp8_linear) writer_.pointwise(StepOp::Fp8Cast, elements * (shape_.e + 2), deps);
  }
  // Delayed scaling's bookkeeping of `tensors` fp8 tensors: each one's amax history (kAmaxHistory
  // fp32 values) read and written rolled, and its scale and inverse scale read and written.
  void fp8_scale(int64_t tensors) {
    if (w_.fp8_linear) writer_.pointwise(StepOp::Fp8Scale, tensors * (2 * 4 * kAmaxHistory + 4 * 4));
  }
  // Transformer Engine's DelayedScaling amax_history_len default (NeMo's fp8_amax_history_len too).
  static constexpr int64_t kAmaxHistory = 1024;

  // Reads fp32 master weights, gradients and both moments, writes them back and the dtype copy.
  static constexpr int64_t kAdamBytesPerParameter = 4 * 4 + 3 * 4 + 2;

  // The layer's parameters this rank holds (its tensor shard of every matrix, the norms whole).
  int64_t layer_parameters() const {
    return w_.attention_parameters_per_layer() / shape_.T + shape_.mlp_matrices() * shape_.H * shape_.f() +
           2 * shape_.H;
  }

  // Cuts `elements` into buckets of about grad_bucket_MiB of `elem_bytes` values (kMaxBuckets at most).
  std::vector<int64_t> buckets(int64_t elements, int64_t elem_bytes) const {
    const int64_t bucket_bytes = int64_t(w_.grad_bucket_MiB) << 20;
    const int64_t count =
        std::clamp<int64_t>((elements * elem_bytes + bucket_bytes - 1) / bucket_bytes, 1, kMaxBuckets);
    std::vector<int64_t> out;
    for (int64_t b = 0; b < count; ++b)
      out.push_back(elements * (b + 1) / count - elements * b / count);
    return out;
  }

  // Gradients of `elements` parameters, ready after `after`: all-reduced (ZeRO 0) or
  // reduce-scattered (1 to 3: a rank updates only its shard, as DeepSpeed's ZeRO-1 and Megatron's
  // distributed optimizer reduce-scatter) over the strategy's gradient groups in order, bucket by
  // bucket.
  void sync_gradients(int64_t elements, const std::vector<int32_t>& after) {
    if (a_.grad_groups.empty()) return;
    const bool scatter = w_.zero_stage >= 1;  // ZeRO 1 keeps only its shard of the reduced gradients
    for (int64_t bucket : buckets(elements, bytes_of(w_.grad_comm_dtype))) {
      int64_t e = bucket;
      std::vector<int32_t> deps = after;  // each group's reduction reads the one before (streams may differ)
      for (int32_t group : a_.grad_groups) {
        deps = {writer_.flat(scatter ? OpKind::ReduceScatter : OpKind::AllReduce, group, Field::WeightGrad, e,
                             StepOp::GradSync, deps, sync_stream())};
        if (scatter) e = std::max<int64_t>(1, e / group_size(group));
      }
    }
  }

  // Gathers `elements` parameters sharded over the gradient groups (the reverse of the
  // reduce-scatter); returns the last gather.
  int32_t gather_parameters(int64_t elements, const std::vector<int32_t>& after) {
    int32_t last = -1;
    if (a_.grad_groups.empty()) return last;
    for (int64_t bucket : buckets(elements, shape_.e)) {
      std::vector<int64_t> sizes;  // elements gathered over each group, first group first
      int64_t e = bucket;
      for (int32_t group : a_.grad_groups) {
        sizes.push_back(e);
        e = std::max<int64_t>(1, e / group_size(group));
      }
      std::vector<int32_t> deps = after;  // each group's gather reads the one before (streams may differ)
      for (size_t g = a_.grad_groups.size(); g-- > 0;)
        deps = {last = writer_.flat(OpKind::AllGather, a_.grad_groups[g], Field::Weight, sizes[g], StepOp::ParamGather,
                                    deps, sync_stream())};
    }
    return last;
  }

  // The stream of the gradient synchronisation: its own (Sync), as frameworks run it on a
  // communicator of its own; the collective stream where the strategy's attention collectives use
  // one of the gradient groups too (LSS's sequence group), since one group's calls run in one
  // order. All of a rank's groups then stay there: the buckets' reductions share one flat gradient
  // vector, which only one stream orders without a dependency from every bucket to the last.
  Stream sync_stream() const {
    for (int32_t group : a_.grad_groups)
      if (std::find(a_.busy_groups.begin(), a_.busy_groups.end(), group) != a_.busy_groups.end())
        return Stream::Collective;
    return Stream::Sync;
  }

  // ZeRO 3's gathers of the layer written from op `begin` on (its first ops) start once the layer
  // before starts computing (FSDP's and DeepSpeed's prefetch of the next layer while one computes;
  // without it every layer's weights would be gathered at the start): its first gather waits for
  // the previous copy of its first compute op (the norm, or in the backward the recomputation or
  // the first product).
  void prefetch_one_layer(uint32_t begin) {
    const RankProgram& p = writer_.program();
    if (begin >= p.ops.size() || p.ops[begin].label != StepOp::ParamGather) return;
    for (uint32_t i = begin; i < p.ops.size(); ++i)
      if (p.ops[i].stream == Stream::Compute) {
        out_.previous_layer_deps.push_back({begin, i});
        return;
      }
  }

  int group_size(int32_t group) const { return int(plan_.groups[size_t(group)].ranks.size()); }

  const Plan& plan_;
  const Workload& w_;
  Attention a_;
  StepTemplate out_;
  TemplateWriter writer_;
  Shape shape_;
  detail::PipelinePosition stage_;
  size_t attention_flow_sets_ = 0;  // the pipeline's flow sets come after the attention's
  int32_t input_ = -1;              // the micro-batch's input: embedding, or the stage receive
  int32_t input_variant_ = -1;      // interleaved, first stage: the later chunks' receive
  bool wraps_ = false;              // virtual stages: messages between the last stage and the first
  int32_t gradient_input_ = -1;     // other stages than the last: the output gradient's receive
  int world_ = 1;                   // ranks a gradient is averaged over (data x sequence parallel)
  int32_t tensor_group_ = -1;       // this rank's tensor group, -1 without tensor parallelism
  std::vector<int32_t> buffer_map_, coll_map_;
  std::vector<FieldMask> bound_;  // by attention buffer: fields bound as inputs
  std::vector<int32_t> forward_map_, recompute_map_;
  std::vector<int32_t> forward_attention_last_;  // the layer forward's last attention op of each stream
};

}  // namespace

bool in_layer_section(const StepSections& sections, uint32_t op) {
  return (op >= sections.prologue_end && op < sections.forward_end) ||
         (op >= sections.gradient_in_end && op < sections.backward_end);
}

bool in_epilogue(const StepSections& sections, uint32_t op) {
  return op >= sections.tail_end;
}

namespace {

// The plan whose attention programs the step splices: one micro-batch of the plan's workload.
Plan micro_plan(const Plan& plan) {
  const Feasibility feasible = check_feasible(plan.strategy, plan.params, plan.workload, plan.num_ranks());
  if (!feasible.ok)
    throw InputError(fmt::format("plan for strategy {}: {}", to_string(plan.strategy), feasible.reason));
  Plan micro = plan;
  micro.workload = detail::micro_workload(plan.workload);
  micro.params.virtual_stages = 1;  // the attention of one micro-batch is the same in every chunk
  return micro;
}

// Stage-to-stage flows, all at once: every rank to its successor (forward) or predecessor.
std::vector<FlowSet> pipeline_flow_sets(const Plan& plan) {
  const int Pp = plan.params.pipeline_parallel, W = plan.num_ranks() / Pp;
  FlowSet forward{"pipeline-forward", {}}, backward{"pipeline-backward", {}};
  for (int g = 0; g + W < plan.num_ranks(); ++g) {
    forward.flows.emplace_back(g, g + W);
    backward.flows.emplace_back(g + W, g);
  }
  if (plan.params.virtual_stages > 1)  // interleaved: the last stage feeds the first
    for (int r = 0; r < W; ++r) {
      forward.flows.emplace_back((Pp - 1) * W + r, r);
      backward.flows.emplace_back(r, (Pp - 1) * W + r);
    }
  return {forward, backward};
}

}  // namespace

struct StepBuilder::Impl {
  Plan plan;
  ScheduleBuilder attention;  // of one micro-batch
  size_t attention_flow_sets = 0;
  explicit Impl(const Plan& p) : plan(p), attention(micro_plan(p)) {
    attention_flow_sets = attention.flow_sets().size();
  }
};

StepBuilder::StepBuilder(const Plan& plan) : impl_(std::make_unique<Impl>(plan)) {}
StepBuilder::~StepBuilder() = default;
StepBuilder::StepBuilder(StepBuilder&&) noexcept = default;

int StepBuilder::num_ranks() const {
  return impl_->attention.num_ranks();
}

ScheduleDims StepBuilder::dims() const {
  return impl_->attention.dims();
}

std::vector<FlowSet> StepBuilder::flow_sets() const {
  std::vector<FlowSet> sets = impl_->attention.flow_sets();
  if (impl_->plan.params.pipeline_parallel > 1)
    for (FlowSet& set : pipeline_flow_sets(impl_->plan))
      sets.push_back(std::move(set));
  return sets;
}

StepTemplate StepBuilder::build_template(int rank, TokenSetPool& pool) const {
  return build_template(build_attention(rank, pool), pool);
}

RankProgram StepBuilder::build_attention(int rank, TokenSetPool& pool, BuildMode mode) const {
  return impl_->attention.build_rank(rank, pool, mode);
}

bool StepBuilder::renames_attention(int a, int b) const {
  return impl_->attention.renames(a, b);
}

RankProgram StepBuilder::rename_attention(int rank, RankProgram sibling) const {
  return impl_->attention.rename(rank, std::move(sibling));
}

StepTemplate StepBuilder::build_template(RankProgram attention, TokenSetPool& pool) const {
  const int rank = attention.rank;
  Attention parts =
      take_apart(std::move(attention), rank, pool, impl_->plan.workload.heads / impl_->plan.params.tensor_parallel);
  return StepTemplateBuilder(impl_->plan, std::move(parts), pool, impl_->attention_flow_sets).build();
}

Schedule StepBuilder::build(const std::vector<int>& ranks, int layers) const {
  const int Pp = impl_->plan.params.pipeline_parallel, chunks = Pp * impl_->plan.params.virtual_stages;
  if (layers % chunks != 0)
    throw InputError(
        fmt::format("{} layers cannot be replayed over {} pipeline stages{}: a multiple of {} is needed", layers, Pp,
                    chunks > Pp ? fmt::format(" of {} virtual stages", chunks / Pp) : std::string(), chunks));
  Schedule schedule;
  schedule.dims = dims();
  schedule.flow_sets = flow_sets();
  std::vector<int> list = ranks;
  if (list.empty())
    for (int r = 0; r < num_ranks(); ++r)
      list.push_back(r);
  schedule.ranks.reserve(list.size());
  for (int r : list)
    schedule.ranks.push_back(unroll(build_template(r, schedule.tokens), layers / Pp));
  return schedule;
}

Schedule build_scope_schedule(const Plan& plan, int layers) {
  if (plan.scope == Scope::Attention) return ScheduleBuilder(plan).build();
  return StepBuilder(plan).build({}, layers);
}

}  // namespace wallfacer
