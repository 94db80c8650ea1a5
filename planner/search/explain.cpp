// The explanation of a ranking (explain.hpp): merged schedules, ties and the sentences that say
// where the winner gains.
#include <wallfacer/search/explain.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <wallfacer/schedule/schedule_hash.hpp>
#include <wallfacer/schedule/strategy.hpp>
#include "parallel.hpp"

namespace wallfacer {
namespace {

bool fully_priced(const Candidate& c) {
  return c.feasible && !c.pruned && !c.plan.ranks.empty();
}

// The ranking's order (search.hpp): priced feasible by step, pruned by bound, then rejected.
void restore_order(SearchResult& result) {
  const Candidate* best = result.best >= 0 ? &result.candidates[size_t(result.best)] : nullptr;
  const std::string best_label = best ? candidate_label(*best) : "";
  auto tier = [](const Candidate& c) { return !c.feasible ? 2 : c.pruned ? 1 : 0; };
  std::stable_sort(result.candidates.begin(), result.candidates.end(), [&](const Candidate& a, const Candidate& b) {
    const int ta = tier(a), tb = tier(b);
    if (ta != tb) return ta < tb;
    return ta < 2 && a.cost.step_ms < b.cost.step_ms;
  });
  result.best = !result.candidates.empty() && tier(result.candidates.front()) == 0 ? 0 : -1;
}

uint64_t candidate_hash(const Candidate& c, const CostModel& model) {
  uint64_t h = c.cost.attention_fingerprint;  // a whole step's pricing took it
  if (h == 0) {
    Plan attention = c.plan;
    attention.scope = Scope::Attention;
    Schedule schedule;
    model.build_timed(attention, schedule);
    h = schedule_hash(attention, schedule);
  }
  h = (h ^ uint64_t(c.plan.params.tensor_parallel)) * 1099511628211ull;
  h = (h ^ uint64_t(c.plan.params.data_parallel)) * 1099511628211ull;
  // Virtual stages change the step's order, not the attention programs.
  if (c.plan.params.virtual_stages > 1) h = (h ^ uint64_t(c.plan.params.virtual_stages << 8)) * 1099511628211ull;
  return h;
}

struct Part {
  const char* name;
  double best_ms, other_ms;
};

std::vector<Part> parts_of(const StepParts& a, const StepParts& b) {
  return {{"compute", a.compute_ms, b.compute_ms},
          {"load imbalance", a.imbalance_ms, b.imbalance_ms},
          {"exposed NVLink", a.exposed_ms[int(CommTier::NvLink)], b.exposed_ms[int(CommTier::NvLink)]},
          {"exposed PCIe", a.exposed_ms[int(CommTier::Pcie)], b.exposed_ms[int(CommTier::Pcie)]},
          {"exposed network", a.exposed_ms[int(CommTier::Network)], b.exposed_ms[int(CommTier::Network)]},
          {"idle", a.idle_ms, b.idle_ms}};
}

std::string ms_text(double ms) {
  if (ms < 5e-4) return "0";
  return ms >= 100 ? fmt::format("{:.0f}", ms) : ms >= 1 ? fmt::format("{:.1f}", ms) : fmt::format("{:.3f}", ms);
}

// What the two do per layer over the slowest tier either uses.
std::string transfers_text(const Candidate& best, const Candidate& other) {
  const StepParts &a = best.cost.parts, &b = other.cost.parts;
  for (int t = kNumCommTiers - 1; t >= 0; --t) {
    const double x = a.transfers_per_layer[t], y = b.transfers_per_layer[t];
    if (x == 0 && y == 0) continue;
    if (std::abs(x - y) < 0.05) return "";
    const char* tier = t == 2 ? "the network" : t == 1 ? "PCIe" : "NVLink";
    if (x == 0) return fmt::format("; each GPU sends over {} {:.1f} times per layer, the winner never", tier, y);
    return fmt::format("; each GPU sends over {} {:.1f} times per layer, the winner {:.1f}", tier, y, x);
  }
  return "";
}

}  // namespace

std::string candidate_label(const Candidate& c) {
  return fmt::format("{} {} ({})", to_string(c.plan.strategy), c.describe_params(), c.describe_placement());
}

void complete_strategy_bests(SearchResult& result, const CostModel& model, double memory_budget_GiB, int threads) {
  // Each round prices at most one candidate of each strategy, the pruned one of least bound (the
  // ranking lists them by bound), while its bound is below the strategy's best step priced.
  for (;;) {
    std::map<StrategyKind, double> best;  // priced ones come first, by step
    std::set<StrategyKind> seen;
    std::vector<Candidate*> to_price;
    for (Candidate& c : result.candidates) {
      if (!c.feasible) continue;
      const StrategyKind kind = c.plan.strategy;
      if (!c.pruned) {
        best.try_emplace(kind, c.cost.step_ms);
        continue;
      }
      if (c.plan.ranks.empty() || !seen.insert(kind).second) continue;
      const auto priced = best.find(kind);
      if (priced == best.end() || (!c.screened && c.cost.step_ms < priced->second)) to_price.push_back(&c);
    }
    if (to_price.empty()) return;
    // Each priced on its own: one candidate per thread.
    detail::for_each_index(to_price.size(), threads,
                           [&](size_t i) { to_price[i]->cost = model.evaluate(to_price[i]->plan); });
    for (Candidate* c : to_price) {
      c->plan.prediction = c->cost.to_prediction();
      c->pruned = false;
      c->screened = false;
      c->reason.clear();
      if (c->cost.memory.total_GiB > memory_budget_GiB) {
        c->feasible = false;
        c->reason = fmt::format("needs {:.1f} GiB > {:.1f} GiB budget", c->cost.memory.total_GiB, memory_budget_GiB);
      }
    }
    restore_order(result);
  }
}

void merge_same_schedules(SearchResult& result, const CostModel& model, int threads) {
  std::vector<Candidate>& cs = result.candidates;
  std::vector<bool> merged(cs.size(), false);
  auto equal_steps = [&](size_t i, size_t j) {
    const double a = cs[i].cost.step_ms, b = cs[j].cost.step_ms;
    return std::abs(a - b) <= 1e-9 * std::max(a, b);
  };
  // A candidate priced as a whole step carries its hash; any other's builds its timed programs (at
  // 512 GPUs that took a second on one thread): those the merge compares, the candidates with an
  // equal step next to them in the ranking, are taken on the threads first; any other it asks for
  // is taken when asked.
  std::vector<size_t> wanted;
  for (size_t i = 0; i < cs.size(); ++i) {
    auto equal_to = [&](size_t j) { return j < cs.size() && fully_priced(cs[j]) && equal_steps(i, j); };
    if (fully_priced(cs[i]) && ((i > 0 && equal_to(i - 1)) || equal_to(i + 1))) wanted.push_back(i);
  }
  std::vector<uint64_t> taken(wanted.size());
  detail::for_each_index(wanted.size(), threads, [&](size_t k) { taken[k] = candidate_hash(cs[wanted[k]], model); });
  std::map<size_t, uint64_t> hashes;
  for (size_t k = 0; k < wanted.size(); ++k)
    hashes.emplace(wanted[k], taken[k]);
  auto hash_of = [&](size_t i) {
    auto it = hashes.find(i);
    if (it == hashes.end()) it = hashes.emplace(i, candidate_hash(cs[i], model)).first;
    return it->second;
  };
  for (size_t i = 0; i < cs.size(); ++i) {
    if (merged[i] || !fully_priced(cs[i])) continue;
    for (size_t j = i + 1; j < cs.size() && fully_priced(cs[j]); ++j) {
      if (merged[j]) continue;
      if (!equal_steps(i, j)) break;  // sorted by step: no later one is equal
      if (hash_of(i) != hash_of(j)) continue;
      cs[i].same_schedule_as.push_back(candidate_label(cs[j]));
      merged[j] = true;
    }
  }
  std::vector<Candidate> kept;
  int best = -1;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (merged[i]) continue;
    if (int(i) == result.best) best = int(kept.size());
    kept.push_back(std::move(cs[i]));
  }
  cs = std::move(kept);
  result.best = best;
}

