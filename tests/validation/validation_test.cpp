// Whole-step predictions against published end-to-end measurements (docs/validation.md). For every
// entry of tests/validation/published.yaml that the planner can express, the plan is built with
// exactly the published layout and priced with the default calibration; the prediction, its error
// and the summary figures must match what docs/validation.md states, so a change that moves a
// prediction fails here and names the entry. WALLFACER_PRINT_VALIDATION=1 prints the doc's tables
// as recomputed, to paste into docs/validation.md.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

const std::string kDir = std::string(WALLFACER_SOURCE_DIR) + "/tests/validation";
const std::string kData = kDir + "/published.yaml";
const std::string kDoc = std::string(WALLFACER_SOURCE_DIR) + "/docs/validation.md";

bool is_null(const YAML::Node& n) {
  return !n || n.IsNull();
}

struct Entry {
  std::string id, source_group, comparison;
  std::string calibration;  // calibration file of the kernel the source ran, relative to kDir; empty: defaults
  std::string cluster, model;
  int nodes = 0, gpus = 0;
  YAML::Node model_node, training, measured;
  YAML::Node assumed;              // framework defaults taken where the source states nothing
  YAML::Node unsupported;          // what the run used that the planner cannot express yet
  std::vector<std::string> needs;  // empty: expressible now
  // A training key as stated, or else as assumed (null when neither).
  YAML::Node key(const char* name) const {
    if (!is_null(training[name])) return training[name];
    return assumed && !is_null(assumed[name]) ? assumed[name] : YAML::Node();
  }
};

struct Result {
  const Entry* entry = nullptr;
  Workload workload;
  std::string layout;
  double measured_metric = 0, measured_tokens = 0;  // metric as published; tokens/s whole job
  double predicted_tokens = 0, predicted_metric = 0;
  double error_pct = 0, memory_GiB = 0;
  double step_ms = 0, compute_ms = 0;  // predicted step; busiest rank's compute stream
  StepParts parts;                     // where the predicted step goes (critical rank)
};

// FLOPs per trained token by the source's convention, or nullopt when not implemented.
// megatron-2104.04473: Narayanan et al. 2021 Eq. 3 as Megatron's throughput_calculator applies it,
// 24 k L H^2 (1 + N / (6 H) + V / (16 L H)), k = 4 with recomputation, 3 without.
std::optional<double> flops_per_token(const Entry& e, const Workload& w) {
  const std::string convention =
      is_null(e.measured["flops_convention"]) ? "" : e.measured["flops_convention"].as<std::string>();
  // nemo-model-flops: NeMo's model-FLOPs formula of the Llama family (nemo/utils/flops_formulas.py),
  // per token L H^2 (12 + 12 G / A + 18 F / H + 12 N / H + 6 V / (L H)): no causal halving.
  if (convention == "nemo-model-flops") {
    const double L = w.layers, H = double(w.hidden), N = double(w.seq), V = double(w.vocab), F = double(w.ffn);
    return L * H * H * (12.0 + 12.0 * w.kv_heads / w.heads + 18.0 * F / H + 12.0 * N / H + 6.0 * V / (L * H));
  }
  // palm-6n-attention: PaLM's MFU count (Chowdhery et al. 2022, arXiv 2204.02311, appendix B), as the
  // Llama 3 report cites it and torchtitan implements it: 6 N + 12 L h d N_seq per token, N the
  // parameters less the input embedding, the attention term without causal halving.
  if (convention == "palm-6n-attention") {
    const double n = double(w.parameter_count() - w.vocab * w.hidden);
    return 6.0 * n + 12.0 * w.layers * double(w.heads) * w.head_dim * double(w.seq);
  }
  if (convention == "megatron-2104.04473") {
    const double k = e.measured["recompute_factor"].as<double>();
    const double L = w.layers, H = double(w.hidden), N = double(w.seq), V = double(w.vocab);
    return 24.0 * k * L * H * H * (1.0 + N / (6.0 * H) + V / (16.0 * L * H));
  }
  return std::nullopt;
}

