// The trainer's model on one rank: embedding, layers (with the plan's attention through a
// RankSession per layer), head and loss, forward and backward, and the step around them.
#include <wallfacer/train/trainer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/layers.hpp>
#include "trainer_impl.hpp"

namespace wallfacer::train {

using runtime::Backend;
using runtime::RankSession;

namespace {

const RankProgram& program_of(const Schedule& schedule, int rank) {
  for (const RankProgram& p : schedule.ranks)
    if (p.rank == rank) return p;
  throw ScheduleError(fmt::format("the attention schedule has no program for rank {}", rank));
}

std::vector<int64_t> token_positions(const TokenSet& set) {
  std::vector<int64_t> out;
  for (const TokenRange& r : set)
    for (int64_t t = r.begin; t < r.end; ++t)
      out.push_back(t);
  return out;
}

}  // namespace

void check_trainable(const Plan& plan) {
  if (plan.params.tensor_parallel != 1 || plan.params.pipeline_parallel != 1)
    throw InputError(
        fmt::format("the trainer runs data x sequence parallel plans; this plan has tensor_parallel {} "
                    "and pipeline_parallel {} (plan it with --tp 1 --pp 1)",
                    plan.params.tensor_parallel, plan.params.pipeline_parallel));
  if (plan.workload.zero_stage > 2)
    throw InputError(
        fmt::format("the trainer supports ZeRO stages 0 to 2; the plan asks for {}", plan.workload.zero_stage));
  if (plan.workload.microbatches != 1)
    throw InputError(
        fmt::format("the trainer runs one micro-batch per step; the plan has {}", plan.workload.microbatches));
}

namespace {

const Plan& trainable(const Plan& plan) {
  check_trainable(plan);
  return plan;
}

}  // namespace

OwnTokens own_tokens(const Schedule& schedule, const RankProgram& program) {
  OwnTokens own;
  own.batch_begin = program.batch_begin;
  own.batch_end = program.batch_end;
  own.row_of.assign(size_t(schedule.dims.seq), -1);
  for (const Binding& b : program.inputs) {
    if (b.field != Field::Q) continue;
    for (int64_t t : token_positions(schedule.tokens.get(b.tokens))) {
      if (own.row_of[size_t(t)] >= 0) continue;
      own.row_of[size_t(t)] = int32_t(own.positions.size());
      own.positions.push_back(t);
    }
  }
  auto check = [&](const std::vector<Binding>& bindings, const char* what) {
    for (const Binding& b : bindings) {
      if (b.field == Field::WeightGrad) continue;
      for (int64_t t : token_positions(schedule.tokens.get(b.tokens)))
        if (own.row_of[size_t(t)] < 0)
          throw ScheduleError(
              fmt::format("rank {}: {} {} binds token {}, which its Q does not: the rest of the layer "
                          "needs every field on the rank's own tokens",
                          program.rank, what, to_string(b.field), t));
    }
  };
  check(program.inputs, "input");
  check(program.outputs, "output");
  return own;
}

Schedule attention_schedule(const Plan& plan) {
  Plan attention = plan;
  attention.scope = Scope::Attention;
  return build_schedule(attention);
}

std::vector<int> gradient_groups(const Plan& plan, int rank) {
  std::vector<int> out;
  auto member = [&](const CommGroup& g) { return std::find(g.ranks.begin(), g.ranks.end(), rank) != g.ranks.end(); };
  if (plan.num_ranks() == 1) return out;
  if (plan.strategy == StrategyKind::Lss) {
    for (GroupKind kind : {GroupKind::Sequence, GroupKind::Data})
      for (size_t i = 0; i < plan.groups.size(); ++i)
        if (plan.groups[i].kind == kind && member(plan.groups[i])) out.push_back(int(i));
    return out;
  }
  for (size_t i = 0; i < plan.groups.size(); ++i)
    if (plan.groups[i].kind == GroupKind::World && member(plan.groups[i])) return {int(i)};
  throw ScheduleError(fmt::format("the plan has no world group holding rank {} to average gradients over", rank));
}

template <typename T>
Trainer<T>::Impl::Impl(const Plan& plan_, const Schedule& schedule_, Backend& backend_, const TrainerOptions& options_)
    : plan(trainable(plan_)),
      schedule(schedule_),
      program(program_of(schedule_, backend_.rank())),
      backend(backend_),
      options(options_),
      shape(model_shape(plan_.workload, options_.positions)),
      layout(shape),
      own(own_tokens(schedule_, program)),
      groups(gradient_groups(plan_, backend_.rank())) {
  if (backend.size() != plan.num_ranks())
    throw InputError(fmt::format("the plan has {} ranks but {} were launched", plan.num_ranks(), backend.size()));
  if (shape.vocab < 1 || shape.vocab > (int64_t(1) << 30)) throw InputError("the workload's vocab is out of range");
  const std::vector<double> init = initial_parameters(layout, options.seed);
  params.assign(init.begin(), init.end());
  decay.assign(size_t(layout.size()), 0);
  for (const ParameterTensor& t : layout.tensors())
    if (t.decay) std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.numel(), 1);
  backend.set_groups(plan.groups);
  setup_shards();
}

