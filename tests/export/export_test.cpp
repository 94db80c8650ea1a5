// Each target's output read back as its consumer would: Megatron-LM's flags turned into groups by
// Megatron-Core's rank order (rank = (dp * CP + cp) * TP + tp, written here independently of the
// exporter), the Python snippets' rank lists, the mpirun rank file and the Slurm host list, and
// compared with the plan's own groups and rank placement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/cost/cost_model.hpp>
#include <wallfacer/export/export.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/topology/topology.hpp>
#include "common/cli_runner.hpp"
#include "common/synthetic_workload.hpp"

namespace wallfacer {
namespace {

const Topology& cluster() {
  static const Topology topology = Topology::load("dgx-h100", 2);
  return topology;
}

Workload workload(bool causal = true) {
  return test::synthetic_workload({.seq = 4096,
                                   .heads = 32,
                                   .kv_heads = 8,
                                   .head_dim = 64,
                                   .batch = 2,
                                   .causal = causal,
                                   .dtype = DType::BF16,
                                   .vocab = 128});
}

Plan plan_of(StrategyKind kind, int S, int D, int T, StrategyKnobs knobs = NoKnobs{}, bool causal = true,
             std::vector<int> order = {}) {
  StrategyParams params;
  params.sequence_parallel = S;
  params.data_parallel = D;
  params.tensor_parallel = T;
  params.knobs = knobs;
  return make_plan(kind, params, workload(causal), cluster(), S * D * T, order);
}

int flag(const std::string& text, const std::string& name) {
  const std::regex re(name + " (\\d+)");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(text, m, re)) << name << " in\n" << text;
  return m.empty() ? 0 : std::stoi(m[1]);
}

std::vector<std::vector<int>> python_list(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " = [");
  EXPECT_NE(at, std::string::npos) << name << " in\n" << text;
  std::vector<std::vector<int>> out;
  if (at == std::string::npos) return out;
  const std::string line = text.substr(at + name.size() + 4, text.find('\n', at + 1) - at - name.size() - 4);
  const std::regex inner("\\[([0-9, ]*)\\]");
  for (auto it = std::sregex_iterator(line.begin(), line.end(), inner); it != std::sregex_iterator(); ++it) {
    std::vector<int> group;
    std::stringstream ss((*it)[1].str());
    for (std::string n; std::getline(ss, n, ',');)
      group.push_back(std::stoi(n));
    out.push_back(group);
  }
  return out;
}

std::vector<std::vector<int>> plan_groups(const Plan& plan, GroupKind kind) {
  std::vector<std::vector<int>> out;
  for (const CommGroup& g : plan.groups)
    if (g.kind == kind && g.name.find(".rev") == std::string::npos) out.push_back(g.ranks);
  return out;
}

// Megatron-Core's groups for the sizes the export printed.
struct MegatronGroups {
  std::vector<std::vector<int>> context, tensor, data, data_with_context, a2a, p2p;
};
MegatronGroups megatron_from_flags(const std::string& text, int world) {
  const int tp = flag(text, "--tensor-model-parallel-size");
  const int cp = flag(text, "--context-parallel-size");
  const int dp = world / (tp * cp);
  int a2a = 0;
  std::smatch m;
  if (std::regex_search(text, m, std::regex("--hierarchical-context-parallel-sizes (\\d+) (\\d+)"))) {
    a2a = std::stoi(m[1]);
    EXPECT_EQ(a2a * std::stoi(m[2]), cp);
  }
  MegatronGroups g;
  auto rank = [&](int d, int c, int t) { return t + tp * (c + cp * d); };
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> ring;
      for (int c = 0; c < cp; ++c)
        ring.push_back(rank(d, c, t));
      g.context.push_back(ring);
      for (int c0 = 0; a2a > 0 && c0 < cp; c0 += a2a)
        g.a2a.emplace_back(ring.begin() + c0, ring.begin() + c0 + a2a);
      for (int j = 0; j < a2a; ++j) {
        std::vector<int> p2p;
        for (int c = j; c < cp; c += a2a)
          p2p.push_back(ring[c]);
        g.p2p.push_back(p2p);
      }
    }
  for (int d = 0; d < dp; ++d)
    for (int c = 0; c < cp; ++c) {
      std::vector<int> tensor;
      for (int t = 0; t < tp; ++t)
        tensor.push_back(rank(d, c, t));
      g.tensor.push_back(tensor);
    }
  for (int t = 0; t < tp; ++t) {
    std::vector<int> dwc;
    for (int d = 0; d < dp; ++d)
      for (int c = 0; c < cp; ++c)
        dwc.push_back(rank(d, c, t));
    g.data_with_context.push_back(dwc);
    for (int c = 0; c < cp; ++c) {
      std::vector<int> data;
      for (int d = 0; d < dp; ++d)
        data.push_back(rank(d, c, t));
      g.data.push_back(data);
    }
  }
  return g;
}

