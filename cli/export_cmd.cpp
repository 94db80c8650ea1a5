// `wallfacer export PLAN --to TARGET [-o FILE]`: prints (or writes) what a user sets in
// Megatron-LM, TransformerEngine, DeepSpeed, USP, ring-flash-attn, mpirun or Slurm to run the
// plan (wallfacer/export/export.hpp, docs/export.md). A plan the target cannot express is refused
// with the reason and the nearest plan it can express, found by the planner on the plan's
// topology; --nearest exports that one instead.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/export/export.hpp>
#include "commands.hpp"
#include "common.hpp"

namespace wallfacer::cli {
namespace {

struct ExportFlags {
  std::string plan;
  std::string target;
  std::string out;
  std::string topology;
  bool nearest = false;
  std::string nearest_out;
};

void write_text(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::cout << text;
    return;
  }
  write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

// The nearest expressible plan on the plan's topology; prints it and returns whether one exists.
void offer_nearest(const ExportFlags& flags, const Plan& plan, ExportTarget target) {
  const std::string topology_name = flags.topology.empty() ? plan.topology_name : flags.topology;
  const Topology topology = Topology::load(topology_name, plan.topology_nodes);
  check_plan_against_topology(plan, topology, flags.plan);
  const CostModel model(topology, Calibration::defaults());
  const std::optional<Candidate> nearest = nearest_expressible_plan(plan, target, topology, model);
  if (!nearest) {
    fmt::print(stderr, "no feasible plan of this workload on {} GPUs is expressible in {}\n", plan.num_ranks(),
               to_string(target));
    exit_code() = 1;
    return;
  }
  const double own = plan.prediction ? plan.prediction->step_ms : 0;
  const double other = nearest->plan.prediction->step_ms;
  fmt::print(stderr, "nearest plan {} expresses: {} {} ({}), predicted {:.3f} ms", to_string(target),
             to_string(nearest->plan.strategy), nearest->describe_params(), nearest->describe_placement(), other);
  if (own > 0) {
    const double change = 100 * (other / own - 1);
    fmt::print(stderr, " against {:.3f} ms, {}", own,
               change >= 0.05    ? fmt::format("{:.1f} % slower", change)
               : change <= -0.05 ? fmt::format("{:.1f} % faster", -change)
                                 : std::string("as fast"));
  }
  fmt::print(stderr, "\n");
  if (!flags.nearest_out.empty()) {
    write_text(plan_to_yaml(nearest->plan), flags.nearest_out);
    fmt::print(stderr, "wrote the nearest plan to {}\n", flags.nearest_out);
  }
  if (flags.nearest) {
    write_text(export_plan(nearest->plan, target), flags.out);
    exit_code() = 0;
  } else {
    fmt::print(stderr, "(--nearest exports it, --nearest-out FILE saves it)\n");
    exit_code() = 1;
  }
}

}  // namespace

void register_export_command(CLI::App& app) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* cmd = app.add_subcommand("export", "print what a framework or launcher needs to run a plan");
  cmd->add_option("PLAN", flags->plan, "plan file written by `wallfacer plan --out`")->required();
  std::vector<std::string> names;
  for (ExportTarget t : all_export_targets())
    names.emplace_back(to_string(t));
  cmd->add_option("--to", flags->target, fmt::format("target: {}", fmt::join(names, ", ")))
      ->required()
      ->check(CLI::IsMember(names));
  cmd->add_option("-o,--out", flags->out, "file to write")->default_str("stdout");
  cmd->add_option("--topology", flags->topology, "topology preset or file the plan was made for")
      ->default_str("the plan's topology name");
  cmd->add_flag("--nearest", flags->nearest,
                "when the target cannot express the plan, export the nearest plan it can (default: refuse)");
  cmd->add_option("--nearest-out", flags->nearest_out, "also write that nearest plan to this file")
      ->default_str("none");
  cmd->callback([flags] {
    const ExportTarget target = parse_export_target(flags->target);
    const Plan plan = read_plan_file(flags->plan);
    const ExportCheck check = check_export(plan, target);
    if (check.expressible) {
      write_text(export_plan(plan, target), flags->out);
      if (!flags->out.empty()) fmt::print("wrote {} settings to {}\n", to_string(target), flags->out);
      exit_code() = 0;
      return;
    }
    fmt::print(stderr, "{}: {} cannot express this plan: {}\n", flags->plan, to_string(target), check.reason);
    offer_nearest(*flags, plan, target);
  });
}

}  // namespace wallfacer::cli