// Tokens per second of the whole job from the published metric; nullopt without a conversion.
std::optional<double> measured_tokens_per_s(const Entry& e, const Workload& w) {
  const std::string metric = e.measured["metric"].as<std::string>();
  const double value = e.measured["value"].as<double>();
  if (metric == "tokens_per_s") return value;
  if (metric == "tokens_per_s_per_gpu") return value * e.gpus;
  if (metric == "tflops_per_gpu") {
    const auto f = flops_per_token(e, w);
    if (!f) return std::nullopt;
    return value * 1e12 * e.gpus / *f;
  }
  return std::nullopt;
}

std::vector<std::string> needs_of(const Entry& e) {
  std::vector<std::string> needs;
  const auto topologies = Topology::preset_names();
  const auto models = model_preset_names();
  if (std::find(topologies.begin(), topologies.end(), e.cluster) == topologies.end())
    needs.push_back("cluster preset " + e.cluster);
  if (std::find(models.begin(), models.end(), e.model) == models.end()) needs.push_back("model preset " + e.model);
  if (e.model_node["moe"] && e.model_node["moe"].as<bool>()) needs.push_back("mixture of experts");
  for (const YAML::Node& feature : e.unsupported)
    needs.push_back(feature.as<std::string>());
  const YAML::Node& t = e.training;
  if (t["tp"] && t["tp"].IsNull()) needs.push_back("a stated tensor parallel degree");
  if (t["pp"] && t["pp"].IsNull()) needs.push_back("a stated pipeline parallel degree");
  std::vector<std::string> unstated;
  for (const char* key : {"batch", "strategy", "S", "D", "zero", "checkpointing", "dtype"})
    if (is_null(e.key(key))) unstated.push_back(key);
  if (!unstated.empty()) needs.push_back(fmt::format("a stated layout ({})", fmt::join(unstated, ", ")));
  Workload w;
  if (std::find(models.begin(), models.end(), e.model) != models.end()) w = load_workload(e.model);
  w.seq = e.key("seq").as<int64_t>();
  const std::string metric = e.measured["metric"].as<std::string>();
  if ((metric == "tflops_per_gpu" || metric == "mfu") && !flops_per_token(e, w)) {
    const YAML::Node& c = e.measured["flops_convention"];
    needs.push_back(is_null(c) ? "a stated FLOP convention" : "the FLOP convention " + c.as<std::string>());
  }
  return needs;
}

std::vector<Entry> load_entries() {
  const YAML::Node root = YAML::LoadFile(kData);
  std::vector<Entry> entries;
  std::set<std::string> ids;
  for (const YAML::Node& n : root["entries"]) {
    Entry e;
    e.id = n["id"].as<std::string>();
    EXPECT_TRUE(ids.insert(e.id).second) << "duplicate id " << e.id;
    for (const char* key : {"source", "source_group", "read_from", "cluster", "model", "training", "measured"})
      EXPECT_TRUE(n[key]) << e.id << ": no '" << key << "'";
    e.source_group = n["source_group"].as<std::string>();
    e.comparison = is_null(n["comparison"]) ? "" : n["comparison"].as<std::string>();
    e.cluster = n["cluster"]["preset"].as<std::string>();
    e.nodes = n["cluster"]["nodes"].as<int>();
    e.gpus = n["cluster"]["gpus"].as<int>();
    e.model_node = n["model"];
    e.model = n["model"]["preset"].as<std::string>();
    e.training = n["training"];
    e.measured = n["measured"];
    if (n["assumed"]) e.assumed = n["assumed"];
    if (n["unsupported"]) e.unsupported = n["unsupported"];
    if (n["calibration"]) e.calibration = n["calibration"].as<std::string>();
    e.needs = needs_of(e);
    entries.push_back(e);
  }
  return entries;
}

