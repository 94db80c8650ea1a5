// Shared by the GUI tests: one QApplication on the offscreen platform for the whole test binary,
// a scratch folder, and a WallFacer plan for two DGX H100 nodes from the planner's own search.
#pragma once

#include <gtest/gtest.h>

#include <QApplication>
#include <QStandardPaths>

#include <filesystem>
#include <string>

#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/search/search.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::test {

inline QApplication& gui_app() {
  static int argc = 1;
  static char name[] = "test_gui";
  static char* argv[] = {name, nullptr};
  static QApplication* app = [] {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QStandardPaths::setTestModeEnabled(true);  // recent files go to a test location
    return new QApplication(argc, argv);
  }();
  return *app;
}

inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("wallfacer_gui_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// The best WallFacer plan with teams (C >= 2, so it has teams and sub-rings) on every GPU, one
// attention layer, no tensor parallelism.
inline Plan wallfacer_plan(const Topology& topology) {
  WorkloadOverrides overrides;
  overrides.seq = 65536;
  const Workload workload = load_workload("llama-3-8b", overrides);
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.strategy = StrategyKind::WallFacer;
  options.scope = Scope::Attention;
  options.ranks = topology.num_gpus();
  const SearchResult result = search_plans(topology, workload, model, options);
  for (const Candidate& c : result.candidates)
    if (c.feasible && !c.plan.ranks.empty() && team_size(c.plan.params) >= 2) return c.plan;
  ADD_FAILURE() << "no feasible WallFacer plan with teams";
  return result.candidates.at(0).plan;
}

}  // namespace wallfacer::test
