// The explanation of a ranking: ties within the expected error, the parts named in a comparison,
// candidates that build the same schedule merged (and only those), the sentences below the table,
// and every kind of suggestion when nothing is feasible, each checked by planning with it here.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <wallfacer/schedule/schedule_hash.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include <wallfacer/search/explain.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

// A fully priced feasible candidate with the given step and parts.
Candidate priced(double step_ms, StrategyKind strategy = StrategyKind::Ring) {
  Candidate c;
  c.feasible = true;
  c.plan.strategy = strategy;
  c.plan.ranks.resize(1);
  c.cost.step_ms = step_ms;
  c.cost.parts.compute_ms = step_ms;
  return c;
}

TEST(Explain, TiesAreTheCandidatesWithinTheExpectedError) {
  SearchResult result;
  for (double step : {100.0, 101.0, 102.0, 102.5, 150.0})
    result.candidates.push_back(priced(step));
  Candidate pruned = priced(101.0);
  pruned.pruned = true;
  result.candidates.push_back(pruned);
  result.best = 0;
  mark_ties(result, 0.02);
  std::vector<bool> ties;
  for (const Candidate& c : result.candidates)
    ties.push_back(c.tie);
  EXPECT_EQ(ties, (std::vector<bool>{false, true, true, false, false, false}));
}

TEST(Explain, ComparisonNamesThePartsWhereTheOtherLoses) {
  Candidate best = priced(20), other = priced(30);
  best.cost.parts.compute_ms = 15;
  best.cost.parts.exposed_ms[int(CommTier::Network)] = 5;
  other.cost.parts.compute_ms = 16;
  other.cost.parts.exposed_ms[int(CommTier::Network)] = 4;
  other.cost.parts.exposed_ms[int(CommTier::NvLink)] = 3;
  other.cost.parts.imbalance_ms = 7;
  EXPECT_EQ(compare_parts(best, other), "load imbalance 7.0 vs 0 ms, exposed NVLink 3.0 vs 0 ms");
  EXPECT_EQ(compare_parts(best, other, 3),
            "load imbalance 7.0 vs 0 ms, exposed NVLink 3.0 vs 0 ms, compute 16.0 vs 15.0 ms");
}

const char* kTwoNodes = R"(name: test-two-nodes
description: two nodes of four GPUs on an NVSwitch, one NIC each
gpu: {model: H100-SXM5-80GB, peak_bf16_tflops: 989.4, peak_fp16_tflops: 989.4, memory_GiB: 80, hbm_GBps: 3350, source: test}
nodes: 2
node:
  gpus: 4
  cpus: {count: 1, model: test, link: {bandwidth_GBps: 10, latency_us: 0.5, source: test}}
  gpu_fabric: {type: nvswitch, bandwidth_GBps: 450, latency_us: 0.3, source: test}
  pcie:
    bandwidth_GBps: 32
    latency_us: 0.5
    source: test
    switches:
      - {cpu: 0, gpus: [0, 1, 2, 3], nics: [0]}
  nics: {count: 1, rate_Gbps: 200, source: test}
network: {type: single_switch, link_latency_us: 1.0, source: test}
)";

Workload small_workload() {
  Workload w = load_workload("llama-3-8b");
  w.layers = 2;
  w.seq = 8192;
  return w;
}

uint64_t hash_of(const Candidate& c, const CostModel& model) {
  Plan plan = c.plan;
  plan.scope = Scope::Attention;
  Schedule s;
  model.build_timed(plan, s);
  return schedule_hash(plan, s);
}

