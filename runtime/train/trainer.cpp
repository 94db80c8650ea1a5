// The trainer on one rank: its whole-step program, the model's parameters, the batch a step
// works on, and the StepSession that runs the program (trainer_impl.hpp).
#include <wallfacer/train/trainer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/train/cpu_step_kernels.hpp>
#include <wallfacer/train/layers.hpp>
#include "trainer_impl.hpp"

namespace wallfacer::train {

using runtime::Backend;

namespace {

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
  if (plan.workload.fp8_linear)
    throw InputError("the trainer runs its GEMMs in the training precision; the plan asks for fp8 GEMMs (fp8_linear)");
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

RankStep rank_step_program(const Plan& plan, int rank) {
  Plan whole = plan;
  whole.scope = Scope::Step;
  const StepBuilder builder(whole);
  RankStep out;
  out.schedule.dims = builder.dims();
  out.schedule.flow_sets = builder.flow_sets();
  out.step = builder.build_template(rank, out.schedule.tokens);
  out.schedule.ranks.push_back(unroll(out.step, 0, &out.origin));
  return out;
}

namespace {

// The model layer of a per-layer buffer of the unrolled program (its name ends in ".L<layer>").
int layer_of_buffer(const BufferDecl& decl) {
  const size_t at = decl.name.rfind(".L");
  if (at == std::string::npos) return -1;
  return std::stoi(decl.name.substr(at + 2));
}

std::unique_ptr<runtime::StepKernels<float>> make_kernels(const TrainerOptions& o, Backend& b, float) {
  return o.kernels_f32 ? o.kernels_f32(b) : make_cpu_step_kernels<float>();
}
std::unique_ptr<runtime::StepKernels<double>> make_kernels(const TrainerOptions& o, Backend& b, double) {
  return o.kernels_f64 ? o.kernels_f64(b) : make_cpu_step_kernels<double>();
}

}  // namespace

template <typename T>
Trainer<T>::Impl::Impl(const Plan& plan_, Backend& backend_, const TrainerOptions& options_)
    : plan(trainable(plan_)),
      backend(backend_),
      options(options_),
      shape(model_shape(plan_.workload, options_.positions, options_.rotary_base)),
      layout(shape),
      groups(gradient_groups(plan_, backend_.rank())),
      step(rank_step_program(plan_, backend_.rank())),
      own(own_tokens(step.schedule, step.program())),
      roles(step_roles(step.step, step.program(), step.origin, layout, shape, groups, plan_)),
      kernels(make_kernels(options_, backend_, T{})),
      params(backend_),
      grads(backend_),
      adam_m(backend_),
      adam_v(backend_),
      shard_grad(backend_),
      shard_params(backend_),
      x(backend_),
      dx(backend_),
      f(backend_),
      rstd_f(backend_),
      logits(backend_),
      dlogits(backend_),
      df(backend_),
      d_act(backend_),
      d_gate(backend_),
      d_up(backend_),
      dc(backend_),
      dn(backend_),
      d_o(backend_),
      dq(backend_),
      dk(backend_),
      dv(backend_),
      da(backend_) {
  if (backend.size() != plan.num_ranks())
    throw InputError(fmt::format("the plan has {} ranks but {} were launched", plan.num_ranks(), backend.size()));
  if (shape.vocab < 1 || shape.vocab > (int64_t(1) << 30)) throw InputError("the workload's vocab is out of range");
  const RankProgram& program = step.program();
  layer_inputs.resize(size_t(shape.layers));
  layer_outputs.resize(size_t(shape.layers));
  layer_buffers.resize(size_t(shape.layers));
  for (size_t b = 0; b < program.buffers.size(); ++b)
    if (const int l = layer_of_buffer(program.buffers[b]); l >= 0) layer_buffers.at(size_t(l)).push_back(int32_t(b));
  for (size_t i = 0; i < program.inputs.size(); ++i)
    layer_inputs.at(size_t(layer_of_buffer(program.buffers[size_t(program.inputs[i].buf)]))).push_back(int32_t(i));
  for (size_t i = 0; i < program.outputs.size(); ++i)
    layer_outputs.at(size_t(layer_of_buffer(program.buffers[size_t(program.outputs[i].buf)]))).push_back(int32_t(i));
  if (roles.optimizer_op < 0) throw ScheduleError("the step program has no Optimizer op");
  if (options.initialise) {
    const std::vector<double> init = initial_parameters(layout, options.seed);
    params.upload(std::vector<T>(init.begin(), init.end()));
  } else {
    params.resize(layout.size());
  }
  grads.assign(layout.size(), T(0));
  backend.set_groups(plan.groups);
  setup_shards();
}

template <typename T>
void Trainer<T>::Impl::prepare_batch(int64_t index, const BatchSource& batch) {
  const int64_t n = int64_t(own.positions.size());
  inputs.assign(size_t(own.rows()), 0);
  targets.assign(size_t(own.rows()), 0);
  mask.assign(size_t(own.rows()), 0);
  counted = 0;
  for (int b = 0; b < plan.workload.batch; ++b) {
    const TrainingSample s = batch(index, b);
    if (int64_t(s.tokens.size()) != shape.seq + 1 || int64_t(s.loss_mask.size()) != shape.seq)
      throw InputError(fmt::format("sample {} of step {} has {} tokens and {} mask entries; the model needs {} and {}",
                                   b, index, s.tokens.size(), s.loss_mask.size(), shape.seq + 1, shape.seq));
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
                                     index, t, shape.vocab));
    }
  }
  step_index = index;
}

