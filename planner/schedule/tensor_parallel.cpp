// Tensor slices of a plan (tensor_parallel.hpp).
#include "tensor_parallel.hpp"

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::detail {

Feasibility tensor_feasibility(const Workload& w, int T, int ranks) {
  auto no = [](std::string why) { return Feasibility{false, std::move(why)}; };
  if (T < 1) return no(fmt::format("tensor parallel degree {} must be at least 1", T));
  if (ranks % T != 0) return no(fmt::format("{} ranks not divisible by tensor parallel degree {}", ranks, T));
  if (w.heads % T != 0) return no(fmt::format("heads ({}) not divisible by tensor parallel degree {}", w.heads, T));
  if (w.kv_heads % T != 0)
    return no(fmt::format("kv_heads ({}) not divisible by tensor parallel degree {}", w.kv_heads, T));
  return {};
}

Workload slice_workload(const Workload& w, int T) {
  Workload s = w;
  s.heads = w.heads / T;
  s.kv_heads = w.kv_heads / T;
  s.hidden = int64_t(s.heads) * w.head_dim;
  return s;
}

StrategyParams slice_params(const StrategyParams& params) {
  StrategyParams s = params;
  s.tensor_parallel = 1;
  return s;
}

std::vector<CommGroup> lift_groups(const std::vector<CommGroup>& slice_groups, int T, int slice_ranks) {
  if (T == 1) return slice_groups;
  std::vector<CommGroup> out;
  for (int t = 0; t < T; ++t)
    for (const CommGroup& g : slice_groups) {
      CommGroup lifted = g;
      lifted.name = fmt::format("t{}.{}", t, g.name);
      for (int& r : lifted.ranks)
        r = r * T + t;
      out.push_back(std::move(lifted));
    }
  for (int r = 0; r < slice_ranks; ++r) {
    CommGroup tp{fmt::format("tp{}", r), GroupKind::Tensor, {}};
    for (int t = 0; t < T; ++t)
      tp.ranks.push_back(r * T + t);
    out.push_back(std::move(tp));
  }
  return out;
}

std::vector<int> lift_positions(const std::vector<int>& slice_positions, int T) {
  if (T == 1) return slice_positions;
  std::vector<int> out;
  for (int p : slice_positions)
    for (int t = 0; t < T; ++t)
      out.push_back(p * T + t);
  return out;
}

Plan slice_plan(const Plan& plan, int t) {
  const int T = plan.params.tensor_parallel;
  Plan s = plan;
  s.workload = slice_workload(plan.workload, T);
  s.params = slice_params(plan.params);
  s.ranks.clear();
  for (int g = t; g < plan.num_ranks(); g += T) {
    RankSlot slot = plan.ranks[size_t(g)];
    slot.rank = g / T;
    s.ranks.push_back(std::move(slot));
  }
  s.groups.clear();
  const std::string prefix = fmt::format("t{}.", t);
  for (const CommGroup& g : plan.groups) {
    if (g.name.rfind(prefix, 0) != 0) continue;
    CommGroup local = g;
    local.name = g.name.substr(prefix.size());
    for (int& r : local.ranks) {
      if (r % T != t) throw InputError(fmt::format("group '{}': rank {} is not in tensor slice {}", g.name, r, t));
      r /= T;
    }
    s.groups.push_back(std::move(local));
  }
  return s;
}

namespace {

bool has_query_field(FieldMask fields) {
  for (int f = 0; f < kNumFields; ++f)
    if ((fields >> f & 1) && is_query_class(Field(f))) return true;
  return false;
}
bool has_kv_field(FieldMask fields) {
  const FieldMask kv = field_mask({Field::K, Field::V, Field::dK, Field::dV});
  return (fields & kv) != 0;
}

}  // namespace

void lift_program(RankProgram& program, const Plan& plan, int t, int slice_groups) {
  const int T = plan.params.tensor_parallel;
  program.rank *= T;
  for (Op& op : program.ops)
    if (op.peer >= 0) op.peer *= T;
  relift_program(program, plan, 0, t, slice_groups);  // slice 0's, then moved to slice t
}

void relift_program(RankProgram& program, const Plan& plan, int from, int t, int slice_groups) {
  const int T = plan.params.tensor_parallel, by = t - from;
  const int q_shift = by * (plan.workload.heads / T), kv_shift = by * (plan.workload.kv_heads / T);
  auto shift = [](HeadRange& h, int by) {
    if (h.size() > 0) h = {h.begin + by, h.end + by};
  };
  auto shift_by_fields = [&](HeadRange& h, FieldMask fields) {
    if (has_query_field(fields))
      shift(h, q_shift);
    else if (has_kv_field(fields))
      shift(h, kv_shift);
  };
  program.rank += by;
  for (Op& op : program.ops) {
    if (op.peer >= 0) op.peer += by;
    if (op.kind == OpKind::AttnFwd || op.kind == OpKind::AttnBwd)
      shift(op.heads, q_shift);
    else
      shift_by_fields(op.heads, op.fields);
  }
  for (BufferDecl& b : program.buffers)
    shift_by_fields(b.heads, b.fields);
  for (CollectiveSpec& spec : program.collectives) {
    spec.group += by * slice_groups;
    for (HeadRange& h : spec.in_heads)
      shift_by_fields(h, spec.fields);
    for (HeadRange& h : spec.out_heads)
      shift_by_fields(h, spec.fields);
  }
  for (std::vector<Binding>* list : {&program.inputs, &program.outputs})
    for (Binding& b : *list)
      shift_by_fields(b.heads, field_bit(b.field));
}

FlowSet lift_flow_set(const FlowSet& slice_set, int T) {
  if (T == 1) return slice_set;
  FlowSet out{slice_set.name, {}};
  out.flows.reserve(slice_set.flows.size() * size_t(T));
  for (int t = 0; t < T; ++t)
    for (const auto& [src, dst] : slice_set.flows)
      out.flows.emplace_back(src * T + t, dst * T + t);
  return out;
}

}  // namespace wallfacer::detail