template <typename T>
void Trainer<T>::Impl::embed(const std::vector<int32_t>& inputs, std::vector<T>& x) const {
  const int64_t rows = own.rows(), h = shape.hidden, n = int64_t(own.positions.size());
  x.assign(size_t(rows * h), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const T* e = params.data() + layout.embed() + int64_t(inputs[size_t(r)]) * h;
    std::copy(e, e + h, x.data() + r * h);
    if (layout.pos_embed() >= 0) {
      const T* p = params.data() + layout.pos_embed() + own.positions[size_t(r % n)] * h;
      for (int64_t j = 0; j < h; ++j)
        x[size_t(r * h + j)] += p[j];
    }
  }
}

template <typename T>
void Trainer<T>::Impl::embed_backward(const std::vector<int32_t>& inputs, const std::vector<T>& dx) {
  const int64_t rows = own.rows(), h = shape.hidden, n = int64_t(own.positions.size());
  for (int64_t r = 0; r < rows; ++r) {
    T* e = grads.data() + layout.embed() + int64_t(inputs[size_t(r)]) * h;
    T* p = layout.pos_embed() >= 0 ? grads.data() + layout.pos_embed() + own.positions[size_t(r % n)] * h : nullptr;
    for (int64_t j = 0; j < h; ++j) {
      e[j] += dx[size_t(r * h + j)];
      if (p) p[j] += dx[size_t(r * h + j)];
    }
  }
}

template <typename T>
void Trainer<T>::Impl::attention(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
                                 LayerCache<T>& cache) {
  const int d = shape.head_dim;
  const int64_t qw = shape.q_width(), kw = shape.kv_width();
  cache.session =
      std::make_unique<RankSession>(schedule, program, plan, backend, runtime::elem_type_of<T>(), options.executor);
  cache.o.assign(size_t(own.rows() * qw), T(0));
  int64_t delivered = 0;
  cache.session->forward(
      [&](Field f, int b, int64_t t, int h, int e) -> double {
        const int64_t row = own.row(b, t);
        if (f == Field::Q) return q[size_t(row * qw + h * d + e)];
        return (f == Field::K ? k : v)[size_t(row * kw + h * d + e)];
      },
      [&](Field f, int b, int64_t t, int h, int e, double value) {
        if (f != Field::O) return;
        cache.o[size_t(own.row(b, t) * qw + h * d + e)] = T(value);
        ++delivered;
      });
  if (delivered != own.rows() * qw)
    throw ScheduleError(fmt::format("rank {}: the attention returned {} O elements for {} own rows of width {}",
                                    program.rank, delivered, own.rows(), qw));
}

