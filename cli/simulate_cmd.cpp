// `wallfacer simulate PLAN [--topology T] [--nodes K] [--trace out.json [--trace-ranks 0-7]] [--json]
// [--network-model M] [--calibration FILE] [--no-comm-slowdown] [--step-layers N] [--full-replay]` replays a plan's
// schedule (the whole training step, or one attention layer for an attention-scope plan) in the
// SimGrid simulator and prints step, forward and backward time, per-rank statistics, link
// classes and the busiest links (or the same as JSON).
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/text.hpp>
#include <wallfacer/cost/calibration.hpp>
#include <wallfacer/plan/plan.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "commands.hpp"
#include "common.hpp"

namespace wallfacer::cli {
namespace {

struct SimulateFlags {
  std::string plan_path;
  TopologyFlags topology;
  CLI::Option* topology_option = nullptr;
  std::string calibration_path;
  std::string network_model = "CM02";
  std::string trace_path;
  std::string trace_ranks;
  std::string all_to_all = "pairwise";
  int max_ring_steps = 64;
  bool comm_slowdown = true;
  bool tcp_effects = false;
  bool no_shortcuts = false;
  bool json = false;
  double progress_s = 0;
  int threads = 0;
  int step_layers = 0;
  bool full_replay = false;
};

// "0-7,64" -> {0, ..., 7, 64}. Ranks past the plan's are reported by the simulator.
std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  auto bad = [&](const std::string& why) { return InputError("--trace-ranks", 0, fmt::format("'{}': {}", text, why)); };
  auto number = [&](const std::string& part) {
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(part, &used);
    } catch (const std::exception&) {
      throw bad("'" + part + "' is not a rank");
    }
    if (used != part.size() || value < 0 || value > (1 << 24)) throw bad("'" + part + "' is not a rank");
    return int(value);
  };
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const size_t dash = item.find('-');
    const int first = number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : number(item.substr(dash + 1));
    if (last < first) throw bad(fmt::format("range {}-{} runs backwards", first, last));
    for (int rank = first; rank <= last; ++rank)
      ranks.push_back(rank);
  }
  if (ranks.empty()) throw bad("no ranks listed");
  return ranks;
}

struct Spread {
  double min = 0, mean = 0, max = 0;
};

template <typename Field>
Spread spread(const std::vector<RankStats>& ranks, Field field) {
  if (ranks.empty()) return {};
  Spread s{field(ranks[0]), 0, field(ranks[0])};
  for (const RankStats& r : ranks) {
    s.min = std::min(s.min, field(r));
    s.max = std::max(s.max, field(r));
    s.mean += field(r);
  }
  s.mean /= double(ranks.size());
  return s;
}

void print_summary(const SimulateFlags& flags, const Plan& plan, const Topology& topology, const SimResult& r) {
  fmt::print("simulated {} on {} ({}), {} ranks, network model {}\n", to_string(plan.strategy), topology.name(),
             counted(topology.num_nodes(), "node"), plan.num_ranks(), flags.network_model);
  const bool all_layers = r.layers == plan.workload.layers;
  if (plan.scope == Scope::Step && !r.composed_from.empty())
    fmt::print(
        "  whole training step of the model's {} layers, composed from replays of {} and {} layers "
        "(--full-replay replays them all)\n",
        r.layers, r.composed_from.front(), r.composed_from.back());
  else if (plan.scope == Scope::Step)
    fmt::print("  whole training step, {} of the model's {} layers replayed\n", r.layers, plan.workload.layers);
  else
    fmt::print("  one attention layer, forward and backward (attention scope)\n");
  fmt::print("  step      {:10.4f} ms   forward {:.4f} ms, backward {:.4f} ms\n", r.step_ms, r.forward_ms,
             r.backward_ms);
  if (plan.scope == Scope::Step && all_layers && r.step_ms > 0)
    fmt::print("  {:.0f} tokens/s\n", double(plan.workload.seq) * plan.workload.batch / (r.step_ms * 1e-3));
  // The recorded prediction covers the plan's scope: the whole model's step, or one layer.
  if (plan.prediction && (plan.scope != Scope::Step || all_layers))
    fmt::print("  predicted {:10.4f} ms   (cost model, recorded in the plan; simulated/predicted = {:.3f})\n",
               plan.prediction->step_ms, plan.prediction->step_ms > 0 ? r.step_ms / plan.prediction->step_ms : 0.0);
  fmt::print("  {} activities simulated in {:.2f} s\n", r.activities, r.wall_seconds);
  fmt::print("\nper rank, ms      {:>10} {:>10} {:>10}\n", "min", "mean", "max");
  auto row = [](const char* name, Spread s) {
    fmt::print("  {:<15} {:10.4f} {:10.4f} {:10.4f}\n", name, s.min, s.mean, s.max);
  };
  row("compute", spread(r.ranks, [](const RankStats& s) { return s.compute_ms; }));
  row("communication", spread(r.ranks, [](const RankStats& s) { return s.comm_ms; }));
  row("idle", spread(r.ranks, [](const RankStats& s) { return s.idle_ms; }));
  fmt::print("\nlink class   resources        GB moved  mean util  max util\n");
  for (const LinkClassStats& c : r.link_classes)
    fmt::print("  {:<10} {:>9} {:>15.3f} {:>9.1f}% {:>8.1f}%\n", to_string(c.kind), c.links, c.bytes / 1e9,
               100 * c.mean_utilization, 100 * c.max_utilization);
  fmt::print("\nbusiest links{:<32}       GB moved      util\n", "");
  for (const LinkStats& l : r.busiest_links)
    fmt::print("  {:<36} {:<8} {:>12.3f} {:>8.1f}%\n", l.name, to_string(l.kind), l.bytes / 1e9, 100 * l.utilization);
  if (!flags.trace_path.empty() && !r.composed_from.empty())
    fmt::print("\ntrace of the {}-layer replay written to {}\n", r.composed_from.back(), flags.trace_path);
  else if (!flags.trace_path.empty())
    fmt::print("\ntrace written to {}\n", flags.trace_path);
}