// "S=2 D=16, ZeRO 3, full ckpt, fp16, fp32 grads, batch 16" plus the strategy's knobs.
std::string layout_of(const StrategyParams& p, const Workload& w) {
  std::string s = fmt::format("S={} D={}", p.sequence_parallel, p.data_parallel);
  if (p.tensor_parallel > 1) s += fmt::format(" T={}", p.tensor_parallel);
  if (p.pipeline_parallel > 1) s += fmt::format(" P={}", p.pipeline_parallel);
  if (p.virtual_stages > 1) s += fmt::format(" V={}", p.virtual_stages);
  if (w.microbatches > 1) s += fmt::format(" M={}", w.microbatches);
  if (const auto* k = std::get_if<UspKnobs>(&p.knobs)) s += fmt::format(" u={} r={}", k->ulysses, k->ring);
  if (const auto* k = std::get_if<DoubleRingKnobs>(&p.knobs)) s += fmt::format(" u={} w={}", k->ulysses, k->window);
  if (const auto* k = std::get_if<WallFacerKnobs>(&p.knobs)) s += fmt::format(" C={}", k->team);
  return s + fmt::format(", ZeRO {}, {} ckpt, {}{}, {} grads, batch {}", w.zero_stage, to_string(w.checkpointing),
                         to_string(w.dtype), w.fp8_linear ? " + fp8 GEMMs" : "", to_string(w.grad_comm_dtype), w.batch);
}

// The workload as published: the preset with the entry's training keys and model overrides
// ("lightest-that-fits" checkpointing starts from none).
Workload published_workload(const Entry& e) {
  const YAML::Node& t = e.training;
  WorkloadOverrides o;
  o.seq = e.key("seq").as<int64_t>();
  o.batch = e.key("batch").as<int>();
  o.dtype = t["dtype"].as<std::string>();
  o.zero_stage = e.key("zero").as<int>();
  const std::string checkpointing = e.key("checkpointing").as<std::string>();
  o.checkpointing = checkpointing == "lightest-that-fits" ? "none" : checkpointing;
  if (t["linear_dtype"] && t["linear_dtype"].as<std::string>() == "fp8") o.fp8_linear = true;
  if (!is_null(e.key("grad_comm_dtype"))) o.grad_comm_dtype = e.key("grad_comm_dtype").as<std::string>();
  if (const YAML::Node& ov = e.model_node["overrides"]) {
    if (ov["layers"]) o.layers = ov["layers"].as<int>();
    if (ov["hidden"]) o.hidden = ov["hidden"].as<int64_t>();
    if (ov["heads"]) o.heads = ov["heads"].as<int>();
    if (ov["kv_heads"]) o.kv_heads = ov["kv_heads"].as<int>();
    if (ov["head_dim"]) o.head_dim = ov["head_dim"].as<int>();
    if (ov["ffn"]) o.ffn = ov["ffn"].as<int64_t>();
    if (ov["vocab"]) o.vocab = ov["vocab"].as<int64_t>();
  }
  return load_workload(e.model, o);
}

// The published degrees and the strategy's knobs.
StrategyParams params_of(const Entry& e, StrategyKind kind) {
  const YAML::Node& t = e.training;
  StrategyParams params;
  params.sequence_parallel = t["S"].as<int>();
  params.data_parallel = t["D"].as<int>();
  params.tensor_parallel = t["tp"] ? t["tp"].as<int>() : 1;
  params.pipeline_parallel = t["pp"] ? t["pp"].as<int>() : 1;
  // Virtual stages per pipeline rank (interleaved 1F1B), where the run used them.
  if (!is_null(e.key("vpp"))) params.virtual_stages = e.key("vpp").as<int>();
  params.knobs = default_knobs(kind);
  if (const YAML::Node& k = t["knobs"]) {
    if (auto* u = std::get_if<UspKnobs>(&params.knobs)) {
      u->ulysses = k["ulysses"].as<int>();
      u->ring = k["ring"].as<int>();
    } else if (auto* d = std::get_if<DoubleRingKnobs>(&params.knobs)) {
      d->ulysses = k["ulysses"].as<int>();
      d->window = k["window"].as<int>();
    } else if (auto* c = std::get_if<WallFacerKnobs>(&params.knobs)) {
      c->team = k["team"].as<int>();
    }
  }
  return params;
}