template <typename T>
void Trainer<T>::Impl::attention_backward(LayerCache<T>& cache, const std::vector<T>& d_o, std::vector<T>& dq,
                                          std::vector<T>& dk, std::vector<T>& dv) {
  const int d = shape.head_dim;
  const int64_t qw = shape.q_width(), kw = shape.kv_width();
  dq.assign(size_t(own.rows() * qw), T(0));
  dk.assign(size_t(own.rows() * kw), T(0));
  dv.assign(size_t(own.rows() * kw), T(0));
  int64_t delivered = 0;
  cache.session->backward(
      [&](Field, int b, int64_t t, int h, int e) -> double { return d_o[size_t(own.row(b, t) * qw + h * d + e)]; },
      [&](Field f, int b, int64_t t, int h, int e, double value) {
        const int64_t row = own.row(b, t);
        if (f == Field::dQ)
          dq[size_t(row * qw + h * d + e)] = T(value);
        else
          (f == Field::dK ? dk : dv)[size_t(row * kw + h * d + e)] = T(value);
        ++delivered;
      });
  if (delivered != own.rows() * (qw + 2 * kw))
    throw ScheduleError(fmt::format("rank {}: the attention backward returned {} of {} gradient elements", program.rank,
                                    delivered, own.rows() * (qw + 2 * kw)));
  cache.session.reset();
}

template <typename T>
void Trainer<T>::Impl::layer_forward(int l, std::vector<T>& x, LayerCache<T>& cache) {
  const LayerOffsets& o = layout.layer(l);
  const T* w = params.data();
  const int64_t rows = own.rows(), h = shape.hidden, qw = shape.q_width(), kw = shape.kv_width();
  cache.x = x;
  cache.a.resize(size_t(rows * h));
  cache.rstd1.resize(size_t(rows));
  rms_norm_forward(x.data(), w + o.norm1, cache.a.data(), cache.rstd1.data(), rows, h);
  std::vector<T> q(size_t(rows * qw)), k(size_t(rows * kw)), v(size_t(rows * kw));
  matmul(cache.a.data(), false, w + o.wq, false, q.data(), rows, qw, h, false);
  matmul(cache.a.data(), false, w + o.wk, false, k.data(), rows, kw, h, false);
  matmul(cache.a.data(), false, w + o.wv, false, v.data(), rows, kw, h, false);
  if (shape.positions == Positions::Rotary) {
    const int64_t n = int64_t(own.positions.size());
    rotary(q.data(), own.positions, n, rows, shape.heads, shape.head_dim, false);
    rotary(k.data(), own.positions, n, rows, shape.kv_heads, shape.head_dim, false);
  }
  attention(q, k, v, cache);
  cache.x1 = x;
  matmul(cache.o.data(), false, w + o.wo, false, cache.x1.data(), rows, h, qw, true);
  recompute(l, cache);
  x = cache.x1;
  matmul(cache.act.data(), false, w + o.w_down, false, x.data(), rows, h, shape.ffn, true);
  // What the backward finds again by recomputation (docs/step.md, "Recomputation").
  const Checkpointing mode = plan.workload.checkpointing;
  if (mode != Checkpointing::None) {
    cache.a.clear();
    cache.c.clear();
    cache.act.clear();
  }
  if (mode == Checkpointing::Full) {
    cache.x1.clear();
    cache.gate.clear();
    cache.up.clear();
  }
}