std::multiset<std::vector<int>> sets(std::vector<std::vector<int>> groups) {
  std::multiset<std::vector<int>> out;
  for (auto& g : groups) {
    std::sort(g.begin(), g.end());
    out.insert(g);
  }
  return out;
}

void expect_megatron_matches(const Plan& plan, const char* comm_type) {
  const std::string text = export_plan(plan, ExportTarget::Megatron);
  EXPECT_NE(text.find(std::string("--cp-comm-type ") + comm_type + "\n"), std::string::npos) << text;
  const MegatronGroups m = megatron_from_flags(text, plan.num_ranks());
  EXPECT_EQ(sets(plan_groups(plan, GroupKind::Tensor)),
            sets(plan.params.tensor_parallel > 1 ? m.tensor : std::vector<std::vector<int>>{}));
  EXPECT_EQ(sets(plan_groups(plan, GroupKind::World)), sets(m.data_with_context));
  for (const auto& data : plan_groups(plan, GroupKind::Data))  // plans list them where the step needs them
    EXPECT_TRUE(sets(m.data).count(*sets({data}).begin())) << ::testing::PrintToString(data);
  // Rings run in CP rank order, so they must equal Megatron's groups as ordered lists.
  const auto& rings = plan.strategy == StrategyKind::Usp ? m.p2p : m.context;
  for (const auto& ring : plan_groups(plan, GroupKind::Ring))
    EXPECT_NE(std::find(rings.begin(), rings.end(), ring), rings.end()) << "ring " << ::testing::PrintToString(ring);
  if (plan.strategy == StrategyKind::Usp) {
    EXPECT_EQ(sets(plan_groups(plan, GroupKind::AllToAll)), sets(m.a2a));
  }
  if (plan.strategy == StrategyKind::Ulysses) {
    EXPECT_EQ(sets(plan_groups(plan, GroupKind::AllToAll)), sets(m.context));
  }
  if (plan.strategy == StrategyKind::AllGather) {
    EXPECT_EQ(sets(plan_groups(plan, GroupKind::Sequence)), sets(m.context));
  }
}

TEST(Export, MegatronFlagsRebuildThePlansGroups) {
  expect_megatron_matches(plan_of(StrategyKind::Zigzag, 4, 1, 4), "p2p");
  expect_megatron_matches(plan_of(StrategyKind::Zigzag, 8, 2, 1), "p2p");
  expect_megatron_matches(plan_of(StrategyKind::Ulysses, 8, 1, 2), "a2a");
  expect_megatron_matches(plan_of(StrategyKind::AllGather, 4, 2, 2), "all_gather");
  expect_megatron_matches(plan_of(StrategyKind::Usp, 8, 1, 2, UspKnobs{2, 4, ContextPlacement::HeadFirst}), "a2a+p2p");
  expect_megatron_matches(plan_of(StrategyKind::Ring, 16, 1, 1, NoKnobs{}, false), "p2p");
}