void run(const SimulateFlags& flags) {
  if (!flags.trace_path.empty()) check_file_writable(flags.trace_path);  // before the replay, not after it
  Plan plan = read_plan_file(flags.plan_path);
  Topology topology = plan_topology(plan, flags.plan_path, flags.topology, flags.topology_option->count() > 0);
  check_plan_against_topology(plan, topology, flags.plan_path);
  SimOptions options;
  options.network_model = flags.network_model;
  options.tcp_effects = flags.tcp_effects;
  options.shortcuts = !flags.no_shortcuts;
  options.trace_path = flags.trace_path;
  if (!flags.trace_ranks.empty()) {
    if (flags.trace_path.empty()) throw InputError("--trace-ranks", 0, "needs --trace FILE");
    options.trace_ranks = parse_rank_list(flags.trace_ranks);
  }
  options.comm_slowdown = flags.comm_slowdown;
  options.all_to_all = flags.all_to_all;
  options.max_ring_steps = flags.max_ring_steps;
  options.progress_every_s = flags.progress_s;
  options.threads = flags.threads;
  options.step_layers = flags.step_layers;
  if (flags.full_replay) options.composition = SimOptions::Composition::Never;
  if (!flags.calibration_path.empty()) options.calibration = Calibration::load(flags.calibration_path);
  warn_about_assumptions(topology, options.calibration, plan.workload, plan.scope == Scope::Step);
  SimResult result;
  try {
    result = simulate(plan, topology, options);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {  // a schedule that cannot run, or the simulation process died
    fmt::print(stderr, "{}: error: {}\n", flags.plan_path, e.what());
    exit_code() = 1;
    return;
  }
  if (flags.json) {
    nlohmann::json json = nlohmann::json::parse(to_json(result));
    json["plan"] = {{"file", flags.plan_path},
                    {"strategy", to_string(plan.strategy)},
                    {"ranks", plan.num_ranks()},
                    {"scope", to_string(plan.scope)},
                    {"topology", topology.name()},
                    {"nodes", topology.num_nodes()},
                    {"network_model", flags.network_model}};
    print_json(json);
  } else {
    print_summary(flags, plan, topology, result);
  }
}

}  // namespace

void register_simulate_command(CLI::App& app) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* command = app.add_subcommand("simulate", "Replay a plan's schedule in the SimGrid simulator");
  command->add_option("PLAN", flags->plan_path, "Plan file written by `wallfacer plan`")->required();
  add_topology_flags(command, flags->topology);
  flags->topology_option = command->get_option("--topology");
  flags->topology_option
      ->description("Topology preset or file (default: the file the plan records, or the preset it names)")
      ->default_str("");
  command->add_option("--trace", flags->trace_path, "Write a Chrome trace (Perfetto, chrome://tracing) to this file");
  command->add_option("--trace-ranks", flags->trace_ranks,
                      "Ranks the trace shows, e.g. 0-7,64 (default: all; large runs open faster with a few)");
  command->add_flag("--json", flags->json, "Print the result as JSON on stdout");
  command
      ->add_option("--network-model", flags->network_model,
                   "SimGrid network model: CM02 (exact latency + size/bandwidth), LV08, SMPI, IB")
      ->capture_default_str();
  command->add_option("--calibration", flags->calibration_path,
                      "Kernel throughput calibration file (default: the built-in table, docs/calibration.md)");
  command
      ->add_option("--all-to-all", flags->all_to_all,
                   "All-to-all as point-to-point steps: pairwise (p-1 exchange steps) or direct (all at once)")
      ->check(CLI::IsMember({"pairwise", "direct"}))
      ->capture_default_str();
  command
      ->add_option("--max-ring-steps", flags->max_ring_steps,
                   "Longer rings (an all-reduce over many ranks) run as this many merged steps; 0 = never merge")
      ->check(at_least(0))
      ->capture_default_str();
  command
      ->add_flag("--comm-slowdown,!--no-comm-slowdown", flags->comm_slowdown,
                 "Slow compute while the rank communicates (communication kernels hold SMs), by the calibration's "
                 "compute_slowdown_under_comm, as plan prices it; --no-comm-slowdown: full speed")
      ->capture_default_str();
  command->add_flag("--tcp-effects", flags->tcp_effects,
                    "Keep SimGrid's cross-traffic and TCP window cap (off by default, so transfers are exact)");
  command->add_flag("--no-shortcuts", flags->no_shortcuts,
                    "Model every physical link and compute op as its own SimGrid object (slower; the default merges "
                    "link chains that carry the same routes and times full-speed compute exactly, same results)");
  command
      ->add_option("--step-layers", flags->step_layers,
                   "A step plan replays the whole step with this many layers (default 0: all the model's)")
      ->check(at_least(0))
      ->capture_default_str();
  command->add_flag("--full-replay", flags->full_replay,
                    "Replay every layer of a step plan (default: replay 1, 2 and 3 layers per stage and, where each "
                    "layer adds the same to SimGrid's nanosecond, compose the step from them; docs/simulator.md)");
  add_progress_flag(command, flags->progress_s);
  add_sim_threads_flag(command, flags->threads);
  command->callback([flags] { run(*flags); });
}

}  // namespace wallfacer::cli