template <typename T>
void Trainer<T>::Impl::recompute(int l, LayerCache<T>& cache) const {
  const LayerOffsets& o = layout.layer(l);
  const T* w = params.data();
  const int64_t rows = own.rows(), h = shape.hidden, f = shape.ffn;
  if (cache.a.empty()) {
    cache.a.resize(size_t(rows * h));
    rms_norm_forward(cache.x.data(), w + o.norm1, cache.a.data(), cache.rstd1.data(), rows, h);
  }
  if (cache.x1.empty()) {
    cache.x1 = cache.x;
    matmul(cache.o.data(), false, w + o.wo, false, cache.x1.data(), rows, h, shape.q_width(), true);
  }
  if (cache.c.empty()) {
    cache.c.resize(size_t(rows * h));
    cache.rstd2.resize(size_t(rows));
    rms_norm_forward(cache.x1.data(), w + o.norm2, cache.c.data(), cache.rstd2.data(), rows, h);
  }
  if (cache.up.empty()) {
    cache.up.resize(size_t(rows * f));
    matmul(cache.c.data(), false, w + o.w_up, false, cache.up.data(), rows, f, h, false);
    if (shape.gated_ffn) {
      cache.gate.resize(size_t(rows * f));
      matmul(cache.c.data(), false, w + o.w_gate, false, cache.gate.data(), rows, f, h, false);
    }
  }
  if (cache.act.empty()) {
    cache.act.resize(size_t(rows * f));
    if (shape.gated_ffn)
      swiglu_forward(cache.gate.data(), cache.up.data(), cache.act.data(), rows * f);
    else
      gelu_forward(cache.up.data(), cache.act.data(), rows * f);
  }
}

template <typename T>
void Trainer<T>::Impl::layer_backward(int l, std::vector<T>& dx, LayerCache<T>& cache) {
  recompute(l, cache);
  const LayerOffsets& o = layout.layer(l);
  const T* w = params.data();
  T* g = grads.data();
  const int64_t rows = own.rows(), h = shape.hidden, f = shape.ffn, qw = shape.q_width(), kw = shape.kv_width();
  // MLP
  std::vector<T> d_act(size_t(rows * f)), d_up(size_t(rows * f)), dc(size_t(rows * h));
  matmul(dx.data(), false, w + o.w_down, true, d_act.data(), rows, f, h, false);
  matmul(cache.act.data(), true, dx.data(), false, g + o.w_down, f, h, rows, true);
  if (shape.gated_ffn) {
    std::vector<T> d_gate(size_t(rows * f));
    swiglu_backward(cache.gate.data(), cache.up.data(), d_act.data(), d_gate.data(), d_up.data(), rows * f);
    matmul(d_gate.data(), false, w + o.w_gate, true, dc.data(), rows, h, f, false);
    matmul(cache.c.data(), true, d_gate.data(), false, g + o.w_gate, h, f, rows, true);
    matmul(d_up.data(), false, w + o.w_up, true, dc.data(), rows, h, f, true);
  } else {
    gelu_backward(cache.up.data(), d_act.data(), d_up.data(), rows * f);
    matmul(d_up.data(), false, w + o.w_up, true, dc.data(), rows, h, f, false);
  }
  matmul(cache.c.data(), true, d_up.data(), false, g + o.w_up, h, f, rows, true);
  rms_norm_backward(cache.x1.data(), w + o.norm2, cache.rstd2.data(), dc.data(), dx.data(), g + o.norm2, rows, h);
  // attention
  std::vector<T> d_o(size_t(rows * qw)), dq, dk, dv;
  matmul(dx.data(), false, w + o.wo, true, d_o.data(), rows, qw, h, false);
  matmul(cache.o.data(), true, dx.data(), false, g + o.wo, qw, h, rows, true);
  attention_backward(cache, d_o, dq, dk, dv);
  if (shape.positions == Positions::Rotary) {
    const int64_t n = int64_t(own.positions.size());
    rotary(dq.data(), own.positions, n, rows, shape.heads, shape.head_dim, true);
    rotary(dk.data(), own.positions, n, rows, shape.kv_heads, shape.head_dim, true);
  }
  std::vector<T> da(size_t(rows * h));
  matmul(dq.data(), false, w + o.wq, true, da.data(), rows, h, qw, false);
  matmul(dk.data(), false, w + o.wk, true, da.data(), rows, h, kw, true);
  matmul(dv.data(), false, w + o.wv, true, da.data(), rows, h, kw, true);
  matmul(cache.a.data(), true, dq.data(), false, g + o.wq, h, qw, rows, true);
  matmul(cache.a.data(), true, dk.data(), false, g + o.wk, h, kw, rows, true);
  matmul(cache.a.data(), true, dv.data(), false, g + o.wv, h, kw, rows, true);
  rms_norm_backward(cache.x.data(), w + o.norm1, cache.rstd1.data(), da.data(), dx.data(), g + o.norm1, rows, h);
  cache = LayerCache<T>{};
}