// After merging, no two shown candidates have the same step and schedule; every merged name was
// a candidate with the same step and schedule as the one it is listed under.
TEST(Explain, MergesExactlyTheCandidatesThatBuildTheSameSchedule) {
  const Topology topology = Topology::parse(kTwoNodes, "two-nodes.yaml");
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Attention;
  options.tensor_degrees = {1};
  SearchResult result = search_plans(topology, small_workload(), model, options);
  std::map<std::string, const Candidate*> by_label;
  const SearchResult before = result;
  for (const Candidate& c : before.candidates)
    by_label[candidate_label(c)] = &c;
  merge_same_schedules(result, model);
  size_t merged = 0;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const Candidate& c = result.candidates[i];
    for (const std::string& other : c.same_schedule_as) {
      ASSERT_TRUE(by_label.count(other)) << other;
      EXPECT_EQ(by_label[other]->cost.step_ms, c.cost.step_ms);
      EXPECT_EQ(hash_of(*by_label[other], model), hash_of(c, model));
      ++merged;
    }
    for (size_t j = i + 1; j < result.candidates.size(); ++j) {
      const Candidate& d = result.candidates[j];
      if (!c.feasible || !d.feasible || c.pruned || d.pruned || c.cost.step_ms != d.cost.step_ms) continue;
      EXPECT_NE(hash_of(c, model), hash_of(d, model)) << candidate_label(c) << " and " << candidate_label(d);
    }
  }
  EXPECT_EQ(result.candidates.size() + merged, before.candidates.size());
  EXPECT_EQ(result.best, 0);
}

// A USP split u x r and the double ring with the same Ulysses degree and one window build the same
// schedule, and so do the zigzag ring, USP with u = 1 and the double ring with u = 1; the plain
// ring (contiguous layout) is another schedule. Merged with the schedules hashed on three threads,
// the ranking is the same.
TEST(Explain, MergesAUspSplitWithTheDoubleRingOfOneWindow) {
  const Topology topology = Topology::parse(kTwoNodes, "two-nodes.yaml");
  const CostModel model(topology, Calibration::defaults());
  const Workload w = small_workload();
  auto candidate = [&](StrategyKind kind, StrategyKnobs knobs) {
    Candidate c;
    c.plan =
        make_plan(kind, StrategyParams{.sequence_parallel = 8, .data_parallel = 1, .knobs = knobs}, w, topology, 8);
    c.feasible = true;
    c.cost = model.evaluate(c.plan);
    return c;
  };
  SearchResult result;
  result.candidates = {candidate(StrategyKind::Usp, UspKnobs{2, 4, ContextPlacement::HeadFirst}),
                       candidate(StrategyKind::DoubleRing, DoubleRingKnobs{2, 1, ContextPlacement::HeadFirst}),
                       candidate(StrategyKind::Zigzag, default_knobs(StrategyKind::Zigzag)),
                       candidate(StrategyKind::Usp, UspKnobs{1, 8, ContextPlacement::HeadFirst}),
                       candidate(StrategyKind::DoubleRing, DoubleRingKnobs{1, 1, ContextPlacement::HeadFirst}),
                       candidate(StrategyKind::Ring, default_knobs(StrategyKind::Ring))};
  std::stable_sort(result.candidates.begin(), result.candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.cost.step_ms < b.cost.step_ms; });
  result.best = 0;
  SearchResult on_threads = result;
  merge_same_schedules(result, model);
  ASSERT_EQ(result.candidates.size(), 3u);
  // The hashes taken on three threads merge alike.
  merge_same_schedules(on_threads, model, 3);
  ASSERT_EQ(on_threads.candidates.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(candidate_label(on_threads.candidates[i]), candidate_label(result.candidates[i]));
    EXPECT_EQ(on_threads.candidates[i].same_schedule_as, result.candidates[i].same_schedule_as);
  }
  std::map<std::string, std::vector<std::string>> merged;
  for (const Candidate& c : result.candidates)
    merged[std::string(to_string(c.plan.strategy)) + " " + c.describe_params()] = c.same_schedule_as;
  EXPECT_EQ(merged["usp u=2 r=4"], (std::vector<std::string>{"double-ring u=2 w=1 (head-first)"}));
  ASSERT_TRUE(merged.count("zigzag S=8"));
  EXPECT_EQ(merged["zigzag S=8"].size(), 2u);
  EXPECT_TRUE(merged["ring S=8"].empty());
}