TEST(Export, MegatronRefusesWhatItCannotRunAndSaysWhy) {
  const Plan wallfacer = plan_of(StrategyKind::WallFacer, 16, 1, 1, WallFacerKnobs{4, TeamPlacement::CollectIntra});
  EXPECT_FALSE(check_export(wallfacer, ExportTarget::Megatron).expressible);
  EXPECT_NE(check_export(wallfacer, ExportTarget::Megatron).reason.find("WallFacer's teams"), std::string::npos);
  // With teams of one, no team collectives remain: what Megatron-LM lacks is the pass-Q backward.
  const Plan one_ring = plan_of(StrategyKind::WallFacer, 8, 1, 1, WallFacerKnobs{1, TeamPlacement::CollectIntra});
  const std::string why = check_export(one_ring, ExportTarget::Megatron).reason;
  EXPECT_NE(why.find("pass-Q"), std::string::npos) << why;
  EXPECT_EQ(why.find("teams"), std::string::npos) << why;
  EXPECT_THROW((void)export_plan(wallfacer, ExportTarget::TransformerEngine), InputError);
  EXPECT_NE(check_export(plan_of(StrategyKind::Ring, 16, 1, 1), ExportTarget::Megatron).reason.find("zigzag"),
            std::string::npos);
  // USP context-first keeps the canonical groups and moves ranks to other GPUs: Megatron expresses
  // it when the launcher puts each rank on its GPU, which torchrun's node-major order cannot.
  const Plan context_first = plan_of(StrategyKind::Usp, 16, 1, 1, UspKnobs{4, 4, ContextPlacement::ContextFirst});
  expect_megatron_matches(context_first, "a2a+p2p");
  EXPECT_NE(export_plan(context_first, ExportTarget::Megatron).find("--to mpirun"), std::string::npos);
  EXPECT_EQ(
      check_export(plan_of(StrategyKind::DoubleRing, 16, 1, 1, DoubleRingKnobs{2, 2, ContextPlacement::HeadFirst}),
                   ExportTarget::Megatron)
          .reason.find("Megatron-LM has no double ring"),
      0u);
}

TEST(Export, PythonSnippetsHoldThePlansGroups) {
  const Plan usp = plan_of(StrategyKind::Usp, 8, 1, 2, UspKnobs{2, 4, ContextPlacement::ContextFirst});
  const std::string text = export_plan(usp, ExportTarget::Usp);
  EXPECT_EQ(sets(python_list(text, "ULYSSES_GROUPS")), sets(plan_groups(usp, GroupKind::AllToAll)));
  EXPECT_EQ(python_list(text, "RING_GROUPS"), plan_groups(usp, GroupKind::Ring));  // ordered: ring order
  EXPECT_NE(text.find("USE_ULYSSES_LOW = True"), std::string::npos);               // groups are canonical in rank space
  EXPECT_NE(text.find("RING_IMPL_TYPE = \"zigzag\""), std::string::npos);

  const Plan ulysses = plan_of(StrategyKind::Ulysses, 8, 2, 1);
  const std::string ds = export_plan(ulysses, ExportTarget::DeepSpeed);
  EXPECT_EQ(sets(python_list(ds, "ULYSSES_GROUPS")), sets(plan_groups(ulysses, GroupKind::AllToAll)));
  EXPECT_FALSE(check_export(usp, ExportTarget::DeepSpeed).expressible);

  const Plan zigzag = plan_of(StrategyKind::Zigzag, 8, 1, 2);
  const std::string rfa = export_plan(zigzag, ExportTarget::RingFlashAttn);
  EXPECT_EQ(python_list(rfa, "RING_GROUPS"), plan_groups(zigzag, GroupKind::Ring));
  EXPECT_NE(rfa.find("zigzag_ring_flash_attn_func"), std::string::npos);
  const Plan gather = plan_of(StrategyKind::AllGather, 8, 1, 2);
  EXPECT_NE(export_plan(gather, ExportTarget::RingFlashAttn).find("VARIANT = \"llama3\""), std::string::npos);

  const Plan te_plan = plan_of(StrategyKind::Usp, 8, 1, 2, UspKnobs{2, 4, ContextPlacement::HeadFirst});
  const std::string te = export_plan(te_plan, ExportTarget::TransformerEngine);
  EXPECT_EQ(sets(python_list(te, "A2A_GROUPS")), sets(plan_groups(te_plan, GroupKind::AllToAll)));
  EXPECT_EQ(sets(python_list(te, "P2P_GROUPS")), sets(plan_groups(te_plan, GroupKind::Ring)));
}