Result predict(const Entry& e) {
  Result r;
  r.entry = &e;
  const YAML::Node& t = e.training;
  // The source's FLOP convention counts the model as published; the plan may price it with
  // `pipeline_layers` instead when the source ran uneven pipeline stages the planner cannot split
  // (docs/validation.md, "Uneven pipeline stages").
  const Workload published = published_workload(e);
  r.workload = published;
  if (const YAML::Node& pl = e.model_node["pipeline_layers"]) r.workload.layers = pl.as<int>();
  const Topology topology = Topology::load(e.cluster, e.nodes);
  const std::string strategy = t["strategy"].as<std::string>();
  const StrategyKind kind = strategy == "none" ? StrategyKind::Ring : parse_strategy(strategy);
  const StrategyParams params = params_of(e, kind);
  // The stated micro-batches, or else micro-batches of one sequence (the micro-batch size every
  // source's framework runs long sequences with, and the planner's search assumes for pipelines):
  // without pipelining, gradient accumulation over a replica's batch / D sequences.
  r.workload.microbatches =
      !is_null(e.key("microbatches")) ? e.key("microbatches").as<int>() : r.workload.batch / params.data_parallel;
  const int ranks = params.sequence_parallel * params.data_parallel * params.tensor_parallel * params.pipeline_parallel;
  EXPECT_EQ(ranks, e.gpus) << e.id << ": T x S x D x Pp must be the published GPU count";
  const Feasibility f = check_feasible(kind, params, r.workload, ranks);
  EXPECT_TRUE(f.ok) << e.id << ": " << f.reason;
  Plan plan = make_plan(kind, params, r.workload, topology, ranks);
  plan.scope = Scope::Step;
  // The attention kernel the source ran, where it is not the default calibration's (a sourced
  // calibration file next to published.yaml, docs/validation.md "Kernels").
  const Calibration calibration =
      e.calibration.empty() ? Calibration::defaults() : Calibration::load(kDir + "/" + e.calibration);
  const CostModel model(topology, calibration);
  CostBreakdown cost = model.evaluate_step(plan);
  // "lightest-that-fits": the least recomputation whose predicted memory fits the GPU, what a user
  // of the framework picks when memory forces it (decided by memory, never by throughput).
  const bool lightest = e.key("checkpointing").as<std::string>() == "lightest-that-fits";
  for (Checkpointing mode : {Checkpointing::Selective, Checkpointing::Full}) {
    if (!lightest || cost.memory.total_GiB <= topology.gpu().memory_GiB) break;
    plan.workload.checkpointing = r.workload.checkpointing = mode;
    cost = model.evaluate_step(plan);
  }
  r.layout =
      (strategy == "none" ? std::string("no SP") : std::string(to_string(kind))) + " " + layout_of(params, r.workload);
  std::vector<std::string> assumed;
  for (const char* key : {"seq", "batch", "zero", "checkpointing", "microbatches", "grad_comm_dtype", "vpp"})
    if (is_null(t[key]) && e.assumed && !is_null(e.assumed[key])) assumed.push_back(key);
  if (!assumed.empty()) r.layout += fmt::format(" (assumed: {})", fmt::join(assumed, ", "));
  if (!e.calibration.empty())
    r.layout += fmt::format("; kernel {}", std::filesystem::path(e.calibration).stem().string());
  r.measured_metric = e.measured["value"].as<double>();
  r.measured_tokens = *measured_tokens_per_s(e, published);
  r.predicted_tokens = cost.tokens_per_s;
  r.predicted_metric = r.predicted_tokens * (r.measured_metric / r.measured_tokens);  // same conversion back
  r.error_pct = 100.0 * (r.predicted_tokens - r.measured_tokens) / r.measured_tokens;
  r.memory_GiB = cost.memory.total_GiB;
  r.step_ms = cost.step_ms;
  r.compute_ms = cost.compute_ms;
  r.parts = cost.parts;
  return r;
}

// The doc's markdown tables, each as its header cells and rows of cells.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int column(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return int(i);
    ADD_FAILURE() << "docs/validation.md: a table has no column '" << name << "'";
    return 0;
  }
};

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|') {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  for (std::string& c : cells)
    c.erase(std::remove(c.begin(), c.end(), '`'), c.end());
  return cells;
}