template <typename T>
double Trainer<T>::Impl::head(const std::vector<T>& x, const std::vector<int32_t>& targets,
                              const std::vector<uint8_t>& mask, double scale, std::vector<T>& dx, int64_t& correct) {
  const int64_t rows = own.rows(), h = shape.hidden, v = shape.vocab;
  const T* w = params.data();
  T* g = grads.data();
  std::vector<T> f(size_t(rows * h)), rstd(static_cast<size_t>(rows)), logits(size_t(rows * v)),
      dlogits(size_t(rows * v));
  rms_norm_forward(x.data(), w + layout.final_norm(), f.data(), rstd.data(), rows, h);
  matmul(f.data(), false, w + layout.lm_head(), false, logits.data(), rows, v, h, false);
  const double loss =
      cross_entropy(logits.data(), targets.data(), mask.data(), scale, dlogits.data(), rows, v, correct);
  matmul(f.data(), true, dlogits.data(), false, g + layout.lm_head(), h, v, rows, true);
  std::vector<T> df(size_t(rows * h));
  matmul(dlogits.data(), false, w + layout.lm_head(), true, df.data(), rows, h, v, false);
  dx.assign(size_t(rows * h), T(0));
  rms_norm_backward(x.data(), w + layout.final_norm(), rstd.data(), df.data(), dx.data(), g + layout.final_norm(), rows,
                    h);
  return loss;
}

template <typename T>
double Trainer<T>::Impl::local_gradients(int64_t step, const BatchSource& batch) {
  const int64_t n = int64_t(own.positions.size());
  std::vector<int32_t> inputs(size_t(own.rows())), targets(size_t(own.rows()));
  std::vector<uint8_t> mask(size_t(own.rows()));
  int64_t counted = 0;
  for (int b = 0; b < plan.workload.batch; ++b) {
    const TrainingSample s = batch(step, b);
    if (int64_t(s.tokens.size()) != shape.seq + 1 || int64_t(s.loss_mask.size()) != shape.seq)
      throw InputError(fmt::format("sample {} of step {} has {} tokens and {} mask entries; the model needs {} and {}",
                                   b, step, s.tokens.size(), s.loss_mask.size(), shape.seq + 1, shape.seq));
    for (uint8_t m : s.loss_mask)
      counted += m ? 1 : 0;
    if (b < own.batch_begin || b >= own.batch_end) continue;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = own.positions[size_t(i)], row = (b - own.batch_begin) * n + i;
      inputs[size_t(row)] = s.tokens[size_t(t)];
      targets[size_t(row)] = s.tokens[size_t(t + 1)];
      mask[size_t(row)] = s.loss_mask[size_t(t)] ? 1 : 0;
      if (inputs[size_t(row)] < 0 || inputs[size_t(row)] >= shape.vocab || targets[size_t(row)] < 0 ||
          targets[size_t(row)] >= shape.vocab)
        throw InputError(fmt::format("sample {} of step {}: token at position {} is outside the vocabulary of {}", b,
                                     step, t, shape.vocab));
    }
  }
  std::fill(grads.begin(), grads.end(), T(0));
  std::vector<T> x;
  embed(inputs, x);
  std::vector<LayerCache<T>> caches(size_t(shape.layers));
  for (int l = 0; l < shape.layers; ++l)
    layer_forward(l, x, caches[size_t(l)]);
  std::vector<T> dx;
  int64_t correct = 0;
  const double loss = head(x, targets, mask, counted > 0 ? 1.0 / double(counted) : 0.0, dx, correct);
  local_accuracy = counted > 0 ? double(correct) / double(counted) : 0.0;
  for (int l = shape.layers - 1; l >= 0; --l)
    layer_backward(l, dx, caches[size_t(l)]);
  embed_backward(inputs, dx);
  return counted > 0 ? loss / double(counted) : 0.0;
}

