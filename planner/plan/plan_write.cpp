// Writes plans as YAML (docs/formats/plan.md). The text is a pure function of the plan: fixed key
// order, integers in decimal, doubles with 17 significant digits, so equal plans give identical
// files and read_plan(write_plan(p)) == p.
#include <fmt/format.h>

#include <cctype>
#include <ostream>
#include <sstream>

#include <wallfacer/plan/plan.hpp>

namespace wallfacer {
namespace {

// Plain scalars are kept for names that YAML cannot mistake for anything else (a number, a
// boolean, null) and that hold no flow indicators; everything else is double-quoted. The topology
// hash is always quoted: hex digits may look like a number to other YAML readers.
bool is_plain_safe(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/';
    if (!ok) return false;
  }
  std::string lower;
  for (char c : s)
    lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf"})
    if (lower == word) return false;
  return true;
}

std::string double_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + "\"";
}

std::string quoted(const std::string& s) {
  return is_plain_safe(s) ? s : double_quoted(s);
}

std::string number(double x) {
  return fmt::format("{:.17g}", x);
}
const char* boolean(bool b) {
  return b ? "true" : "false";
}

void write_workload(const Workload& w, std::ostream& out) {
  out << "workload:\n";
  out << "  model: " << quoted(w.model) << "\n";
  out << fmt::format("  layers: {}\n  hidden: {}\n  heads: {}\n  kv_heads: {}\n  head_dim: {}\n", w.layers, w.hidden,
                     w.heads, w.kv_heads, w.head_dim);
  out << fmt::format("  ffn: {}\n  vocab: {}\n  gated_ffn: {}\n", w.ffn, w.vocab, boolean(w.gated_ffn));
  out << fmt::format("  seq: {}\n  batch: {}\n  dtype: {}\n  causal: {}\n  zero_stage: {}\n", w.seq, w.batch,
                     to_string(w.dtype), boolean(w.causal), w.zero_stage);
  out << fmt::format("  checkpointing: {}\n  grad_bucket_MiB: {}\n", to_string(w.checkpointing), w.grad_bucket_MiB);
  if (w.fp8_linear) out << "  fp8_linear: true\n";
  if (w.grad_comm_dtype != DType::FP32) out << fmt::format("  grad_comm_dtype: {}\n", to_string(w.grad_comm_dtype));
  if (w.microbatches > 1) out << fmt::format("  microbatches: {}\n", w.microbatches);
}

// The degrees, then the strategy's own knobs and placement (none for strategies without).
void write_params(const StrategyParams& p, std::ostream& out) {
  out << "params:\n";
  out << fmt::format("  sequence_parallel: {}\n  data_parallel: {}\n", p.sequence_parallel, p.data_parallel);
  if (p.tensor_parallel > 1) out << fmt::format("  tensor_parallel: {}\n", p.tensor_parallel);
  if (p.pipeline_parallel > 1) out << fmt::format("  pipeline_parallel: {}\n", p.pipeline_parallel);
  if (p.virtual_stages > 1) out << fmt::format("  virtual_stages: {}\n", p.virtual_stages);
  if (const auto* k = std::get_if<UspKnobs>(&p.knobs))
    out << fmt::format("  ulysses: {}\n  ring: {}\n", k->ulysses, k->ring);
  if (const auto* k = std::get_if<DoubleRingKnobs>(&p.knobs))
    out << fmt::format("  ulysses: {}\n  window: {}\n", k->ulysses, k->window);
  if (const auto* k = std::get_if<WallFacerKnobs>(&p.knobs)) out << fmt::format("  team: {}\n", k->team);
  if (!std::holds_alternative<NoKnobs>(p.knobs)) out << "  placement: " << to_string(placement_of(p)) << "\n";
}

void write_ranks(const std::vector<RankSlot>& ranks, std::ostream& out) {
  if (ranks.empty()) {
    out << "ranks: []\n";
    return;
  }
  out << "ranks:\n";
  for (const RankSlot& r : ranks)
    out << fmt::format("  - {{rank: {}, gpu: {}, node: {}, local_gpu: {}, nic: {}}}\n", r.rank, r.gpu, r.node,
                       r.local_gpu, quoted(r.nic));
}

void write_groups(const std::vector<CommGroup>& groups, std::ostream& out) {
  if (groups.empty()) {
    out << "groups: []\n";
    return;
  }
  out << "groups:\n";
  for (const CommGroup& g : groups) {
    // Ring is the default, so plans without a tree read back the same and stay as they were.
    const std::string all_reduce =
        g.all_reduce == AllReduceAlgorithm::Ring ? "" : fmt::format(", all_reduce: {}", to_string(g.all_reduce));
    out << fmt::format("  - {{name: {}, kind: {}, ranks: [{}]{}}}\n", quoted(g.name), to_string(g.kind),
                       fmt::join(g.ranks, ", "), all_reduce);
  }
}

void write_prediction(const Prediction& p, std::ostream& out) {
  out << "prediction:\n";
  out << "  forward_ms: " << number(p.forward_ms) << "\n";
  out << "  backward_ms: " << number(p.backward_ms) << "\n";
  out << "  step_ms: " << number(p.step_ms) << "\n";
  out << fmt::format("  p2p_bytes_forward: {}\n  p2p_bytes_backward: {}\n", p.p2p_bytes_forward, p.p2p_bytes_backward);
  out << fmt::format("  collective_bytes_forward: {}\n  collective_bytes_backward: {}\n", p.collective_bytes_forward,
                     p.collective_bytes_backward);
  out << "  attention_ms: " << number(p.attention_ms) << "\n";
  out << "  tokens_per_s: " << number(p.tokens_per_s) << "\n";
  out << "  memory_GiB: " << number(p.memory_GiB) << "\n";
  out << "  mfu: " << number(p.mfu) << "\n";
}

}  // namespace

void write_plan(const Plan& plan, std::ostream& out) {
  out << "# wallfacer plan: strategy, rank -> GPU mapping and communication groups (docs/formats/plan.md)\n";
  out << "format_version: " << Plan::kFormatVersion << "\n";
  out << fmt::format("topology: {{name: {}, hash: {}, nodes: {}{}}}\n", quoted(plan.topology_name),
                     double_quoted(plan.topology_hash), plan.topology_nodes,
                     plan.topology_file.empty() ? "" : ", file: " + double_quoted(plan.topology_file));
  out << "scope: " << to_string(plan.scope) << "\n";
  write_workload(plan.workload, out);
  out << "strategy: " << to_string(plan.strategy) << "\n";
  write_params(plan.params, out);
  write_ranks(plan.ranks, out);
  write_groups(plan.groups, out);
  if (plan.prediction) write_prediction(*plan.prediction, out);
}

std::string plan_to_yaml(const Plan& plan) {
  std::ostringstream out;
  write_plan(plan, out);
  return out.str();
}

}  // namespace wallfacer
