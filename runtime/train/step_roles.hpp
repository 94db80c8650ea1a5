// Internal to the trainer: what each op of a rank's whole-step program (docs/step.md) does to the
// model (trainer_step.cpp): which layer it belongs to, which tensor it computes, and for the
// gradient buckets which range of the flat gradient array they carry. Read off the program's
// sections, labels, GEMM parts and recomputation flags, in the order the step builder emits them.
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/train/model.hpp>

namespace wallfacer::train {

enum class Role : uint8_t {
  Attention,  // an op of the strategy's attention program: the executor runs it
  Embed,
  Norm1,
  QProj,
  RopeQ,
  KProj,
  RopeK,
  VProj,
  OutProj,
  Residual1,
  Norm2,
  Gate,
  Up,
  Act,
  Down,
  Residual2,
  RopeQK,  // selective recomputation: rotary on Q and K again
  DownData,
  DownWeight,
  ActBackward,
  GateData,
  GateWeight,
  UpData,
  UpWeight,
  Norm2Backward,
  Residual2Backward,
  OutProjData,
  OutProjWeight,
  RopeBackward,
  QWeight,
  KWeight,
  VWeight,
  QData,
  KData,
  VData,
  Norm1Backward,
  Residual1Backward,
  FinalNorm,
  LmHead,
  Loss,
  LmHeadData,
  LmHeadWeight,
  FinalNormBackward,
  EmbedBackward,
  GradSync,
  Optimizer,
  ParamGather,
};
const char* to_string(Role role);

struct OpRole {
  Role role = Role::Attention;
  int layer = -1;          // model layer of a layer-section op
  bool recompute = false;  // kOpRecompute
  int level = 0;           // GradSync, ParamGather: position of its group in the gradient groups' order
  int bucket = -1;         // GradSync: index into StepRoles::buckets; ParamGather: gather bucket
};

// A gradient bucket: `count` elements of the flat gradient array from `offset` (the program's
// elements, plus the learned position table with the embedding's last bucket).
struct GradBucket {
  int64_t offset = 0, count = 0;
};

struct StepRoles {
  std::vector<OpRole> ops;  // by program op
  std::vector<GradBucket> buckets;
  int gather_buckets = 0;     // ZeRO 1/2: parameter gathers (each over every gradient group)
  int32_t optimizer_op = -1;  // the Optimizer op (the update and what follows it start here)
};

// Roles of `program`, unrolled from `step` (origin: unroll's template op by flat op). Throws
// ScheduleError when the program holds ops the trainer cannot run (tensor or pipeline parallel,
// fp8 casts, ZeRO-3 gathers) or buckets that do not cover the model's tensors.
StepRoles step_roles(const StepTemplate& step, const RankProgram& program, const std::vector<uint32_t>& origin,
                     const ParameterLayout& layout, const ModelShape& shape, const std::vector<int>& gradient_groups,
                     const Plan& plan);

}  // namespace wallfacer::train