// ---- the public class -------------------------------------------------------------------------

template <typename T>
Trainer<T>::Trainer(const Plan& plan, const Schedule& schedule, Backend& backend, const TrainerOptions& options)
    : impl_(std::make_unique<Impl>(plan, schedule, backend, options)) {}
template <typename T>
Trainer<T>::~Trainer() = default;

template <typename T>
double Trainer<T>::compute_gradients(int64_t step, const BatchSource& batch) {
  std::vector<double> extra{impl_->local_gradients(step, batch), impl_->local_accuracy};
  impl_->synchronise(extra);
  return extra[0];
}

template <typename T>
StepResult Trainer<T>::step(int64_t step, const BatchSource& batch) {
  Impl& m = *impl_;
  m.backend.barrier();
  const auto start = std::chrono::steady_clock::now();
  StepResult r;
  std::vector<double> extra{m.local_gradients(step, batch), m.local_accuracy};
  if (m.plan.workload.zero_stage > 0) extra.push_back(0);  // the shards' squared norms, summed below
  m.synchronise(extra);
  r.loss = extra[0];
  r.accuracy = extra[1];
  r.grad_norm = std::sqrt(m.plan.workload.zero_stage > 0 ? extra[2] : m.grad_norm_squared_local());
  r.lr = learning_rate(m.options.optimizer, step, m.options.total_steps);
  const double scale = clip_scale(m.options.optimizer, r.grad_norm);
  if (m.plan.workload.zero_stage == 0) {
    adamw_update(m.options.optimizer, r.lr, scale, m.params.data(), m.grads.data(), m.decay, 0, m.layout.size(),
                 m.adam);
  } else {
    const int64_t count = std::max<int64_t>(0, std::min(m.shard_hi, m.layout.size()) - m.shard_lo);
    adamw_update(m.options.optimizer, r.lr, scale, m.params.data(), m.shard_grad.data(), m.decay, m.shard_lo, count,
                 m.adam);
    m.gather_parameters();
  }
  r.seconds = m.backend.max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  r.tokens = int64_t(m.plan.workload.batch) * m.shape.seq;
  return r;
}

template <typename T>
const ParameterLayout& Trainer<T>::layout() const {
  return impl_->layout;
}
template <typename T>
const std::vector<T>& Trainer<T>::parameters() const {
  return impl_->params;
}
template <typename T>
std::vector<T>& Trainer<T>::parameters() {
  return impl_->params;
}
template <typename T>
const std::vector<T>& Trainer<T>::gradient() const {
  return impl_->plan.workload.zero_stage == 0 ? impl_->grads : impl_->shard_grad;
}
template <typename T>
int64_t Trainer<T>::shard_begin() const {
  return impl_->plan.workload.zero_stage == 0 ? 0 : impl_->shard_lo;
}
template <typename T>
int64_t Trainer<T>::shard_end() const {
  return impl_->plan.workload.zero_stage == 0 ? impl_->layout.size() : std::min(impl_->shard_hi, impl_->layout.size());
}
template <typename T>
AdamState<T>& Trainer<T>::adam() {
  return impl_->adam;
}
template <typename T>
const OwnTokens& Trainer<T>::tokens() const {
  return impl_->own;
}
template <typename T>
double Trainer<T>::model_flops_per_step() const {
  return step_model_flops(impl_->plan.workload);
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace wallfacer::train