TEST(Explain, SentencesCompareTheWinnerWithTheRunnerUpAndEachOtherStrategy) {
  const Topology topology = Topology::parse(kTwoNodes, "two-nodes.yaml");
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Step;
  SearchResult result = search_plans(topology, small_workload(), model, options);
  complete_strategy_bests(result, model, 0.9 * 80);
  merge_same_schedules(result, model);
  mark_ties(result);
  const std::vector<std::string> lines = explain_ranking(result);
  ASSERT_GE(lines.size(), 2u);
  const Candidate& best = result.candidates[0];
  EXPECT_EQ(lines[0].rfind(candidate_label(best) + " wins", 0), 0u) << lines[0];
  const Candidate& runner_up = result.candidates[1];
  EXPECT_NE(lines[0].find("the runner-up " + candidate_label(runner_up)), std::string::npos) << lines[0];
  // One line per other strategy that has a priced candidate, each naming its best.
  std::vector<StrategyKind> others;
  for (const Candidate& c : result.candidates)
    if (c.feasible && !c.pruned && c.plan.strategy != best.plan.strategy &&
        c.plan.strategy != runner_up.plan.strategy &&
        std::find(others.begin(), others.end(), c.plan.strategy) == others.end()) {
      others.push_back(c.plan.strategy);
      const std::string line = "  " + candidate_label(c) + " is ";
      EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(line, 0) == 0; }))
          << line;
    }
  EXPECT_EQ(lines.size(), others.empty() ? 1 : 2 + others.size());
}

// Completing the strategies' bests on several threads prices the same candidates to the same
// results, in the same order, as on one.
TEST(Explain, StrategyBestsAreTheSameOnThreads) {
  const Topology topology = Topology::parse(kTwoNodes, "two-nodes.yaml");
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Step;
  const SearchResult searched = search_plans(topology, small_workload(), model, options);
  const auto pruned = [](const SearchResult& r) {
    return std::count_if(r.candidates.begin(), r.candidates.end(),
                         [](const Candidate& c) { return c.feasible && c.pruned; });
  };
  SearchResult one = searched, three = searched;
  complete_strategy_bests(one, model, 0.9 * 80, 1);
  complete_strategy_bests(three, model, 0.9 * 80, 3);
  ASSERT_GE(pruned(searched) - pruned(one), 2) << "too few bests to price for threads to matter";
  ASSERT_EQ(one.candidates.size(), three.candidates.size());
  for (size_t i = 0; i < one.candidates.size(); ++i) {
    const Candidate &a = one.candidates[i], &b = three.candidates[i];
    SCOPED_TRACE(candidate_label(a));
    EXPECT_EQ(candidate_label(a), candidate_label(b));
    EXPECT_EQ(a.feasible, b.feasible);
    EXPECT_EQ(a.pruned, b.pruned);
    EXPECT_EQ(a.cost.step_ms, b.cost.step_ms);
    EXPECT_EQ(a.cost.parts.exposed_ms[int(CommTier::Network)], b.cost.parts.exposed_ms[int(CommTier::Network)]);
    EXPECT_EQ(a.reason, b.reason);
  }
}

// The progress callback sees every candidate of each stage once, in order: an attention search
// prices each under every GPU order ("orders"); a whole-step search under one node-local order (as
// here) only places them, then takes their memory and compute bounds ("bounds") and prices steps.
// With three threads it is called on the calling thread alone, and "bounds" counts up to the
// total, never down.
TEST(SearchProgress, ReportsEachCandidateOfEachStage) {
  const Topology topology = Topology::parse(kTwoNodes, "two-nodes.yaml");
  const CostModel model(topology, Calibration::defaults());
  for (int threads : {1, 3})
    for (Scope scope : {Scope::Attention, Scope::Step}) {
      SCOPED_TRACE(fmt::format("{} threads, {}", threads, to_string(scope)));
      SearchOptions options;
      options.scope = scope;
      options.threads = threads;
      std::map<std::string, std::vector<std::pair<size_t, size_t>>> calls;
      const std::thread::id caller = std::this_thread::get_id();
      options.progress = [&](const char* stage, size_t done, size_t total) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        calls[stage].push_back({done, total});
      };
      const SearchResult result = search_plans(topology, small_workload(), model, options);
      if (scope == Scope::Attention) {
        ASSERT_EQ(calls.size(), 1u);
        const auto& orders = calls["orders"];
        ASSERT_EQ(orders.size(), result.candidates.size());
        for (size_t i = 0; i < orders.size(); ++i)
          EXPECT_EQ(orders[i], std::make_pair(i + 1, orders.size()));
        continue;
      }
      ASSERT_EQ(calls.size(), 2u);
      const auto& bounds = calls["bounds"];
      ASSERT_FALSE(bounds.empty());
      const size_t total = bounds.front().second;
      EXPECT_EQ(bounds.back(), std::make_pair(total, total));
      for (size_t i = 0; i < bounds.size(); ++i) {
        EXPECT_EQ(bounds[i].second, total);
        if (threads == 1) {
          EXPECT_EQ(bounds[i].first, i + 1);
        }
        if (i > 0) {
          EXPECT_GE(bounds[i].first, bounds[i - 1].first);
        }
      }
      const auto& steps = calls["steps"];
      ASSERT_FALSE(steps.empty());
      for (size_t i = 0; i < steps.size(); ++i)
        EXPECT_EQ(steps[i], std::make_pair(i, steps.size()));
    }
}

