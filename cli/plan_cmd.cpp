// `wallfacer plan`: searches strategies, parameters, placements and GPU orders for a workload on
// a topology (wallfacer/search/search.hpp), prints the ranking (or JSON), and optionally writes the best
// plan, checks its full schedule and re-ranks the best few by simulation.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/text.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/schedule/step.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/search/explain.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "commands.hpp"
#include "common.hpp"
#include "interrupt.hpp"

namespace wallfacer::cli {
namespace {

// Simulations to run at once: one per CPU this process may use (each then runs on one thread), at
// most 8 (a 4,096-GPU simulation needs 0.4 to 1.6 GB).
int default_jobs() {
  return std::clamp(usable_cpus(), 1, 8);
}

struct PlanFlags {
  WorkloadFlags workload;
  TopologyFlags topology;
  int gpus = 0;
  std::string strategy = "auto";
  int top = 10;
  std::string out;
  bool json = false;
  bool check = false;
  int simulate_top = 0;
  int jobs = default_jobs();
  double progress_s = 0;
  int sim_threads = 0;
  std::string calibration;
  bool comm_slowdown = true;
  std::string search = "auto";
  std::string all_reduce = "auto";
  double memory_fraction = 0.9;
  std::string scope = "step";
  std::string tensor = "auto";
  std::string pipeline = "auto";
  std::string virtual_stages = "1";
  std::string zero_stages, checkpointing_modes;
  int sequence = 0, data = 0;
};

// --tp: a fixed degree, or every power of two up to the GPUs of one node (the tensor group stays
// on NVLink / NVSwitch, as Megatron places it).
// A fixed degree given to `flag` ('auto' excluded): at least 1.
int fixed_degree(const char* flag, const std::string& text) {
  int t = 0;
  try {
    size_t used = 0;
    t = std::stoi(text, &used);
    if (used != text.size()) t = 0;
  } catch (const std::exception&) {
    t = 0;
  }
  if (t < 1) throw InputError(flag, 0, fmt::format("expects 'auto' or a degree of at least 1, got '{}'", text));
  return t;
}

std::vector<int> tensor_degrees(const std::string& text, const Topology& topology) {
  if (text != "auto") return {fixed_degree("--tp", text)};
  std::vector<int> degrees;
  for (int t = 1; t <= topology.gpus_per_node(); t *= 2)
    degrees.push_back(t);
  return degrees;
}

// --pp: a fixed degree, or 1, 2, 4, ... stages of whole nodes each (a stage boundary crosses the
// network once, as Megatron places pipeline stages outermost).
std::vector<int> pipeline_degrees(const std::string& text, const Topology& topology, int gpus) {
  if (text != "auto") return {fixed_degree("--pp", text)};
  const int nodes = gpus > 0 ? std::max(1, gpus / std::max(1, topology.gpus_per_node())) : topology.num_nodes();
  std::vector<int> degrees;
  for (int p = 1; p <= nodes; p *= 2)
    degrees.push_back(p);
  return degrees;
}

// --vpp: a fixed count of virtual stages per pipeline rank, or 1, 2, 4, ... up to the layers
// (the search skips those that do not divide a candidate's stage layers).
std::vector<int> virtual_stage_counts(const std::string& text, int layers) {
  if (text != "auto") return {fixed_degree("--vpp", text)};
  std::vector<int> counts;
  for (int v = 1; v <= std::max(1, layers); v *= 2)
    counts.push_back(v);
  return counts;
}

struct Ranked {
  SearchResult result;
  std::vector<std::optional<double>> simulated_ms;  // by candidate
};

std::string bytes_text(int64_t bytes) {
  const double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

// A comma-separated list of `flag` ('auto': `all`; empty: none).
std::vector<std::string> split_list(const char* flag, const std::string& text, const std::string& all) {
  const std::string list = text == "auto" ? all : text;
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin < list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    if (end == begin) throw InputError(flag, 0, fmt::format("an empty item in '{}'", text));
    items.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

SearchOptions search_options(const PlanFlags& flags, const Topology& topology) {
  SearchOptions o;
  o.tensor_degrees = tensor_degrees(flags.tensor, topology);
  o.pipeline_degrees = pipeline_degrees(flags.pipeline, topology, flags.gpus);
  o.auto_microbatches = !flags.workload.overrides.microbatches.has_value();
  for (const std::string& z : split_list("--zero-stages", flags.zero_stages, "0,1,2,3")) {
    if (z.size() != 1 || z[0] < '0' || z[0] > '3')
      throw InputError("--zero-stages", 0, fmt::format("expects ZeRO stages 0 to 3 or 'auto', got '{}'", z));
    o.zero_stages.push_back(z[0] - '0');
  }
  for (const std::string& m : split_list("--checkpointing-modes", flags.checkpointing_modes, "none,selective,full"))
    try {
      o.checkpointing_modes.push_back(parse_checkpointing(m));
    } catch (const InputError&) {
      throw InputError("--checkpointing-modes", 0, fmt::format("expects none, selective, full or 'auto', got '{}'", m));
    }
  o.sequence_parallel = flags.sequence;
  o.data_parallel = flags.data;
  if (flags.strategy != "auto") o.strategy = parse_strategy(flags.strategy);
  o.ranks = flags.gpus;
  o.mode = flags.search == "exhaustive"  ? SearchMode::Exhaustive
           : flags.search == "heuristic" ? SearchMode::Heuristic
                                         : SearchMode::Auto;
  o.memory_budget_fraction = flags.memory_fraction;
  if (flags.all_reduce != "auto") o.all_reduce = parse_all_reduce_algorithm(flags.all_reduce);
  o.scope = parse_scope(flags.scope);
  return o;
}

// Simulates the K best feasible candidates and moves them, ordered by simulated step time, to the
// front. A candidate the heuristic search left partly priced is priced in full first; one the
// closed-form screen left without a placement cannot be simulated and is passed over.
void simulate_best(Ranked& ranked, const CostModel& model, int k, int jobs, double progress_s, int threads) {
  auto& candidates = ranked.result.candidates;
  ranked.simulated_ms.assign(candidates.size(), std::nullopt);
  std::vector<size_t> chosen;
  for (size_t i = 0; i < candidates.size() && int(chosen.size()) < k && candidates[i].feasible; ++i) {
    Candidate& c = candidates[i];
    if (c.plan.ranks.empty()) continue;
    if (c.pruned) {
      c.cost = model.evaluate(c.plan);
      c.plan.prediction = c.cost.to_prediction();
      c.pruned = false;
      c.reason.clear();
    }
    chosen.push_back(i);
  }
  SimOptions options;
  options.calibration = model.calibration();
  options.comm_slowdown = model.options().comm_slowdown;
  options.progress_every_s = progress_s;
  options.threads = threads;
  std::vector<Plan> plans;
  for (size_t i : chosen)
    plans.push_back(candidates[i].plan);
  const std::vector<SimResult> results = simulate_many(plans, model.topology(), options, jobs);
  for (size_t j = 0; j < chosen.size(); ++j)
    ranked.simulated_ms[chosen[j]] = results[j].step_ms;
  std::stable_sort(chosen.begin(), chosen.end(),
                   [&](size_t a, size_t b) { return *ranked.simulated_ms[a] < *ranked.simulated_ms[b]; });
  // Simulated candidates first (by simulated time), then the rest in their analytic order.
  std::vector<bool> is_chosen(candidates.size(), false);
  std::vector<size_t> order = chosen;
  for (size_t i : chosen)
    is_chosen[i] = true;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (!is_chosen[i]) order.push_back(i);
  std::vector<Candidate> reordered;
  std::vector<std::optional<double>> sims;
  for (size_t i : order) {
    reordered.push_back(std::move(candidates[i]));
    sims.push_back(ranked.simulated_ms[i]);
  }
  candidates = std::move(reordered);
  ranked.simulated_ms = std::move(sims);
  if (!chosen.empty()) ranked.result.best = 0;
}

// The degrees and the strategy's own knobs, the same fields as the plan file's params.
nlohmann::json params_json(const Candidate& c) {
  const StrategyParams& p = c.plan.params;
  nlohmann::json j{{"text", c.describe_params()},
                   {"sequence_parallel", p.sequence_parallel},
                   {"data_parallel", p.data_parallel},
                   {"tensor_parallel", p.tensor_parallel},
                   {"pipeline_parallel", p.pipeline_parallel},
                   {"virtual_stages", p.virtual_stages},
                   {"microbatches", c.plan.workload.microbatches}};
  if (const auto* k = std::get_if<UspKnobs>(&p.knobs)) j["ulysses"] = k->ulysses, j["ring"] = k->ring;
  if (const auto* k = std::get_if<DoubleRingKnobs>(&p.knobs)) j["ulysses"] = k->ulysses, j["window"] = k->window;
  if (const auto* k = std::get_if<WallFacerKnobs>(&p.knobs)) j["team"] = k->team;
  return j;
}

// Where the step goes, in milliseconds (StepParts; docs/cost-model.md, "Where the step goes").
nlohmann::json breakdown_json(const StepParts& p) {
  nlohmann::json exposed, transfers;
  for (int t = 0; t < kNumCommTiers; ++t) {
    exposed[to_string(CommTier(t))] = p.exposed_ms[t];
    transfers[to_string(CommTier(t))] = p.transfers_per_layer[t];
  }
  nlohmann::json j{{"compute", p.compute_ms}, {"load_imbalance", p.imbalance_ms}, {"exposed_comm", exposed},
                   {"idle", p.idle_ms},       {"hidden_comm", p.hidden_ms},       {"transfers_per_layer", transfers}};
  // Of the compute, what communication kernels beside it added (--comm-slowdown, the default).
  if (p.slowdown_ms > 0) j["compute_slowed_by_comm"] = p.slowdown_ms;
  return j;
}

nlohmann::json candidate_json(const Candidate& c, const std::optional<double>& simulated) {
  const CostBreakdown& cost = c.cost;
  nlohmann::json j{
      {"strategy", to_string(c.plan.strategy)},
      {"params", params_json(c)},
      {"placement", c.describe_placement()},
      {"feasible", c.feasible},
      {"pruned", c.pruned},
      {"reason", c.reason},
      {"scope", to_string(c.plan.scope)},
      {"predicted_ms",
       {{"forward", cost.forward_ms},
        {"backward", cost.backward_ms},
        {"step", cost.step_ms},
        {"attention", cost.attention_ms}}},
      {"tokens_per_s", cost.tokens_per_s},
      {"comm_bytes_per_gpu",
       {{"forward", {{"p2p", cost.volume.p2p_forward}, {"collective", cost.volume.collective_forward}}},
        {"backward", {{"p2p", cost.volume.p2p_backward}, {"collective", cost.volume.collective_backward}}}}},
      {"memory_GiB", cost.memory.total_GiB},
      {"memory_breakdown_GiB",
       {{"model_state", cost.memory.model_state_GiB},
        {"activations", cost.memory.activations_GiB},
        {"attention", cost.memory.attention_GiB},
        {"working", cost.memory.working_GiB}}},
      {"mfu", cost.mfu},
      {"tie", c.tie},
      {"same_schedule_as", c.same_schedule_as}};
  if (c.feasible && !c.pruned) j["breakdown"] = breakdown_json(cost.parts);
  if (simulated) j["simulated_ms"] = *simulated;
  return j;
}

nlohmann::json suggestions_json(const std::vector<Suggestion>& suggestions) {
  nlohmann::json list = nlohmann::json::array();
  for (const Suggestion& s : suggestions)
    list.push_back({{"flags", s.flags}, {"change", s.change}, {"outcome", s.outcome}, {"step_ms", s.step_ms}});
  return list;
}

void print_json_result(const Ranked& ranked, const Workload& workload, const Topology& topology, int gpus,
                       const std::vector<Suggestion>& suggestions) {
  nlohmann::json candidates = nlohmann::json::array();
  for (size_t i = 0; i < ranked.result.candidates.size(); ++i)
    candidates.push_back(candidate_json(ranked.result.candidates[i],
                                        ranked.simulated_ms.empty() ? std::nullopt : ranked.simulated_ms[i]));
  nlohmann::json out{{"topology", topology.name()},
                     {"nodes", topology.num_nodes()},
                     {"gpus", gpus},
                     {"workload", to_json(workload)},
                     {"candidates", candidates},
                     {"best", ranked.result.best >= 0 ? nlohmann::json(ranked.result.best) : nlohmann::json(nullptr)},
                     {"expected_error", kCostModelExpectedError},
                     {"explanation", explain_ranking(ranked.result)}};
  if (ranked.result.best < 0) out["suggestions"] = suggestions_json(suggestions);
  print_json(out);
}

// The compact breakdown: each part as a share of the step, in the order of kPartsHeader.
constexpr const char* kPartsHeader = "cmp imb nvl pci net idle";
std::string parts_text(const CostBreakdown& k) {
  const StepParts& p = k.parts;
  auto share = [&](double ms) { return k.step_ms > 0 ? 100 * ms / k.step_ms : 0.0; };
  return fmt::format("{:>3.0f} {:>3.0f} {:>3.0f} {:>3.0f} {:>3.0f} {:>4.0f}", share(p.compute_ms),
                     share(p.imbalance_ms), share(p.exposed_ms[0]), share(p.exposed_ms[1]), share(p.exposed_ms[2]),
                     share(p.idle_ms));
}

void print_row(size_t rank, const Candidate& c, const std::optional<double>& simulated, bool with_sim) {
  const CostBreakdown& k = c.cost;
  // Pruned candidates show their bound or estimate only; screened ones have no schedule at all.
  const bool partial = c.pruned, screened = c.plan.ranks.empty();
  auto ms = [&](double v) { return partial ? std::string() : fmt::format("{:.3f}", v); };
  const std::string tokens = k.tokens_per_s > 0 && !partial ? fmt::format("{:.0f}", k.tokens_per_s) : "";
  fmt::print("{:>3} {:<11} {:<12} {:<34} {:>10} {:>10} {:>11} {:>9} {:>10} {:>10} {:>9.1f} {:>24} {:>7}", rank,
             to_string(c.plan.strategy), c.describe_params(), c.describe_placement(), ms(k.forward_ms),
             ms(k.backward_ms), (partial ? "~" : "") + fmt::format("{:.3f}", k.step_ms) + (c.tie ? "=" : ""), tokens,
             screened ? "" : bytes_text(k.volume.p2p_forward + k.volume.p2p_backward),
             screened ? "" : bytes_text(k.volume.collective_forward + k.volume.collective_backward), k.memory.total_GiB,
             partial ? "" : parts_text(k), partial ? "" : fmt::format("{:.1f}%", 100 * k.mfu));
  if (with_sim) fmt::print(" {:>10}", simulated ? fmt::format("{:.3f}", *simulated) : "");
  fmt::print("{}\n", c.pruned ? "  " + c.reason : "");
  if (!c.same_schedule_as.empty()) fmt::print("      the same schedule as: {}\n", fmt::join(c.same_schedule_as, "; "));
}

void print_table(const Ranked& ranked, const Workload& workload, const Topology& topology, int gpus, int top,
                 Scope scope) {
  const auto& candidates = ranked.result.candidates;
  const bool with_sim = !ranked.simulated_ms.empty();
  fmt::print("{} ({} layers) on {} ({}, {} GPUs used): seq {} tokens, batch {}, {}, {}\n", workload.model,
             workload.layers, topology.name(), counted(topology.num_nodes(), "node"), gpus, workload.seq,
             workload.batch, to_string(workload.dtype), workload.causal ? "causal" : "full mask");
  if (scope == Scope::Step)
    fmt::print("whole training step: ZeRO {}, {} checkpointing, {} MiB gradient buckets\n", workload.zero_stage,
               to_string(workload.checkpointing), workload.grad_bucket_MiB);
  else
    fmt::print("one attention layer, forward and backward\n");
  fmt::print("{:>3} {:<11} {:<12} {:<34} {:>10} {:>10} {:>11} {:>9} {:>10} {:>10} {:>9} {:>24} {:>7}{}\n", "#",
             "strategy", "params", "placement", "fwd ms", "bwd ms", "step ms", "tokens/s", "p2p/GPU", "coll/GPU",
             "mem GiB", kPartsHeader, "MFU", with_sim ? "     sim ms" : "");
  size_t shown = 0, feasible = 0, ties = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].feasible) continue;
    ++feasible;
    if (int(shown) >= top) continue;
    ties += candidates[i].tie ? 1 : 0;
    print_row(++shown, candidates[i], with_sim ? ranked.simulated_ms[i] : std::nullopt, with_sim);
  }
  if (feasible == 0) fmt::print("    (no feasible candidate)\n");
  if (feasible > shown) fmt::print("    ... {} more feasible (--top {} shows them)\n", feasible - shown, feasible);
  if (shown > 0)
    fmt::print(
        "    {} in % of the step: compute, load imbalance, communication not hidden behind compute over "
        "NVLink/NVSwitch, PCIe and the network, idle{}\n",
        kPartsHeader,
        ties > 0 ? fmt::format("; '=' marks a tie: within the cost model's expected error ({:.0f} %) of the "
                               "best step, the order of those is not significant",
                               100 * kCostModelExpectedError)
                 : "");
  for (const std::string& line : explain_ranking(ranked.result))
    fmt::print("{}\n", line);
  if (feasible == candidates.size()) return;
  fmt::print("rejected:\n");
  size_t rejected = 0;
  for (const Candidate& c : candidates) {
    if (c.feasible) continue;
    if (int(rejected++) < top)
      fmt::print("    {:<11} {:<12} {:<34} {}\n", to_string(c.plan.strategy), c.describe_params(),
                 to_string(placement_of(c.plan.params)), c.reason);
  }
  if (int(rejected) > top) fmt::print("    ... {} more rejected\n", rejected - size_t(top));
}

// Builds the full schedule of the chosen plan (its scope: every layer of the step, or the attention
// layer) and proves it correct; false when it is not.
bool check_plan(const Plan& plan, bool quiet) {
  const Schedule schedule = build_scope_schedule(plan);
  const CheckReport report = check_schedule(plan, schedule);
  if (!report.ok) {
    fmt::print(stderr, "check: the schedule of the best plan is broken:\n");
    for (const auto& e : report.errors)
      fmt::print(stderr, "  {}\n", e);
    return false;
  }
  if (!quiet)
    fmt::print("check: ok, {} ops ({} sends, {} collectives, {} forward and {} backward blocks{}) on {} ranks\n",
               report.ops, report.sends, report.collectives, report.forward_blocks, report.backward_blocks,
               plan.scope == Scope::Step ? fmt::format(", {} GEMMs, {} layers", report.gemms, report.layers) : "",
               plan.num_ranks());
  return true;
}

// Keeps where the search is for the Ctrl-C message and, on a terminal (`show`), prints
// "\rsearch: orders 12/84 candidates" to stderr at most twice a second, from one second on; the
// caller clears the line when the search is done.
std::function<void(const char*, size_t, size_t)> search_progress(bool show) {
  using Clock = std::chrono::steady_clock;
  struct State {
    Clock::time_point start = Clock::now(), last;
    bool shown = false;
  };
  auto state = std::make_shared<State>();
  return [state, show](const char* stage, size_t done, size_t total) {
    set_interrupt_progress(stage, done, total);
    if (!show) return;
    const auto now = Clock::now();
    if (now - state->start < std::chrono::seconds(1) || now - state->last < std::chrono::milliseconds(500)) return;
    state->last = now;
    state->shown = true;
    fmt::print(stderr, "\rsearch: pricing {} {}/{} candidates ({:.0f} s)\x1b[K", stage, done, total,
               std::chrono::duration<double>(now - state->start).count());
    std::fflush(stderr);
  };
}

void print_suggestions(const std::vector<Suggestion>& suggestions, const std::string& strategy) {
  fmt::print(stderr, "no feasible plan{}\n", strategy != "auto" ? " for strategy " + strategy : "");
  if (suggestions.empty()) {
    fmt::print(stderr,
               "no nearby change of ZeRO stage, checkpointing, sequence length, GPUs or memory fraction "
               "makes one feasible\n");
    return;
  }
  fmt::print(stderr, "each of these changes makes one feasible (checked by planning with it):\n");
  for (const Suggestion& s : suggestions)
    fmt::print(stderr, "  {}  ({}): {}\n", s.flags, s.change, s.outcome);
}

// The explanation's preparation of a ranking: every strategy's best priced (on the search's
// threads), equal schedules merged, ties marked.
void explain(Ranked& ranked, const CostModel& model, double budget_GiB, int jobs) {
  complete_strategy_bests(ranked.result, model, budget_GiB, jobs);
  merge_same_schedules(ranked.result, model, jobs);
  mark_ties(ranked.result);
}

int run_plan(const PlanFlags& flags) {
  if (!flags.out.empty()) check_file_writable(flags.out);  // before the search, not after it
  const Workload workload = resolve(flags.workload);
  const Topology topology = load(flags.topology);
  const Calibration calibration =
      flags.calibration.empty() ? Calibration::defaults() : Calibration::load(flags.calibration);
  CostOptions cost_options;
  cost_options.comm_slowdown = flags.comm_slowdown;
  const CostModel model(topology, calibration, cost_options);
  SearchOptions options = search_options(flags, topology);
  options.virtual_stages = virtual_stage_counts(flags.virtual_stages, workload.layers);
  // On a terminal, a search that takes more than a second says how far it got.
  const bool show_progress = ::isatty(STDERR_FILENO);
  options.progress = search_progress(show_progress);
  options.priced_top = flags.top;  // the rows shown are priced, as pricing every candidate would rank them
  options.threads = flags.jobs;
  options.strategy_bests = flags.simulate_top == 0;  // the explanation compares each strategy's best
  warn_about_assumptions(topology, calibration, workload, options.scope == Scope::Step);
  Ranked ranked{search_plans(topology, workload, model, options), {}};
  if (show_progress) fmt::print(stderr, "\r\x1b[K");
  set_interrupt_progress(nullptr, 0, 0);
  const int gpus = options.ranks > 0 ? options.ranks : topology.num_gpus();
  const double budget_GiB = options.memory_budget_fraction * topology.gpu().memory_GiB;
  if (flags.simulate_top > 0)
    simulate_best(ranked, model, flags.simulate_top, flags.jobs, flags.progress_s, flags.sim_threads);
  else
    explain(ranked, model, budget_GiB, flags.jobs);
  std::vector<Suggestion> suggestions;
  if (ranked.result.best < 0) {
    suggestions = suggest_fixes(topology, workload, model, options);
    if (show_progress) fmt::print(stderr, "\r\x1b[K");
    set_interrupt_progress(nullptr, 0, 0);
  }

  if (flags.json)
    print_json_result(ranked, workload, topology, gpus, suggestions);
  else
    print_table(ranked, workload, topology, gpus, flags.top, options.scope);
  if (ranked.result.best < 0) {
    print_suggestions(suggestions, flags.strategy);
    return 1;
  }
  Candidate& best = ranked.result.candidates[size_t(ranked.result.best)];
  if (flags.check && !check_plan(best.plan, flags.json)) return 1;
  if (!flags.out.empty()) {
    if (is_topology_file(flags.topology.topology))
      best.plan.topology_file = path_from_plan(flags.topology.topology, flags.out);
    write_file_atomically(flags.out, [&](std::ostream& out) { write_plan(best.plan, out); });
    if (!flags.json)
      fmt::print("wrote {} {} ({}) to {}\n", to_string(best.plan.strategy), best.describe_params(),
                 best.describe_placement(), flags.out);
  }
  return 0;
}

}  // namespace