TEST(Export, LaunchersPutEveryRankOnThePlansGpu) {
  // Ranks on GPUs in a scrambled order, different on the two nodes.
  std::vector<int> order = {3, 1, 0, 2, 7, 5, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15};
  const Plan plan = plan_of(StrategyKind::Zigzag, 16, 1, 1, NoKnobs{}, true, order);
  const std::string rankfile = export_plan(plan, ExportTarget::Mpirun);
  const std::regex line("rank (\\d+)=node(\\d+) slot=\\d+");
  std::map<int, int> node_of_rank;
  for (auto it = std::sregex_iterator(rankfile.begin(), rankfile.end(), line); it != std::sregex_iterator(); ++it)
    node_of_rank[std::stoi((*it)[1])] = std::stoi((*it)[2]);
  std::smatch gpus;
  ASSERT_TRUE(std::regex_search(rankfile, gpus, std::regex("GPUS=\"([0-9 ]+)\"")));
  std::stringstream list(gpus[1].str());
  std::vector<int> local;
  for (int g; list >> g;)
    local.push_back(g);
  ASSERT_EQ(node_of_rank.size(), 16u);
  ASSERT_EQ(local.size(), 16u);
  for (const RankSlot& slot : plan.ranks) {
    EXPECT_EQ(node_of_rank[slot.rank], slot.node);
    EXPECT_EQ(local[slot.rank], slot.local_gpu);
  }
  EXPECT_NE(rankfile.find("NCCL ring order"), std::string::npos);

  // Slurm: the host list in rank order, and map_gpu by local task id when the nodes agree.
  const Plan same =
      plan_of(StrategyKind::Zigzag, 16, 1, 1, NoKnobs{}, true, {3, 1, 0, 2, 7, 5, 4, 6, 11, 9, 8, 10, 15, 13, 12, 14});
  const std::string slurm = export_plan(same, ExportTarget::Slurm);
  std::vector<int> hosts;
  const std::regex host("#HOST node(\\d+)");
  for (auto it = std::sregex_iterator(slurm.begin(), slurm.end(), host); it != std::sregex_iterator(); ++it)
    hosts.push_back(std::stoi((*it)[1]));
  std::smatch map;
  ASSERT_TRUE(std::regex_search(slurm, map, std::regex("map_gpu:([0-9,]+)")));
  std::vector<int> map_gpu;
  std::stringstream ml(map[1].str());
  for (std::string g; std::getline(ml, g, ',');)
    map_gpu.push_back(std::stoi(g));
  ASSERT_EQ(hosts.size(), 16u);
  std::map<int, int> next_local_task;
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(hosts[r], same.ranks[r].node);
    EXPECT_EQ(map_gpu.at(next_local_task[hosts[r]]++), same.ranks[r].local_gpu);
  }
  EXPECT_NE(export_plan(plan, ExportTarget::Slurm).find("--gpu-bind=none"), std::string::npos);
}

TEST(Export, NearestExpressiblePlanIsFeasibleAndExpressible) {
  const Plan wallfacer = plan_of(StrategyKind::WallFacer, 16, 1, 1, WallFacerKnobs{4, TeamPlacement::CollectIntra});
  const CostModel model(cluster(), Calibration::defaults());
  const std::optional<Candidate> nearest =
      nearest_expressible_plan(wallfacer, ExportTarget::Megatron, cluster(), model);
  ASSERT_TRUE(nearest.has_value());
  EXPECT_TRUE(nearest->feasible);
  EXPECT_TRUE(check_export(nearest->plan, ExportTarget::Megatron).expressible);
  EXPECT_EQ(nearest->plan.num_ranks(), 16);
  EXPECT_NE(nearest->plan.strategy, StrategyKind::WallFacer);
}