// ---- suggestions when nothing is feasible ----------------------------------------------------

class Suggestions : public ::testing::Test {
 protected:
  Suggestions() : topology_(Topology::load("dgx-h100", 4)), model_(topology_, Calibration::defaults()) {}
  SearchOptions options(int gpus, std::vector<int> tensor = {1, 2, 4, 8}) const {
    SearchOptions o;
    o.scope = Scope::Step;
    o.ranks = gpus;
    o.mode = SearchMode::Heuristic;
    o.tensor_degrees = std::move(tensor);
    return o;
  }
  bool feasible(const Workload& w, const SearchOptions& o) const {
    return search_plans(topology_, w, model_, o).best >= 0;
  }
  // The suggestion whose flags are `flags`; fails the test when there is none.
  const Suggestion* find(const std::vector<Suggestion>& list, const std::string& flags) const {
    for (const Suggestion& s : list)
      if (s.flags == flags) return &s;
    std::string all;
    for (const Suggestion& s : list)
      all += s.flags + "; ";
    ADD_FAILURE() << "no suggestion '" << flags << "' among: " << all;
    return nullptr;
  }
  Topology topology_;
  CostModel model_;
};

Workload llama(int64_t seq) {
  Workload w = load_workload("llama-3-8b");
  w.seq = seq;
  return w;
}