void mark_ties(SearchResult& result, double relative_error) {
  if (result.best < 0) return;
  const double best = result.candidates[size_t(result.best)].cost.step_ms;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    Candidate& c = result.candidates[i];
    c.tie = int(i) != result.best && fully_priced(c) && c.cost.step_ms <= best * (1 + relative_error);
  }
}

std::string compare_parts(const Candidate& best, const Candidate& other, int max_parts) {
  std::vector<Part> parts = parts_of(best.cost.parts, other.cost.parts);
  // The parts where the other loses most come first; when it loses nowhere, the largest change.
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Part& a, const Part& b) { return a.other_ms - a.best_ms > b.other_ms - b.best_ms; });
  if (parts.front().other_ms - parts.front().best_ms <= 0)
    std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
      return std::abs(a.other_ms - a.best_ms) > std::abs(b.other_ms - b.best_ms);
    });
  // A part that differs by less than a thousandth of the step says nothing.
  const double noise = 1e-3 * std::max(best.cost.step_ms, other.cost.step_ms);
  std::string text;
  for (int k = 0; k < max_parts && k < int(parts.size()); ++k) {
    const Part& p = parts[size_t(k)];
    if (k > 0 && p.other_ms - p.best_ms <= noise) break;
    text += fmt::format("{}{} {} vs {} ms", k ? ", " : "", p.name, ms_text(p.other_ms), ms_text(p.best_ms));
  }
  return text;
}