TEST(Export, CommandRefusesWithTheReasonAndTheNearestPlan) {
  ASSERT_TRUE(test::cli_present());
  const std::string plan = testing::TempDir() + "export_wf.yaml";
  const test::CliResult made = test::run_cli(
      "plan --strategy wallfacer --gpus 8 --seq 8192 --scope attention --tp 1 --top 1 "
      "--out " +
          plan,
      "2>&1");
  ASSERT_EQ(made.status, 0) << made.output;
  const test::CliResult refused = test::run_cli("export " + plan + " --to megatron", "2>&1");
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("megatron cannot express this plan: WallFacer with C = 1"), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("nearest plan megatron expresses: "), std::string::npos) << refused.output;
  // The nearest plan's step against the plan's own, in the direction it goes: faster for a plain
  // ring, whose causal load imbalance the nearest Ulysses plan does not have.
  const auto expect_direction = [](const std::string& output, const std::string& word) {
    std::smatch times;
    ASSERT_TRUE(std::regex_search(
        output, times, std::regex("predicted ([0-9.]+) ms against ([0-9.]+) ms, ([0-9.]+) % (slower|faster)")))
        << output;
    const double other = std::stod(times[1].str()), own = std::stod(times[2].str());
    if (!word.empty()) EXPECT_EQ(times[4].str(), word) << output;
    EXPECT_EQ(times[4].str(), other > own ? "slower" : "faster") << output;
    EXPECT_NEAR(std::stod(times[3].str()), 100 * std::abs(other / own - 1), 0.051) << output;
  };
  expect_direction(refused.output, "");
  const std::string ring = testing::TempDir() + "export_ring.yaml";
  ASSERT_EQ(
      test::run_cli("plan --strategy ring --gpus 8 --seq 65536 --scope attention --tp 1 --top 1 --out " + ring, "2>&1")
          .status,
      0);
  const test::CliResult to_ulysses = test::run_cli("export " + ring + " --to deepspeed", "2>&1");
  EXPECT_EQ(to_ulysses.status, 1) << to_ulysses.output;
  expect_direction(to_ulysses.output, "faster");
  const test::CliResult nearest = test::run_cli("export " + plan + " --to megatron --nearest", "2>/dev/null");
  EXPECT_EQ(nearest.status, 0);
  EXPECT_NE(nearest.output.find("--context-parallel-size "), std::string::npos) << nearest.output;
  const test::CliResult launch = test::run_cli("export " + plan + " --to mpirun", "2>&1");
  EXPECT_EQ(launch.status, 0);
  EXPECT_NE(launch.output.find("rank 7=node0 slot="), std::string::npos) << launch.output;
  const test::CliResult bad = test::run_cli("export " + plan + " --to horovod", "2>&1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("wallfacer export: error: --to: expects one of megatron, transformer-engine"),
            std::string::npos)
      << bad.output;
}

// Without sequence parallelism a plan's attention is each rank's alone, whatever its strategy is
// named: every framework writes it with sequence groups of one rank.
TEST(Export, PlansWithoutSequenceParallelismGoToEveryFramework) {
  const Topology topology = Topology::load("dgx-h100", 1);
  Workload w = load_workload("llama-3-8b");
  w.seq = 8192;
  const std::pair<StrategyKind, StrategyKnobs> kinds[] = {{StrategyKind::WallFacer, WallFacerKnobs{}},
                                                          {StrategyKind::DoubleRing, DoubleRingKnobs{}},
                                                          {StrategyKind::Lss, NoKnobs{}}};
  for (const auto& [kind, knobs] : kinds) {
    const Plan plan =
        make_plan(kind, StrategyParams{.sequence_parallel = 1, .knobs = knobs, .tensor_parallel = 8}, w, topology, 8);
    for (ExportTarget target : all_export_targets()) {
      const ExportCheck check = check_export(plan, target);
      EXPECT_TRUE(check.expressible) << to_string(kind) << " to " << to_string(target) << ": " << check.reason;
      const std::string text = export_plan(plan, target);
      if (target == ExportTarget::Megatron) EXPECT_NE(text.find("--context-parallel-size 1\n"), std::string::npos);
      if (target == ExportTarget::DeepSpeed || target == ExportTarget::Usp || target == ExportTarget::RingFlashAttn)
        EXPECT_NE(text.find("[[0], [1], [2], [3], [4], [5], [6], [7]]"), std::string::npos)
            << to_string(target) << ":\n"
            << text;
    }
  }
  // With sequence parallelism the strategy matters again.
  const Plan teams =
      make_plan(StrategyKind::WallFacer, StrategyParams{.sequence_parallel = 8, .knobs = WallFacerKnobs{.team = 2}}, w,
                topology, 8);
  EXPECT_FALSE(check_export(teams, ExportTarget::Megatron).expressible);
  EXPECT_FALSE(check_export(teams, ExportTarget::DeepSpeed).expressible);
}