template <typename T>
void Trainer<T>::Impl::run_program(int64_t op_limit) {
  host_to_backend();
  grads.assign(layout.size(), T(0));
  acts.clear();
  for (int l = 0; l < shape.layers; ++l)
    acts.emplace_back(backend);
  restarted.assign(step.program().buffers.size(), 0);
  trace.clear();
  loss_sum = 0;
  correct = 0;
  runtime::StepHooks hooks;
  hooks.started = [this](int32_t op) { started(op); };
  hooks.compute = [this](int32_t op) { compute(op); };
  hooks.flat = [this](int32_t op) { return flat(op); };
  hooks.finished = [this](int32_t op) { flat_finished(op); };
  runtime::StepSession s(step.schedule, step.program(), plan, backend, runtime::elem_type_of<T>(), options.executor,
                         std::move(hooks));
  session = &s;
  try {
    s.run(op_limit);
  } catch (...) {
    session = nullptr;
    throw;
  }
  session = nullptr;
  acts.clear();
  backend_to_host();
}

template <typename T>
void Trainer<T>::Impl::host_to_backend() {
  if (params_on_host) params.upload(host_params);
  if (adam_on_host) {
    adam_m.upload(adam.m);
    adam_v.upload(adam.v);
  }
}

template <typename T>
void Trainer<T>::Impl::backend_to_host() {
  if (params_on_host) params.download(host_params);
  if (adam_on_host) {
    adam_m.download(adam.m);
    adam_v.download(adam.v);
  }
}

template <typename T>
void Trainer<T>::Impl::started(int32_t op) {
  trace.push_back(op);
  const OpRole& role = roles.ops[size_t(op)];
  if (role.role == Role::Attention && role.recompute) restart_accumulators(op);
}

// ---- the public class -------------------------------------------------------------------------

template <typename T>
Trainer<T>::Trainer(const Plan& plan, Backend& backend, const TrainerOptions& options)
    : impl_(std::make_unique<Impl>(plan, backend, options)) {}
template <typename T>
Trainer<T>::Trainer(const Plan& plan, const Schedule&, Backend& backend, const TrainerOptions& options)
    : Trainer(plan, backend, options) {}
template <typename T>
Trainer<T>::~Trainer() = default;