std::vector<std::string> explain_ranking(const SearchResult& result, double relative_error) {
  std::vector<std::string> lines;
  if (result.best < 0) return lines;
  const Candidate& best = result.candidates[size_t(result.best)];
  const Candidate* runner_up = nullptr;
  std::vector<const Candidate*> strategy_best;  // in ranking order
  std::set<StrategyKind> strategies_seen{best.plan.strategy};
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const Candidate& c = result.candidates[i];
    if (int(i) == result.best || !fully_priced(c)) continue;
    if (!runner_up) {
      runner_up = &c;
      strategies_seen.insert(c.plan.strategy);
      continue;
    }
    if (strategies_seen.insert(c.plan.strategy).second) strategy_best.push_back(&c);
  }
  auto versus = [&](const Candidate& other) {
    const double gap = other.cost.step_ms - best.cost.step_ms;
    const double share = best.cost.step_ms > 0 ? gap / best.cost.step_ms : 0;
    const bool tie = share <= relative_error;
    return fmt::format("{} is {} ms ({:.1f} %{}) slower: {}{}", candidate_label(other), ms_text(gap), 100 * share,
                       tie ? ", a tie" : "", compare_parts(best, other), transfers_text(best, other));
  };
  const StepParts& p = best.cost.parts;
  const std::string slowed =
      p.slowdown_ms > 0 ? fmt::format(" ({} of it slowed by communication kernels beside it)", ms_text(p.slowdown_ms))
                        : "";
  std::string first =
      fmt::format("{} wins: of its {} ms, {} ms compute{}, {} ms exposed communication ({} hidden behind compute)",
                  candidate_label(best), ms_text(best.cost.step_ms), ms_text(p.compute_ms + p.imbalance_ms), slowed,
                  ms_text(p.exposed_total_ms()), ms_text(p.hidden_ms));
  std::string tiers;
  for (int t = 0; t < kNumCommTiers; ++t)
    if (p.transfers_per_layer[t] > 0)
      tiers += fmt::format("{}{:.1f}{} over {}", tiers.empty() ? "" : ", ", p.transfers_per_layer[t],
                           tiers.empty() ? " transfers" : "",
                           t == 2   ? "the network"
                           : t == 1 ? "PCIe"
                                    : "NVLink");
  if (!tiers.empty())
    first += fmt::format("; per layer each GPU starts {}{}", tiers,
                         p.transfers_per_layer[int(CommTier::Network)] == 0 ? ", none between nodes" : "");
  if (runner_up) first += "; the runner-up " + versus(*runner_up);
  lines.push_back(first + ".");
  if (!strategy_best.empty()) lines.push_back("The best of each other strategy:");
  for (const Candidate* c : strategy_best)
    lines.push_back("  " + versus(*c) + ".");
  return lines;
}

}  // namespace wallfacer