std::vector<Table> read_tables(std::string* text) {
  std::ifstream in(kDoc);
  EXPECT_TRUE(in) << "cannot read " << kDoc;
  std::vector<Table> tables;
  std::string line;
  bool in_table = false;
  while (std::getline(in, line)) {
    *text += line + "\n";
    if (line.rfind("|", 0) != 0) {
      in_table = false;
      continue;
    }
    if (!in_table) {
      tables.push_back({cells_of(line), {}});
      in_table = true;
    } else if (line.rfind("|---", 0) != 0) {
      tables.back().rows.push_back(cells_of(line));
    }
  }
  return tables;
}

const Table* find_table(const std::vector<Table>& tables, const std::string& first, const std::string& second) {
  for (const Table& t : tables)
    if (t.header.size() >= 2 && t.header[0] == first && t.header[1] == second) return &t;
  return nullptr;
}

// `doc` as printed with `decimals` digits equals `value`: within 0.05 % or the printed rounding.
void expect_close(const std::string& what, const std::string& doc, double value, int decimals) {
  double parsed = 0;
  try {
    parsed = std::stod(doc);
  } catch (...) {
    ADD_FAILURE() << what << ": docs/validation.md says '" << doc << "', not a number";
    return;
  }
  const double tolerance = std::max(5e-4 * std::fabs(value), 0.5 * std::pow(10.0, -decimals) + 1e-9);
  EXPECT_LE(std::fabs(parsed - value), tolerance)
      << what << " moved: docs/validation.md says " << doc << ", recomputed " << fmt::format("{:.{}f}", value, decimals)
      << fmt::format(" ({:+.3f} %)", 100.0 * (value - parsed) / (parsed == 0 ? 1 : parsed))
      << "; rerun with WALLFACER_PRINT_VALIDATION=1 and update the doc if the change is intended";
}

struct Gain {
  std::string comparison, best, other;
  double measured = 0, predicted = 0;
};