// A trial rejects a candidate whose model state alone exceeds the budget without building its
// programs: on searches where nothing fits (or only some candidates do), the best plan and the
// candidates that fit are those of exact rejections, and each rejected candidate reports at most
// its step's memory.
TEST_F(Suggestions, TrialsRejectOnTheModelStateAloneWhatExactMemoryRejects) {
  int checked = 0, by_model_state = 0;
  struct Case {
    const char* model;
    int zero;
    int64_t seq;
  };
  for (const auto& [model, zero, seq] : {Case{"llama-3-70b", 0, 8192}, Case{"llama-3-70b", 1, 32768},
                                         Case{"llama-3-70b", 3, 131072}, Case{"llama-3-8b", 0, 131072}}) {
    Workload w = load_workload(model);
    w.zero_stage = zero;
    w.seq = seq;
    SCOPED_TRACE(fmt::format("{} ZeRO {} seq {}", model, zero, seq));
    SearchOptions exact = options(8, {1, 2}), fast = exact;
    fast.exact_rejected_memory = false;
    const SearchResult a = search_plans(topology_, w, model_, fast), b = search_plans(topology_, w, model_, exact);
    ASSERT_EQ(a.best, b.best);
    if (b.best >= 0) {
      EXPECT_EQ(a.candidates[size_t(a.best)].cost.step_ms, b.candidates[size_t(b.best)].cost.step_ms);
    }
    ASSERT_EQ(a.candidates.size(), b.candidates.size());
    for (size_t i = 0; i < a.candidates.size(); ++i) {
      const Candidate &x = a.candidates[i], &y = b.candidates[i];
      EXPECT_EQ(x.feasible, y.feasible);
      if (x.feasible || !y.cost.memory.total_GiB) continue;
      EXPECT_LE(x.cost.memory.total_GiB, y.cost.memory.total_GiB);
      by_model_state += x.cost.memory.total_GiB < y.cost.memory.total_GiB;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  EXPECT_GT(by_model_state, checked / 4);
}

TEST_F(Suggestions, HigherZeroStage) {
  Workload w = llama(4096);
  w.zero_stage = 0;
  const SearchOptions o = options(2, {1});
  ASSERT_FALSE(feasible(w, o));
  const auto list = suggest_fixes(topology_, w, model_, o);
  ASSERT_TRUE(find(list, "--zero-stage 3"));
  for (int nearer : {1, 2}) {  // the nearer stages are not enough, so they are not suggested
    w.zero_stage = nearer;
    EXPECT_FALSE(feasible(w, o)) << "ZeRO " << nearer;
  }
  w.zero_stage = 3;
  EXPECT_TRUE(feasible(w, o));
}

// The trials' searches report their progress under their stages' names for a suggestion, on the
// calling thread, counting each stage up to its total.
TEST_F(Suggestions, TrialsReportProgressAsTheSuggestions) {
  Workload w = llama(4096);
  w.zero_stage = 0;
  SearchOptions o = options(2, {1});
  o.threads = 2;
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> calls;
  const std::thread::id caller = std::this_thread::get_id();
  o.progress = [&](const char* stage, size_t done, size_t total) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_LE(done, total);
    calls[stage].push_back({done, total});
  };
  const auto list = suggest_fixes(topology_, w, model_, o);
  ASSERT_TRUE(find(list, "--zero-stage 3"));
  std::set<std::string> stages;
  for (const auto& [stage, _] : calls)
    stages.insert(stage);
  EXPECT_EQ(stages, (std::set<std::string>{"bounds for a suggestion", "steps for a suggestion"}));
}

TEST_F(Suggestions, CheckpointingAndMoreGpus) {
  Workload w = llama(131072);
  w.checkpointing = Checkpointing::None;
  const SearchOptions o = options(8, {1});
  ASSERT_FALSE(feasible(w, o));
  const auto list = suggest_fixes(topology_, w, model_, o);
  const Suggestion* full = find(list, "--checkpointing full");
  const Suggestion* more = find(list, "--gpus 24");
  ASSERT_TRUE(full && more);
  EXPECT_GT(full->step_ms, 0);
  Workload selective = w;
  selective.checkpointing = Checkpointing::Selective;
  EXPECT_FALSE(feasible(selective, o));
  Workload checkpointed = w;
  checkpointed.checkpointing = Checkpointing::Full;
  EXPECT_TRUE(feasible(checkpointed, o));
  SearchOptions sixteen = o, twenty_four = o;
  sixteen.ranks = 16;
  twenty_four.ranks = 24;
  EXPECT_FALSE(feasible(w, sixteen));
  EXPECT_TRUE(feasible(w, twenty_four));
}

TEST_F(Suggestions, NearestSequenceLengthsFewerGpusAndAnyStrategy) {
  const Workload w = llama(1032);
  SearchOptions o = options(16, {1});
  o.strategy = StrategyKind::Zigzag;
  ASSERT_FALSE(feasible(w, o));
  const auto list = suggest_fixes(topology_, w, model_, o);
  ASSERT_TRUE(find(list, "--seq 1024") && find(list, "--seq 1056") && find(list, "--gpus 4") &&
              find(list, "--strategy auto"));
  // Zigzag on 16 GPUs needs a multiple of 32 tokens: 1024 and 1056 are the nearest.
  for (int64_t seq = 1025; seq < 1056; ++seq)
    if (seq != 1032 && seq % 32 != 0) {
      EXPECT_FALSE(feasible(llama(seq), o)) << seq;
    }
  EXPECT_TRUE(feasible(llama(1024), o));
  SearchOptions eight = o, four = o, any = o;
  eight.ranks = 8;
  four.ranks = 4;
  any.strategy.reset();
  EXPECT_FALSE(feasible(w, eight));
  EXPECT_TRUE(feasible(w, four));
  EXPECT_TRUE(feasible(w, any));
}

TEST_F(Suggestions, SmallestMemoryFractionThatFits) {
  Workload w = llama(8192);
  w.zero_stage = 3;
  const SearchOptions o = options(2);
  ASSERT_FALSE(feasible(w, o));
  const auto list = suggest_fixes(topology_, w, model_, o);
  ASSERT_TRUE(find(list, "--memory-fraction 0.94"));
  SearchOptions fits = o, short_of_it = o;
  fits.memory_budget_fraction = 0.94;
  short_of_it.memory_budget_fraction = 0.93;
  EXPECT_TRUE(feasible(w, fits));
  EXPECT_FALSE(feasible(w, short_of_it));
}

TEST_F(Suggestions, SeveralChangesTogetherWhenNoneAloneFits) {
  Workload w = load_workload("llama-3-70b");
  w.layers = 40;
  w.seq = 8192;
  const SearchOptions o = options(8, {1});
  ASSERT_FALSE(feasible(w, o));
  const auto list = suggest_fixes(topology_, w, model_, o);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].flags, "--zero-stage 3 --checkpointing full");
  Workload zero3 = w, full = w;
  zero3.zero_stage = 3;
  full.checkpointing = Checkpointing::Full;
  EXPECT_FALSE(feasible(zero3, o));
  EXPECT_FALSE(feasible(full, o));
  w.zero_stage = 3;
  w.checkpointing = Checkpointing::Full;
  EXPECT_TRUE(feasible(w, o));
}

