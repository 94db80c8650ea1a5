#include "step_roles.hpp"

#include <fmt/format.h>

#include <algorithm>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::train {
namespace {

enum class Section { Prologue, Forward, Head, GradientIn, Backward, Tail, Epilogue };

Section section_of(const StepSections& s, uint32_t op) {
  if (op < s.prologue_end) return Section::Prologue;
  if (op < s.forward_end) return Section::Forward;
  if (op < s.head_end) return Section::Head;
  if (op < s.gradient_in_end) return Section::GradientIn;
  if (op < s.backward_end) return Section::Backward;
  if (op < s.tail_end) return Section::Tail;
  return Section::Epilogue;
}

// A contiguous range of the flat parameter array whose gradient one synchronisation carries:
// [begin, end) as the program counts it, real_end with what travels along (the position table).
struct SyncRange {
  int64_t begin = 0, end = 0, real_end = 0;
};

class Classifier {
 public:
  Classifier(const StepTemplate& step, const RankProgram& program, const ParameterLayout& layout,
             const ModelShape& shape, const std::vector<int>& groups, const Plan& plan)
      : step_(step), program_(program), layout_(layout), shape_(shape), groups_(groups), plan_(plan) {}

  StepRoles run(const std::vector<uint32_t>& origin) {
    out_.ops.resize(program_.ops.size());
    Section previous = Section::Epilogue;
    uint32_t previous_origin = 0;
    int forward_layer = -1, backward_layer = step_.layers;
    for (size_t i = 0; i < program_.ops.size(); ++i) {
      const uint32_t o = origin.at(i);
      const Section section = section_of(step_.sections, o);
      if (i == 0 || section != previous || o <= previous_origin) start(section, forward_layer, backward_layer);
      previous = section;
      previous_origin = o;
      OpRole& role = out_.ops[i];
      const Op& op = program_.ops[i];
      role.recompute = (op.flags & kOpRecompute) != 0;
      if (section == Section::Forward) role.layer = forward_layer;
      if (section == Section::Backward) role.layer = backward_layer;
      classify(int32_t(i), op, section, role);
    }
    finish_ranges();
    int64_t covered = 0;
    for (const GradBucket& b : out_.buckets)
      covered += b.count;
    if (!groups_.empty() && covered != layout_.size())
      throw ScheduleError(
          fmt::format("rank {}: the step program's gradient buckets carry {} elements, the model has {}", program_.rank,
                      covered, layout_.size()));
    return std::move(out_);
  }

 private:
  void start(Section section, int& forward_layer, int& backward_layer) {
    finish_ranges();
    norms_ = ropes_ = residuals_ = 0;
    const int64_t H = shape_.hidden;
    if (section == Section::Forward) ++forward_layer;
    if (section == Section::Backward) {
      --backward_layer;
      const LayerOffsets& l = layout_.layer(backward_layer);
      const int64_t mlp_end = l.w_down + shape_.ffn * H, attn_end = l.wo + shape_.q_width() * H;
      ranges_ = {{l.norm2, mlp_end, mlp_end}, {l.norm1, attn_end, attn_end}};
    }
    if (section == Section::Head) {
      const int64_t end = layout_.lm_head() + H * shape_.vocab;
      ranges_ = {{layout_.final_norm(), end, end}};
    }
    if (section == Section::Tail) {
      const int64_t end = layout_.embed() + shape_.vocab * H;
      const int64_t real = layout_.pos_embed() >= 0 ? layout_.pos_embed() + shape_.seq * H : end;
      ranges_ = {{layout_.embed(), end, real}};
    }
    range_ = 0;
  }

  void finish_ranges() {
    if (!groups_.empty() && range_ < ranges_.size())
      throw ScheduleError(
          fmt::format("rank {}: a gradient synchronisation of the step program leaves {} of the "
                      "model's parameters unsynchronised",
                      program_.rank, ranges_[range_].end - ranges_[range_].begin));
    ranges_.clear();
    range_ = 0;
  }