TEST(Validation, PredictionsMatchTheDoc) {
  const std::vector<Entry> entries = load_entries();
  ASSERT_FALSE(entries.empty());
  std::vector<Result> results;
  for (const Entry& e : entries)
    if (e.needs.empty()) results.push_back(predict(e));
  ASSERT_FALSE(results.empty()) << "no entry of published.yaml is expressible";

  double mae = 0;
  for (const Result& r : results)
    mae += std::fabs(r.error_pct);
  mae /= double(results.size());

  // Comparisons: the measured fastest (in the source's own metric) against the predicted fastest,
  // and the gain of the measured fastest over every other entry, measured and predicted.
  std::map<std::string, std::vector<const Result*>> groups;
  for (const Result& r : results)
    if (!r.entry->comparison.empty()) groups[r.entry->comparison].push_back(&r);
  struct Ranking {
    std::string comparison, measured_best, predicted_best;
    int n = 0;
  };
  std::vector<Ranking> rankings;
  std::vector<Gain> gains;
  for (const auto& [name, members] : groups) {
    if (members.size() < 2) continue;
    const Result* mb = *std::max_element(members.begin(), members.end(), [](const Result* a, const Result* b) {
      return a->measured_metric < b->measured_metric;
    });
    const Result* pb = *std::max_element(members.begin(), members.end(), [](const Result* a, const Result* b) {
      return a->predicted_metric < b->predicted_metric;
    });
    rankings.push_back({name, mb->entry->id, pb->entry->id, int(members.size())});
    for (const Result* r : members)
      if (r != mb)
        gains.push_back({name, mb->entry->id, r->entry->id, 100.0 * (mb->measured_metric / r->measured_metric - 1),
                         100.0 * (mb->predicted_metric / r->predicted_metric - 1)});
  }
  const int agreements = int(std::count_if(rankings.begin(), rankings.end(),
                                           [](const Ranking& k) { return k.measured_best == k.predicted_best; }));
  // The goal's third criterion: the predicted gain within 15 points of the measured gain.
  const int close_gains = int(std::count_if(gains.begin(), gains.end(),
                                            [](const Gain& g) { return std::fabs(g.predicted - g.measured) <= 15.0; }));

  if (const char* print = std::getenv("WALLFACER_PRINT_VALIDATION"); print && std::string(print) == "1") {
    std::string out =
        "| id | source | cluster | model | seq | layout | measured | measured tokens/s | predicted tokens/s | "
        "predicted | error % | memory GiB | step ms | compute ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Result& r : results)
      out += fmt::format(
          "| `{}` | {} | {} × {} | {} | {} | {} | {:.0f} {} | {:.0f} | {:.0f} | {:.1f} | {:.2f} | {:.1f} | {:.0f} | "
          "{:.0f} |\n",
          r.entry->id, r.entry->source_group, r.entry->cluster, r.entry->nodes, r.entry->model, r.workload.seq,
          r.layout, r.measured_metric, r.entry->measured["metric"].as<std::string>(), r.measured_tokens,
          r.predicted_tokens, r.predicted_metric, r.error_pct, r.memory_GiB, r.step_ms, r.compute_ms);
    out += fmt::format("\nmean absolute error of throughput: {:.2f} % over {} entries\n\n", mae, results.size());
    out += "| comparison | entries | measured fastest | predicted fastest | agree |\n|---|---|---|---|---|\n";
    for (const Ranking& k : rankings)
      out += fmt::format("| `{}` | {} | `{}` | `{}` | {} |\n", k.comparison, k.n, k.measured_best, k.predicted_best,
                         k.measured_best == k.predicted_best ? "yes" : "no");
    out += fmt::format("\nranking agreements: {} of {}\n\n", agreements, rankings.size());
    out += "| gain of | over | measured gain % | predicted gain % | difference (points) |\n|---|---|---|---|---|\n";
    for (const Gain& g : gains)
      out += fmt::format("| `{}` | `{}` | {:.2f} | {:.2f} | {:.2f} |\n", g.best, g.other, g.measured, g.predicted,
                         g.predicted - g.measured);
    out += fmt::format("\ngains within 15 points of the measured: {} of {}\n", close_gains, gains.size());
    out +=
        "\n| entry | step ms | compute | imbalance | exposed nvlink | exposed pcie | exposed network | idle | hidden "
        "| slowed |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Result& r : results) {
      const StepParts& p = r.parts;
      out += fmt::format("| `{}` | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n",
                         r.entry->id, r.step_ms, p.compute_ms, p.imbalance_ms, p.exposed_ms[0], p.exposed_ms[1],
                         p.exposed_ms[2], p.idle_ms, p.hidden_ms, p.slowdown_ms);
    }
    out += "\n| id | needs |\n|---|---|\n";
    for (const Entry& e : entries)
      if (!e.needs.empty()) out += fmt::format("| `{}` | {} |\n", e.id, fmt::join(e.needs, "; "));
    std::printf("\n%s\n", out.c_str());
  }

  std::string text;
  const std::vector<Table> tables = read_tables(&text);
  const Table* predictions = find_table(tables, "id", "source");
  ASSERT_NE(predictions, nullptr) << "docs/validation.md has no predictions table (| id | source | ...)";
  std::map<std::string, const std::vector<std::string>*> rows;
  for (const auto& row : predictions->rows)
    rows[row.at(0)] = &row;
  EXPECT_EQ(rows.size(), results.size()) << "docs/validation.md lists other entries than the expressible ones";
  const int c_measured = predictions->column("measured tokens/s"),
            c_predicted = predictions->column("predicted tokens/s");
  const int c_metric = predictions->column("predicted"), c_error = predictions->column("error %");
  for (const Result& r : results) {
    const auto it = rows.find(r.entry->id);
    if (it == rows.end()) {
      ADD_FAILURE() << r.entry->id << " is expressible but not in docs/validation.md's table";
      continue;
    }
    const std::vector<std::string>& row = *it->second;
    expect_close(r.entry->id + " measured tokens/s", row.at(c_measured), r.measured_tokens, 0);
    expect_close(r.entry->id + " predicted tokens/s", row.at(c_predicted), r.predicted_tokens, 0);
    expect_close(r.entry->id + " predicted " + r.entry->measured["metric"].as<std::string>(), row.at(c_metric),
                 r.predicted_metric, 1);
    expect_close(r.entry->id + " error %", row.at(c_error), r.error_pct, 2);
  }

  const std::string mae_key = "mean absolute error of throughput: ";
  const size_t at = text.find(mae_key);
  ASSERT_NE(at, std::string::npos) << "docs/validation.md does not state '" << mae_key << "'";
  expect_close("mean absolute error", text.substr(at + mae_key.size(), 12), mae, 2);
  const std::string agree_key = fmt::format("ranking agreements: {} of {}", agreements, rankings.size());
  EXPECT_NE(text.find(agree_key), std::string::npos) << "docs/validation.md should say '" << agree_key << "'";
  const std::string gains_key =
      fmt::format("gains within 15 points of the measured: {} of {}", close_gains, gains.size());
  EXPECT_NE(text.find(gains_key), std::string::npos) << "docs/validation.md should say '" << gains_key << "'";

  const Table* ranking_table = find_table(tables, "comparison", "entries");
  ASSERT_NE(ranking_table, nullptr) << "docs/validation.md has no ranking table";
  EXPECT_EQ(ranking_table->rows.size(), rankings.size());
  for (const Ranking& k : rankings) {
    bool found = false;
    for (const auto& row : ranking_table->rows) {
      if (row.at(0) != k.comparison) continue;
      found = true;
      EXPECT_EQ(row.at(2), k.measured_best) << k.comparison;
      EXPECT_EQ(row.at(3), k.predicted_best) << k.comparison << ": the predicted fastest layout changed";
    }
    EXPECT_TRUE(found) << k.comparison << " is not in the ranking table";
  }

  const Table* gain_table = find_table(tables, "gain of", "over");
  ASSERT_NE(gain_table, nullptr) << "docs/validation.md has no gains table";
  EXPECT_EQ(gain_table->rows.size(), gains.size());
  for (const Gain& g : gains) {
    bool found = false;
    for (const auto& row : gain_table->rows) {
      if (row.at(0) != g.best || row.at(1) != g.other) continue;
      found = true;
      const std::string what = "gain of " + g.best + " over " + g.other;
      expect_close(what + " (measured)", row.at(2), g.measured, 2);
      expect_close(what + " (predicted)", row.at(3), g.predicted, 2);
    }
    EXPECT_TRUE(found) << "gain of " << g.best << " over " << g.other << " is not in the gains table";
  }

  // Where each predicted step goes: the step and its compute share, in ms (printed rounded).
  const Table* parts_table = find_table(tables, "entry", "step ms");
  ASSERT_NE(parts_table, nullptr) << "docs/validation.md has no table of where the steps go (| entry | step ms | ...)";
  EXPECT_EQ(parts_table->rows.size(), results.size());
  for (const Result& r : results) {
    bool found = false;
    for (const auto& row : parts_table->rows) {
      if (row.at(0) != r.entry->id) continue;
      found = true;
      expect_close(r.entry->id + " step ms", row.at(1), r.step_ms, 0);
      expect_close(r.entry->id + " compute ms", row.at(2), r.parts.compute_ms, 0);
      expect_close(r.entry->id + " exposed network ms", row.at(6), r.parts.exposed_ms[2], 0);
    }
    EXPECT_TRUE(found) << r.entry->id << " is not in the table of where the steps go";
  }

  const Table* blocked = find_table(tables, "id", "needs");
  ASSERT_NE(blocked, nullptr) << "docs/validation.md has no table of entries not yet expressible";
  std::map<std::string, std::string> doc_needs;
  for (const auto& row : blocked->rows)
    doc_needs[row.at(0)] = row.at(1);
  size_t n_blocked = 0;
  for (const Entry& e : entries) {
    if (e.needs.empty()) continue;
    ++n_blocked;
    const auto it = doc_needs.find(e.id);
    if (it == doc_needs.end()) {
      ADD_FAILURE() << e.id << " is not expressible and missing from docs/validation.md";
      continue;
    }
    EXPECT_EQ(it->second, fmt::format("{}", fmt::join(e.needs, "; "))) << e.id;
  }
  EXPECT_EQ(doc_needs.size(), n_blocked) << "docs/validation.md lists entries as blocked that are not";
}

}  // namespace
}  // namespace wallfacer