// A V100 has no bf16 tensor cores: every candidate of a bf16 workload is rejected whatever else
// changes, and the suggestion is the dtype it runs, alone when that is enough, otherwise under
// every other change tried (here a higher ZeRO stage): each suggestion plans a feasible step and
// the change before it does not.
TEST(SuggestionsOnAV100, TheDtypeItRunsAloneOrUnderTheOtherChanges) {
  const Topology v100 = Topology::load("dgx-1v", 1);
  const CostModel model(v100, Calibration::defaults());
  SearchOptions o;
  o.scope = Scope::Step;
  o.ranks = 8;
  o.mode = SearchMode::Heuristic;
  o.tensor_degrees = {1};
  auto feasible = [&](const Workload& w) { return search_plans(v100, w, model, o).best >= 0; };
  Workload w = llama(4096);
  w.zero_stage = 3;
  ASSERT_EQ(w.dtype, DType::BF16);
  ASSERT_FALSE(feasible(w));
  std::vector<Suggestion> list = suggest_fixes(v100, w, model, o);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].flags, "--dtype fp16");
  EXPECT_NE(list[0].change.find("V100"), std::string::npos) << list[0].change;
  Workload fp16 = w;
  fp16.dtype = DType::FP16;
  EXPECT_TRUE(feasible(fp16));

  w.zero_stage = 0;  // 16 bytes of model state per parameter on every GPU: fp16 alone is not enough
  fp16.zero_stage = 0;
  ASSERT_FALSE(feasible(fp16));
  list = suggest_fixes(v100, w, model, o);
  ASSERT_FALSE(list.empty());
  int stage = -1;
  for (const Suggestion& s : list) {
    EXPECT_EQ(s.flags.rfind("--dtype fp16 ", 0), 0u) << s.flags;
    if (s.flags.rfind("--dtype fp16 --zero-stage ", 0) == 0) stage = std::stoi(s.flags.substr(26));
  }
  ASSERT_GT(stage, 0);
  fp16.zero_stage = stage;
  EXPECT_TRUE(feasible(fp16));
  fp16.zero_stage = stage - 1;
  EXPECT_FALSE(feasible(fp16));
}