void register_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* command = app.add_subcommand(
      "plan", "Search strategies, parameters and GPU placements for a workload on a topology; rank them");
  add_topology_flags(command, flags->topology);
  add_workload_flags(command, flags->workload);
  const std::string group = "Search";
  command->add_option("--gpus", flags->gpus, "GPUs to use, filling nodes in order (0 = every GPU)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(group);
  std::string strategies = "auto";
  for (StrategyKind k : all_strategies())
    strategies += std::string("|") + to_string(k);
  command->add_option("--strategy", flags->strategy, "Only this strategy (" + strategies + ")")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--search", flags->search,
                   "auto (exhaustive up to 32 GPUs, else heuristic), exhaustive or heuristic")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "exhaustive", "heuristic"}))
      ->group(group);
  command
      ->add_option("--all-reduce", flags->all_reduce,
                   "Gradient all-reduces as auto (ring or NCCL's double binary tree, whichever is faster per "
                   "group), ring or tree")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "ring", "tree"}))
      ->group(group);
  command
      ->add_option("--scope", flags->scope,
                   "What to price: step (the whole training step of the whole model) or attention (one attention "
                   "layer's forward and backward, what `run` executes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"step", "attention"}))
      ->group(group);
  command
      ->add_option("--tp", flags->tensor,
                   "Tensor parallel degree around the strategy (Megatron-style, heads and matrices split T ways), "
                   "or auto: 1, 2, 4, ... up to the GPUs of a node")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--pp", flags->pipeline,
                   "Pipeline parallel stages around the tensor-lifted strategy (1F1B over --microbatches, by "
                   "default batch / D micro-batches of one sequence), or auto: 1, 2, 4, ... stages of whole nodes")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--vpp", flags->virtual_stages,
                   "Virtual stages per pipeline rank (interleaved 1F1B, Megatron's virtual pipeline; needs Pp "
                   "dividing the micro-batches), or auto: 1, 2, 4, ... where they divide a stage's layers")
      ->capture_default_str()
      ->group(group);
  command
      ->add_option("--zero-stages", flags->zero_stages,
                   "Let the step search choose the ZeRO stage among these (comma-separated, or auto: 0,1,2,3): the "
                   "lowest whose memory fits, per checkpointing mode (default: the workload's --zero-stage)")
      ->group(group);
  command
      ->add_option("--checkpointing-modes", flags->checkpointing_modes,
                   "Let the step search choose the checkpointing mode among these (comma-separated, or auto: "
                   "none,selective,full) (default: the workload's --checkpointing)")
      ->group(group);
  command->add_option("--sp", flags->sequence, "Only this sequence parallel degree S (0 = any; 1 = none)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(group);
  command->add_option("--dp", flags->data, "Only this data parallel degree D (0 = any)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(group);
  command->add_option("--memory-fraction", flags->memory_fraction, "Share of GPU memory a plan may use")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0))
      ->group(group);
  command->add_option("--calibration", flags->calibration, "Kernel throughput file (docs/calibration.md)")
      ->check(CLI::ExistingFile)
      ->group(group);
  command
      ->add_flag("--comm-slowdown,!--no-comm-slowdown", flags->comm_slowdown,
                 "Slow compute while its rank communicates (communication kernels hold SMs), by the "
                 "calibration's compute_slowdown_under_comm, as simulate does; --no-comm-slowdown: full speed")
      ->capture_default_str()
      ->group(group);
  const std::string output = "Output";
  command->add_option("--top", flags->top, "Rows of the ranking to print (feasible, then rejected)")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(output);
  command
      ->add_option("--out", flags->out,
                   "Write the best plan here (docs/formats/plan.md); nothing is written without it")
      ->group(output);
  command->add_flag("--json", flags->json, "Print the ranking as JSON on stdout")->group(output);
  command->add_flag("--check", flags->check, "Build the best plan's full schedule and prove it correct")->group(output);
  command
      ->add_option("--simulate-top", flags->simulate_top,
                   "Simulate the best K candidates (SimGrid) and re-rank them by simulated step time")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(output);
  command
      ->add_option("--jobs", flags->jobs,
                   "Threads the search bounds and prices candidates on, and simulations --simulate-top runs at "
                   "once; the ranking is the same for any count (default: one per usable CPU, at most 8)")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(output);
  add_progress_flag(command, flags->progress_s)->group(output);
  add_sim_threads_flag(command, flags->sim_threads)->group(output);
  command->callback([flags] {
    if (flags->strategy != "auto") {
      try {
        parse_strategy(flags->strategy);
      } catch (const InputError& e) {
        throw InputError("--strategy", 0, e.message());
      }
    }
    exit_code() = run_plan(*flags);
  });
}

}  // namespace wallfacer::cli