template <typename T>
double Trainer<T>::compute_gradients(int64_t step, const BatchSource& batch) {
  Impl& m = *impl_;
  m.prepare_batch(step, batch);
  m.run_program(m.roles.optimizer_op);
  std::vector<double> scalars = m.step_scalars(false);
  return scalars[0];
}

template <typename T>
StepResult Trainer<T>::step(int64_t step, const BatchSource& batch) {
  Impl& m = *impl_;
  m.backend.barrier();
  const auto start = std::chrono::steady_clock::now();
  m.prepare_batch(step, batch);
  m.result = StepResult{};
  m.run_program(INT64_MAX);
  m.backend.synchronize();  // a device backend's queued work (the last gathers) belongs to the step
  StepResult r = m.result;
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
  if (!impl_->params_on_host) impl_->params.download(impl_->host_params);
  return impl_->host_params;
}
template <typename T>
std::vector<T>& Trainer<T>::parameters() {
  if (!impl_->params_on_host) impl_->params.download(impl_->host_params);
  impl_->params_on_host = true;
  return impl_->host_params;
}
template <typename T>
std::vector<T> Trainer<T>::parameters_to_host() const {
  if (impl_->params_on_host) return impl_->host_params;
  std::vector<T> out;
  impl_->params.download(out);
  return out;
}
template <typename T>
void Trainer<T>::parameters_from_host(const std::vector<T>& values) {
  if (int64_t(values.size()) != impl_->layout.size())
    throw InputError(fmt::format("{} parameter values for a model of {}", values.size(), impl_->layout.size()));
  impl_->params.upload(values);
  if (impl_->params_on_host) impl_->host_params = values;
}
template <typename T>
const std::vector<T>& Trainer<T>::gradient() const {
  (impl_->sharded ? impl_->shard_grad : impl_->grads).download(impl_->host_grad);
  return impl_->host_grad;
}
template <typename T>
int64_t Trainer<T>::shard_begin() const {
  return impl_->sharded ? impl_->piece_start.at(size_t(impl_->backend.rank())).at(0) : 0;
}
template <typename T>
int64_t Trainer<T>::shard_end() const {
  return impl_->sharded ? shard_begin() + impl_->shard_size : impl_->layout.size();
}
template <typename T>
AdamState<T>& Trainer<T>::adam() {
  if (!impl_->adam_on_host) {
    impl_->adam_m.download(impl_->adam.m);
    impl_->adam_v.download(impl_->adam.v);
  }
  impl_->adam_on_host = true;
  return impl_->adam;
}
template <typename T>
AdamState<T> Trainer<T>::adam_to_host() const {
  AdamState<T> out;
  out.steps = impl_->adam.steps;
  if (impl_->adam_on_host) return impl_->adam;
  impl_->adam_m.download(out.m);
  impl_->adam_v.download(out.v);
  return out;
}
template <typename T>
void Trainer<T>::adam_from_host(const AdamState<T>& state) {
  const int64_t shard = shard_end() - shard_begin();
  if (int64_t(state.m.size()) != shard || int64_t(state.v.size()) != shard)
    throw InputError(
        fmt::format("optimizer moments of {} and {} values for a shard of {}", state.m.size(), state.v.size(), shard));
  impl_->adam_m.upload(state.m);
  impl_->adam_v.upload(state.v);
  impl_->adam.steps = state.steps;
  if (impl_->adam_on_host) {
    impl_->adam.m = state.m;
    impl_->adam.v = state.v;
  }
}
template <typename T>
const OwnTokens& Trainer<T>::tokens() const {
  return impl_->own;
}
template <typename T>
const RankProgram& Trainer<T>::program() const {
  return impl_->step.program();
}
template <typename T>
const std::vector<int32_t>& Trainer<T>::executed_ops() const {
  return impl_->trace;
}
template <typename T>
double Trainer<T>::model_flops_per_step() const {
  return step_model_flops(impl_->plan.workload);
}

template class Trainer<float>;
template class Trainer<double>;

}  // namespace wallfacer::train