// The ring NCCL runs from the exported NCCL_GRAPH_FILEs: the nodes in the order their graphs
// appear, each node's GPUs in its channel's order, as (node, local GPU) pairs.
std::vector<std::pair<int, int>> ring_from_nccl_graphs(const std::string& text) {
  std::vector<std::pair<int, int>> ring;
  const std::regex gpu("#NCCL_GRAPH node(\\d+) +<gpu dev=\"(0x[0-9a-f]+|\\d+)\"/>");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), gpu); it != std::sregex_iterator(); ++it)
    ring.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2], nullptr, 0));
  return ring;
}

// The plan's one ring as (node, local GPU) pairs, rotated to start where `start` is.
std::vector<std::pair<int, int>> plan_ring_from(const Plan& plan, std::pair<int, int> start) {
  std::vector<int> ring;
  for (const CommGroup& g : plan.groups)
    if (g.kind == GroupKind::Ring && g.name.find(".rev") == std::string::npos) ring = g.ranks;
  std::vector<std::pair<int, int>> slots;
  for (int r : ring)
    slots.emplace_back(plan.ranks[r].node, plan.ranks[r].local_gpu);
  const auto at = std::find(slots.begin(), slots.end(), start);
  if (at != slots.end()) std::rotate(slots.begin(), at, slots.end());
  return slots;
}

TEST(Export, NcclGraphFilesMakeNcclRunThePlansRing) {
  // Two nodes with their GPUs in different scrambled orders; the ring is the rank order.
  const Plan plan =
      plan_of(StrategyKind::Ring, 16, 1, 1, NoKnobs{}, false, {3, 1, 0, 2, 7, 5, 4, 6, 8, 10, 9, 11, 15, 12, 13, 14});
  for (ExportTarget target : {ExportTarget::Mpirun, ExportTarget::Slurm}) {
    const std::string text = export_plan(plan, target);
    const auto nccl = ring_from_nccl_graphs(text);
    ASSERT_EQ(nccl.size(), 16u) << text;
    EXPECT_EQ(nccl, plan_ring_from(plan, nccl.front())) << text;
    // Each node's lines form one well-formed document: a ring graph, one channel, NICs at both ends.
    for (int node : {0, 1}) {
      const std::string prefix = "#NCCL_GRAPH node" + std::to_string(node) + " ";
      std::string xml;
      std::stringstream lines(text);
      for (std::string line; std::getline(lines, line);)
        if (line.rfind(prefix, 0) == 0) xml += line.substr(prefix.size()) + "\n";
      EXPECT_EQ(xml.rfind("<graphs version=\"1\">\n  <graph id=\"0\" pattern=\"4\"", 0), 0u) << xml;
      EXPECT_NE(xml.find("<channel>\n      <net dev=\"0\"/>\n      <gpu"), std::string::npos) << xml;
      EXPECT_NE(xml.find("/>\n      <net dev=\"0\"/>\n    </channel>\n  </graph>\n</graphs>\n"), std::string::npos)
          << xml;
    }
  }
  // One node: no NICs in the channel.
  const Plan one = plan_of(StrategyKind::Ring, 4, 1, 1, NoKnobs{}, false, {2, 0, 3, 1});
  const std::string single = export_plan(one, ExportTarget::Mpirun);
  const auto nccl = ring_from_nccl_graphs(single);
  ASSERT_EQ(nccl.size(), 4u) << single;
  EXPECT_EQ(nccl, plan_ring_from(one, nccl.front()));
  EXPECT_EQ(single.find("<net"), std::string::npos) << single;

  // A ring that goes back and forth between the nodes cannot be one NCCL ring: refused, named.
  const Plan zigzag_nodes =
      plan_of(StrategyKind::Ring, 16, 1, 1, NoKnobs{}, false, {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15});
  const std::string refused = export_plan(zigzag_nodes, ExportTarget::Mpirun);
  EXPECT_TRUE(ring_from_nccl_graphs(refused).empty()) << refused;
  EXPECT_NE(refused.find("no NCCL_GRAPH_FILE for this ring: the ring enters a node more than once"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace wallfacer
