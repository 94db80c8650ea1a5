// The step program's Gemm and Pointwise ops on the model (docs/training.md, "How the step runs"):
// each op's role (step_roles.hpp) names the weights and activations it reads and writes, and the
// kernels (StepKernels) compute it. The ops that produce an attention layer's Q, K, V and dO bind
// them into the layer's attention buffers; the ops that consume O and dQ, dK, dV take them out.
#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>
#include "trainer_impl.hpp"

namespace wallfacer::train {

template <typename T>
void Trainer<T>::Impl::gemm(const BackendArray<T>& a, bool ta, const T* b, bool tb, BackendArray<T>& c, int64_t m,
                            int64_t n, int64_t k, bool accumulate) {
  if (!accumulate) c.resize(m * n);
  kernels->gemm(a.data(), ta, b, tb, c.data(), m, n, k, accumulate);
}

// A weight gradient: c (a gradient tensor) += a^T b.
template <typename T>
void Trainer<T>::Impl::gemm_into(const BackendArray<T>& a, bool ta, const BackendArray<T>& b, T* c, int64_t m,
                                 int64_t n, int64_t k) {
  kernels->gemm(a.data(), ta, b.data(), false, c, m, n, k, true);
}

template <typename T>
void Trainer<T>::Impl::compute(int32_t op) {
  const OpRole& role = roles.ops[size_t(op)];
  const int64_t rows = own.rows(), h = shape.hidden, n = int64_t(own.positions.size());
  switch (role.role) {
    case Role::Embed:
      x.resize(rows * h);
      kernels->embedding_forward(params.data() + layout.embed(),
                                 layout.pos_embed() >= 0 ? params.data() + layout.pos_embed() : nullptr, inputs.data(),
                                 own.positions.data(), n, x.data(), rows, h);
      return;
    case Role::EmbedBackward:
      kernels->embedding_backward(dx.data(), inputs.data(), own.positions.data(), n, grads.data() + layout.embed(),
                                  layout.pos_embed() >= 0 ? grads.data() + layout.pos_embed() : nullptr, rows, h);
      return;
    case Role::FinalNorm:
    case Role::LmHead:
    case Role::Loss:
    case Role::LmHeadData:
    case Role::LmHeadWeight:
    case Role::FinalNormBackward:
      return head(role.role);
    case Role::Optimizer:
      return optimizer();
    default:
      break;
  }
  if (role.layer < 0)
    throw ScheduleError(
        fmt::format("rank {} op {}: a {} op outside a layer", backend.rank(), op, to_string(role.role)));
  if (role.role <= Role::RopeQK)
    layer_forward(role.role, role.layer, role.recompute);
  else
    layer_backward(role.role, role.layer);
}

template <typename T>
void Trainer<T>::Impl::layer_forward(Role role, int l, bool recompute) {
  LayerActs<T>& A = acts[size_t(l)];
  const LayerOffsets& o = layout.layer(l);
  const T* w = params.data();
  const int64_t rows = own.rows(), h = shape.hidden, qw = shape.q_width(), kw = shape.kv_width(), F = shape.ffn;
  const int64_t n = int64_t(own.positions.size());
  const bool rotary = shape.positions == Positions::Rotary;
  const bool keep_pre = plan.workload.checkpointing == Checkpointing::Selective;
  switch (role) {
    case Role::Norm1:
      if (!recompute) A.x.copy_from(x);
      A.a.resize(rows * h);
      A.rstd1.resize(rows);
      return kernels->rms_norm_forward(A.x.data(), w + o.norm1, A.a.data(), A.rstd1.data(), rows, h);
    case Role::QProj:
      return gemm(A.a, false, w + o.wq, false, A.q, rows, qw, h, false);
    case Role::KProj:
      return gemm(A.a, false, w + o.wk, false, A.k, rows, kw, h, false);
    case Role::RopeQ:
      if (keep_pre) A.q_pre.copy_from(A.q);
      if (rotary)
        kernels->rotary(A.q.data(), own.positions.data(), n, rows, shape.heads, shape.head_dim, shape.rotary_base,
                        false);
      return bind_attention(l, Field::Q, A.q);
    case Role::RopeK:
      if (keep_pre) A.k_pre.copy_from(A.k);
      if (rotary)
        kernels->rotary(A.k.data(), own.positions.data(), n, rows, shape.kv_heads, shape.head_dim, shape.rotary_base,
                        false);
      return bind_attention(l, Field::K, A.k);
    case Role::RopeQK:  // selective: the rotated Q and K again, from the projections' outputs
      A.q.copy_from(A.q_pre);
      A.k.copy_from(A.k_pre);
      if (!rotary) return;
      kernels->rotary(A.q.data(), own.positions.data(), n, rows, shape.heads, shape.head_dim, shape.rotary_base, false);
      return kernels->rotary(A.k.data(), own.positions.data(), n, rows, shape.kv_heads, shape.head_dim,
                             shape.rotary_base, false);
    case Role::VProj:
      gemm(A.a, false, w + o.wv, false, A.v, rows, kw, h, false);
      return bind_attention(l, Field::V, A.v);
    case Role::OutProj:
      collect_attention(l, field_bit(Field::O));
      return gemm(A.o, false, w + o.wo, false, A.proj, rows, h, qw, false);
    case Role::Residual1:
      A.x1.resize(rows * h);
      return kernels->add(A.x.data(), A.proj.data(), A.x1.data(), rows * h);
    case Role::Norm2:
      A.c.resize(rows * h);
      A.rstd2.resize(rows);
      return kernels->rms_norm_forward(A.x1.data(), w + o.norm2, A.c.data(), A.rstd2.data(), rows, h);
    case Role::Gate:
      return gemm(A.c, false, w + o.w_gate, false, A.gate, rows, F, h, false);
    case Role::Up:
      return gemm(A.c, false, w + o.w_up, false, A.up, rows, F, h, false);
    case Role::Act:
      A.act.resize(rows * F);
      if (shape.gated_ffn) return kernels->swiglu_forward(A.gate.data(), A.up.data(), A.act.data(), rows * F);
      return kernels->gelu_forward(A.up.data(), A.act.data(), rows * F);
    case Role::Down:
      return gemm(A.act, false, w + o.w_down, false, A.mlp, rows, h, F, false);
    case Role::Residual2:
      x.resize(rows * h);
      kernels->add(A.x1.data(), A.mlp.data(), x.data(), rows * h);
      return drop_after_forward(A);
    default:
      throw ScheduleError(fmt::format("rank {}: {} is not a layer forward op", backend.rank(), to_string(role)));
  }
}

// What the layer's backward finds again by recomputation (docs/step.md, "Recomputation"): the
// rest is released when the forward ends.
template <typename T>
void Trainer<T>::Impl::drop_after_forward(LayerActs<T>& A) const {
  A.proj.clear();
  A.mlp.clear();
  A.q.clear();
  A.k.clear();
  A.v.clear();
  const Checkpointing mode = plan.workload.checkpointing;
  if (mode == Checkpointing::Selective) {
    A.a.clear();
    A.c.clear();
    A.act.clear();
  }
  if (mode == Checkpointing::Full) A.clear_except(&A.x);
}

template <typename T>
void Trainer<T>::Impl::layer_backward(Role role, int l) {
  LayerActs<T>& A = acts[size_t(l)];
  const LayerOffsets& o = layout.layer(l);
  const T* w = params.data();
  T* g = grads.data();
  const int64_t rows = own.rows(), h = shape.hidden, qw = shape.q_width(), kw = shape.kv_width(), F = shape.ffn;
  const int64_t n = int64_t(own.positions.size());
  switch (role) {
    case Role::DownData:
      return gemm(dx, false, w + o.w_down, true, d_act, rows, F, h, false);
    case Role::DownWeight:
      return gemm_into(A.act, true, dx, g + o.w_down, F, h, rows);
    case Role::ActBackward:
      d_up.resize(rows * F);
      if (!shape.gated_ffn) return kernels->gelu_backward(A.up.data(), d_act.data(), d_up.data(), rows * F);
      d_gate.resize(rows * F);
      return kernels->swiglu_backward(A.gate.data(), A.up.data(), d_act.data(), d_gate.data(), d_up.data(), rows * F);
    case Role::GateData:
      return gemm(d_gate, false, w + o.w_gate, true, dc, rows, h, F, false);
    case Role::GateWeight:
      return gemm_into(A.c, true, d_gate, g + o.w_gate, h, F, rows);
    case Role::UpData:
      return gemm(d_up, false, w + o.w_up, true, dc, rows, h, F, shape.gated_ffn);
    case Role::UpWeight:
      return gemm_into(A.c, true, d_up, g + o.w_up, h, F, rows);
    case Role::Norm2Backward:
      dn.assign(rows * h, T(0));
      return kernels->rms_norm_backward(A.x1.data(), w + o.norm2, A.rstd2.data(), dc.data(), dn.data(), g + o.norm2,
                                        rows, h);
    case Role::Residual2Backward:
    case Role::Residual1Backward:
      kernels->add(dx.data(), dn.data(), dx.data(), rows * h);
      if (role == Role::Residual1Backward) A.clear_except();
      return;
    case Role::OutProjData:
      gemm(dx, false, w + o.wo, true, d_o, rows, qw, h, false);
      return bind_attention(l, Field::dO, d_o);
    case Role::OutProjWeight:
      return gemm_into(A.o, true, dx, g + o.wo, qw, h, rows);
    case Role::RopeBackward:
      collect_attention(l, field_mask({Field::dQ, Field::dK, Field::dV}));
      if (shape.positions != Positions::Rotary) return;
      kernels->rotary(dq.data(), own.positions.data(), n, rows, shape.heads, shape.head_dim, shape.rotary_base, true);
      return kernels->rotary(dk.data(), own.positions.data(), n, rows, shape.kv_heads, shape.head_dim,
                             shape.rotary_base, true);
    case Role::QWeight:
      return gemm_into(A.a, true, dq, g + o.wq, h, qw, rows);
    case Role::KWeight:
      return gemm_into(A.a, true, dk, g + o.wk, h, kw, rows);
    case Role::VWeight:
      return gemm_into(A.a, true, dv, g + o.wv, h, kw, rows);
    case Role::QData:
      return gemm(dq, false, w + o.wq, true, da, rows, h, qw, false);
    case Role::KData:
      return gemm(dk, false, w + o.wk, true, da, rows, h, kw, true);
    case Role::VData:
      return gemm(dv, false, w + o.wv, true, da, rows, h, kw, true);
    case Role::Norm1Backward:
      dn.assign(rows * h, T(0));
      return kernels->rms_norm_backward(A.x.data(), w + o.norm1, A.rstd1.data(), da.data(), dn.data(), g + o.norm1,
                                        rows, h);
    default:
      throw ScheduleError(fmt::format("rank {}: {} is not a layer backward op", backend.rank(), to_string(role)));
  }
}

template <typename T>
void Trainer<T>::Impl::head(Role role) {
  const int64_t rows = own.rows(), h = shape.hidden, v = shape.vocab;
  const T* w = params.data();
  T* g = grads.data();
  switch (role) {
    case Role::FinalNorm:
      f.resize(rows * h);
      rstd_f.resize(rows);
      return kernels->rms_norm_forward(x.data(), w + layout.final_norm(), f.data(), rstd_f.data(), rows, h);
    case Role::LmHead:
      return gemm(f, false, w + layout.lm_head(), false, logits, rows, v, h, false);
    case Role::Loss:
      dlogits.resize(rows * v);
      loss_sum = kernels->cross_entropy(logits.data(), targets.data(), mask.data(),
                                        counted > 0 ? 1.0 / double(counted) : 0.0, dlogits.data(), rows, v, correct);
      return;
    case Role::LmHeadData:
      return gemm(dlogits, false, w + layout.lm_head(), true, df, rows, h, v, false);
    case Role::LmHeadWeight:
      return gemm_into(f, true, dlogits, g + layout.lm_head(), h, v, rows);
    case Role::FinalNormBackward:
      dx.assign(rows * h, T(0));
      return kernels->rms_norm_backward(x.data(), w + layout.final_norm(), rstd_f.data(), df.data(), dx.data(),
                                        g + layout.final_norm(), rows, h);
    default:
      throw ScheduleError(fmt::format("rank {}: {} is not a head op", backend.rank(), to_string(role)));
  }
}

// Writes `field` of layer l's attention from `values` ([rows][heads][head_dim]), by copies in the
// backend's memory.
template <typename T>
void Trainer<T>::Impl::bind_attention(int l, Field field, BackendArray<T>& values) {
  const RankProgram& program = step.program();
  const runtime::RowTensor source{values.data(), int64_t(own.positions.size()), &own.row_of};
  for (int32_t i : layer_inputs[size_t(l)]) {
    const Binding& b = program.inputs[size_t(i)];
    if (b.field == field) session->bind_rows(b, source, field == Field::dO);
  }
}

// Takes `fields` of layer l's attention outputs: O into the layer's activations, dQ, dK, dV into
// the backward's.
template <typename T>
void Trainer<T>::Impl::collect_attention(int l, FieldMask fields) {
  const RankProgram& program = step.program();
  const int64_t rows = own.rows(), qw = shape.q_width(), kw = shape.kv_width();
  LayerActs<T>& A = acts[size_t(l)];
  if (fields & field_bit(Field::O)) A.o.assign(rows * qw, T(0));
  if (fields & field_bit(Field::dQ)) {
    dq.assign(rows * qw, T(0));
    dk.assign(rows * kw, T(0));
    dv.assign(rows * kw, T(0));
  }
  int64_t delivered = 0, expected = 0;
  for (int32_t i : layer_outputs[size_t(l)]) {
    const Binding& b = program.outputs[size_t(i)];
    if (!(fields & field_bit(b.field))) continue;
    BackendArray<T>& out = b.field == Field::O ? A.o : b.field == Field::dQ ? dq : b.field == Field::dK ? dk : dv;
    delivered += session->collect_rows(b, {out.data(), int64_t(own.positions.size()), &own.row_of});
  }
  if (fields & field_bit(Field::O)) expected += rows * qw;
  if (fields & field_bit(Field::dQ)) expected += rows * (qw + 2 * kw);
  if (delivered != expected)
    throw ScheduleError(fmt::format("rank {}: layer {}'s attention returned {} of its {} output elements",
                                    backend.rank(), l, delivered, expected));
}

// A full recomputation repeats the layer's attention forward into the forward's own buffers: the
// first of its ops to write a buffer's O and Lse starts them over, so that its blocks accumulate
// from zero (and -inf) instead of onto the forward's result. An overwrite (a receive, a
// collective's output) needs nothing.
template <typename T>
void Trainer<T>::Impl::restart_accumulators(int32_t index) {
  const Op& op = step.program().ops[size_t(index)];
  constexpr FieldMask kAcc = fieldset::kOLse;
  int32_t written = -1;
  if (op.kind == OpKind::AttnFwd) written = op.buf[2];
  if (op.kind == OpKind::Recv && (op.fields & kAcc)) written = op.buf[0];
  if (is_collective(op.kind) && op.coll >= 0 && (step.program().collectives[size_t(op.coll)].fields & kAcc))
    written = op.buf[1];
  if (written < 0 || restarted[size_t(written)]) return;
  restarted[size_t(written)] = 1;
  if (op.kind == OpKind::AttnFwd) session->restart(written, kAcc);
}

template struct Trainer<float>::Impl;
template struct Trainer<double>::Impl;

}  // namespace wallfacer::train