  int level_of(const Op& op) const {
    const int group = program_.collectives.at(size_t(op.coll)).group;
    auto it = std::find(groups_.begin(), groups_.end(), group);
    if (it == groups_.end())
      throw ScheduleError(
          fmt::format("rank {}: a gradient collective over group {}, not one the gradients average over", program_.rank,
                      plan_.groups.at(size_t(group)).name));
    return int(it - groups_.begin());
  }

  void grad_sync(const Op& op, OpRole& role) {
    role.role = Role::GradSync;
    role.level = level_of(op);
    if (role.level > 0) {
      role.bucket = int(out_.buckets.size()) - 1;
      return;
    }
    if (range_ >= ranges_.size())
      throw ScheduleError(fmt::format("rank {}: a gradient bucket past the section's tensors", program_.rank));
    SyncRange& r = ranges_[range_];
    const int64_t elements = program_.collectives.at(size_t(op.coll)).elements;
    if (r.begin + elements > r.end)
      throw ScheduleError(fmt::format("rank {}: a gradient bucket of {} elements overruns its tensors ({} left)",
                                      program_.rank, elements, r.end - r.begin));
    GradBucket bucket{r.begin, elements};
    r.begin += elements;
    if (r.begin == r.end) {
      bucket.count += r.real_end - r.end;
      ++range_;
    }
    role.bucket = int(out_.buckets.size());
    out_.buckets.push_back(bucket);
  }

  [[noreturn]] void refuse(const Op& op, int32_t i) const {
    throw ScheduleError(fmt::format("rank {} op {}: the trainer cannot run a {} op ({}) of the step program",
                                    program_.rank, i, to_string(op.label), to_string(op.kind)));
  }

  Role forward_role(const Op& op, int32_t i) {
    switch (op.label) {
      case StepOp::Norm:
        return norms_++ == 0 ? Role::Norm1 : Role::Norm2;
      case StepOp::QProj:
        return Role::QProj;
      case StepOp::KProj:
        return Role::KProj;
      case StepOp::VProj:
        return Role::VProj;
      case StepOp::Rope:
        if (op.flags & kOpRecompute && plan_.workload.checkpointing == Checkpointing::Selective) return Role::RopeQK;
        return ropes_++ == 0 ? Role::RopeQ : Role::RopeK;
      case StepOp::OutProj:
        return Role::OutProj;
      case StepOp::Residual:
        return residuals_++ == 0 ? Role::Residual1 : Role::Residual2;
      case StepOp::MlpGate:
        return Role::Gate;
      case StepOp::MlpUp:
        return Role::Up;
      case StepOp::Activation:
        return Role::Act;
      case StepOp::MlpDown:
        return Role::Down;
      default:
        refuse(op, i);
    }
  }

  Role backward_role(const Op& op, int32_t i) {
    const bool data = op.part == GemmPart::DataGrad;
    switch (op.label) {
      case StepOp::MlpDown:
        return data ? Role::DownData : Role::DownWeight;
      case StepOp::Activation:
        return Role::ActBackward;
      case StepOp::MlpGate:
        return data ? Role::GateData : Role::GateWeight;
      case StepOp::MlpUp:
        return data ? Role::UpData : Role::UpWeight;
      case StepOp::Norm:
        return norms_++ == 0 ? Role::Norm2Backward : Role::Norm1Backward;
      case StepOp::Residual:
        return residuals_++ == 0 ? Role::Residual2Backward : Role::Residual1Backward;
      case StepOp::OutProj:
        return data ? Role::OutProjData : Role::OutProjWeight;
      case StepOp::Rope:
        return Role::RopeBackward;
      case StepOp::QProj:
        return data ? Role::QData : Role::QWeight;
      case StepOp::KProj:
        return data ? Role::KData : Role::KWeight;
      case StepOp::VProj:
        return data ? Role::VData : Role::VWeight;
      default:
        refuse(op, i);
    }
  }

  Role head_role(const Op& op, int32_t i) const {
    switch (op.label) {
      case StepOp::Norm:
        return op.phase == Phase::Forward ? Role::FinalNorm : Role::FinalNormBackward;
      case StepOp::LmHead:
        if (op.part == GemmPart::Forward) return Role::LmHead;
        return op.part == GemmPart::DataGrad ? Role::LmHeadData : Role::LmHeadWeight;
      case StepOp::Loss:
        return Role::Loss;
      default:
        refuse(op, i);
    }
  }