// Of a search where nothing fits, every candidate that got a plan is rejected on its memory, the
// exact memory of its step (its attention programs' footprint); `also` checks more of each. Returns
// how many got a plan.
int expect_each_rejected_with_exact_memory(const SearchResult& result, const CostModel& model,
                                           const std::function<void(const Candidate&)>& also = {}) {
  int rejected = 0;
  for (const Candidate& c : result.candidates) {
    if (c.plan.ranks.empty()) continue;  // rejected by its strategy's rules
    SCOPED_TRACE(c.describe_params());
    if (also) also(c);
    EXPECT_NE(c.reason.find("GiB budget"), std::string::npos) << c.reason;
    EXPECT_EQ(c.cost.memory.total_GiB, step_memory(c.plan, model.memory_footprint(c.plan)).total_GiB);
    ++rejected;
  }
  return rejected;
}

// On PCIe nodes the GPU order inside a node matters, and a whole-step search picks each step's
// order by its attention layer. Where no step fits the memory under any order (node-local orders
// keep every rank on its node, so the memory is the same under each), no order is chosen: every
// candidate is rejected with its exact memory (its attention programs' footprint), in the first
// order. Where one fits, the orders are searched as before.
TEST(NothingFitsOnPcie, NoGpuOrderIsSearchedAndEachRejectionHasItsExactMemory) {
  const Topology pcie = Topology::load("pcie-8gpu", 1);
  const CostModel model(pcie, Calibration::defaults());
  SearchOptions o;
  o.scope = Scope::Step;
  o.mode = SearchMode::Exhaustive;
  Workload w = load_workload("llama-3-70b");
  w.seq = 65536;
  const SearchResult none = search_plans(pcie, w, model, o);
  ASSERT_LT(none.best, 0);
  EXPECT_GT(
      expect_each_rejected_with_exact_memory(
          none, model, [](const Candidate& c) { EXPECT_EQ(c.describe_placement().find("order="), std::string::npos); }),
      5);
  // On four nodes three pipelined steps fit: the orders are searched, and rejected candidates
  // show the order their attention layer ran best in.
  const Topology four = Topology::load("pcie-8gpu", 4);
  const CostModel four_model(four, Calibration::defaults());
  o.mode = SearchMode::Heuristic;
  o.tensor_degrees = {1, 2, 4, 8};
  o.pipeline_degrees = {1, 2, 4};
  const SearchResult some = search_plans(four, w, four_model, o);
  ASSERT_GE(some.best, 0);
  int ordered = 0;
  for (const Candidate& c : some.candidates)
    ordered += c.describe_placement().find("order=") != std::string::npos;
  EXPECT_GT(ordered, 0) << "no candidate got another order than the first: were the orders searched?";
}

// Large clusters are screened: only the candidates a closed form ranks best are priced, under
// each GPU order. Where no step fits and more than two orders would be priced (Summit's nodes of
// two sockets: ten distinct orders), nothing is screened or priced either: each candidate is
// rejected with its exact memory. Where one fits, the screen runs as before.
TEST(NothingFitsOnSummit, ScreenedSearchesRejectEachCandidateWithItsExactMemory) {
  const Topology summit = Topology::load("summit", 4);
  const CostModel model(summit, Calibration::defaults());
  SearchOptions o;
  o.scope = Scope::Step;
  o.mode = SearchMode::Heuristic;
  o.screen_above_gpus = 8;  // 24 GPUs are screened
  Workload w = load_workload("llama-3-70b");
  w.seq = 98304;          // a multiple of 2 x 24 GPUs, as zigzag layouts need
  w.dtype = DType::FP16;  // a V100 has no bf16
  const SearchResult none = search_plans(summit, w, model, o);
  ASSERT_LT(none.best, 0);
  for (const Candidate& c : none.candidates)
    EXPECT_FALSE(c.screened) << c.describe_params() << ": " << c.reason;
  EXPECT_GT(expect_each_rejected_with_exact_memory(none, model), 5);
  Workload small = load_workload("gpt-3b");
  small.seq = 12288;
  small.dtype = DType::FP16;
  const SearchResult some = search_plans(summit, small, model, o);
  ASSERT_GE(some.best, 0);
  EXPECT_TRUE(std::any_of(some.candidates.begin(), some.candidates.end(), [](const Candidate& c) {
    return c.screened;
  })) << "no candidate screened where steps fit";
}

}  // namespace
}  // namespace wallfacer