  void classify(int32_t i, const Op& op, Section section, OpRole& role) {
    if (op.label == StepOp::None) {
      if (section != Section::Forward && section != Section::Backward) refuse(op, i);
      role.role = Role::Attention;
      return;
    }
    if (op.label == StepOp::GradSync &&
        (section == Section::Head || section == Section::Backward || section == Section::Tail)) {
      grad_sync(op, role);
      return;
    }
    switch (section) {
      case Section::Prologue:
        if (op.label != StepOp::Embedding) refuse(op, i);
        role.role = Role::Embed;
        return;
      case Section::Forward:
        role.role = forward_role(op, i);
        return;
      case Section::Head:
        role.role = head_role(op, i);
        return;
      case Section::Backward:
        if (op.flags & kOpRecompute) {
          if (norms_ == 0 && ropes_ == 0 && residuals_ == 0) recompute_counts_ = true;
          role.role = forward_role(op, i);
          return;
        }
        if (recompute_counts_) {  // the layer's own backward counts its norms and residuals afresh
          norms_ = ropes_ = residuals_ = 0;
          recompute_counts_ = false;
        }
        role.role = backward_role(op, i);
        return;
      case Section::Tail:
        if (op.label != StepOp::Embedding) refuse(op, i);
        role.role = Role::EmbedBackward;
        return;
      case Section::Epilogue:
        if (op.label == StepOp::Optimizer) {
          role.role = Role::Optimizer;
          out_.optimizer_op = i;
          return;
        }
        if (op.label != StepOp::ParamGather) refuse(op, i);
        role.role = Role::ParamGather;
        role.level = level_of(op);
        if (role.level == int(groups_.size()) - 1) ++out_.gather_buckets;
        role.bucket = out_.gather_buckets - 1;
        return;
      default:
        refuse(op, i);
    }
  }

  const StepTemplate& step_;
  const RankProgram& program_;
  const ParameterLayout& layout_;
  const ModelShape& shape_;
  const std::vector<int>& groups_;
  const Plan& plan_;
  StepRoles out_;
  int norms_ = 0, ropes_ = 0, residuals_ = 0;
  bool recompute_counts_ = false;
  std::vector<SyncRange> ranges_;
  size_t range_ = 0;
};

}  // namespace

const char* to_string(Role role) {
  static constexpr const char* kNames[] = {"attention",
                                           "embed",
                                           "norm1",
                                           "q_proj",
                                           "rope_q",
                                           "k_proj",
                                           "rope_k",
                                           "v_proj",
                                           "out_proj",
                                           "residual1",
                                           "norm2",
                                           "gate",
                                           "up",
                                           "act",
                                           "down",
                                           "residual2",
                                           "rope_qk",
                                           "down_data",
                                           "down_weight",
                                           "act_backward",
                                           "gate_data",
                                           "gate_weight",
                                           "up_data",
                                           "up_weight",
                                           "norm2_bwd",
                                           "residual2_bwd",
                                           "out_proj_data",
                                           "out_proj_weight",
                                           "rope_bwd",
                                           "q_weight",
                                           "k_weight",
                                           "v_weight",
                                           "q_data",
                                           "k_data",
                                           "v_data",
                                           "norm1_bwd",
                                           "residual1_bwd",
                                           "final_norm",
                                           "lm_head",
                                           "loss",
                                           "lm_head_data",
                                           "lm_head_weight",
                                           "final_norm_bwd",
                                           "embed_bwd",
                                           "grad_sync",
                                           "optimizer",
                                           "param_gather"};
  return kNames[size_t(role)];
}

StepRoles step_roles(const StepTemplate& step, const RankProgram& program, const std::vector<uint32_t>& origin,
                     const ParameterLayout& layout, const ModelShape& shape, const std::vector<int>& gradient_groups,
                     const Plan& plan) {
  return Classifier(step, program, layout, shape, gradient_groups, plan).run(origin);
}

}  // namespace wallfacer::train
