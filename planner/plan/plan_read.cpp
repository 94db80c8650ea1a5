// Reads plan files (docs/formats/plan.md) and checks that their ranks and groups form a valid
// mapping, so the schedule builders can trust what they get. Every error names the file and line.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/plan/plan.hpp>

namespace wallfacer {
namespace {

// A parse helper that re-raises a name-lookup error (no file, no line) at the node it came from.
template <typename Parse>
auto parse_at(const std::string& source, const YAML::Node& node, const char* what, Parse parse) {
  const std::string text = yaml::as_string(source, node, what);
  try {
    return parse(text);
  } catch (const InputError& e) {
    if (!e.file().empty()) throw;
    yaml::fail(source, node, e.message());
  }
}

YAML::Node section(const std::string& source, const YAML::Node& parent, const char* key) {
  const YAML::Node node = parent[key];
  if (!node.IsDefined() || node.IsNull()) yaml::fail(source, parent, fmt::format("missing required field '{}'", key));
  return node;
}

// The values of a mapping's keys, read in one pass: yaml-cpp looks keys up linearly, and a plan for
// a large cluster has tens of thousands of rank entries. Every key is required but the last
// `optional` ones, which come back as null nodes when absent.
template <size_t N>
std::array<YAML::Node, N> fields_of(const std::string& source, const YAML::Node& entry,
                                    std::initializer_list<std::string_view> keys, std::string_view what,
                                    size_t optional = 0) {
  yaml::expect_map(source, entry, what);
  std::array<std::optional<YAML::Node>, N> found;
  for (const auto& kv : entry) {
    const std::string& key = kv.first.Scalar();
    size_t i = 0;
    for (std::string_view k : keys) {
      if (k == key) break;
      ++i;
    }
    if (i == N) yaml::check_keys(source, entry, keys, what);  // throws, naming the allowed keys
    found[i].emplace(kv.second);
  }
  size_t i = 0;
  for (std::string_view k : keys) {
    if (i >= N) break;
    if (i + optional >= N && !found[i]) found[i].emplace(YAML::Node(YAML::NodeType::Null));
    if (!found[i] || found[i]->IsNull()) {
      if (i + optional < N) yaml::fail(source, entry, fmt::format("missing required field '{}'", k));
    }
    ++i;
  }
  // Copy-constructed: assigning to a YAML::Node would rebind or overwrite the node it refers to.
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<YAML::Node, N>{*found[I]...};
  }
  (std::make_index_sequence<N>{});
}

int int_at_least(const std::string& source, const YAML::Node& node, std::string_view key, int minimum) {
  const int64_t v = yaml::as_int(source, node, key);
  if (v < minimum) yaml::fail(source, node, fmt::format("'{}' must be at least {}, got {}", key, minimum, v));
  if (v > std::numeric_limits<int>::max()) yaml::fail(source, node, fmt::format("'{}' is out of range: {}", key, v));
  return int(v);
}

// An int field with a lower bound, named in the message when out of range.
int get_int_at_least(const std::string& source, const YAML::Node& parent, const char* key, int minimum) {
  const int64_t v = yaml::get_int(source, parent, key);
  if (v < minimum) yaml::fail(source, parent[key], fmt::format("'{}' must be at least {}, got {}", key, minimum, v));
  if (v > std::numeric_limits<int>::max())
    yaml::fail(source, parent[key], fmt::format("'{}' is out of range: {}", key, v));
  return int(v);
}

int read_format_version(const std::string& source, const YAML::Node& root) {
  const YAML::Node node = section(source, root, "format_version");
  const int64_t version = yaml::as_int(source, node, "format_version");
  if (version > Plan::kFormatVersion)
    yaml::fail(source, node,
               fmt::format("plan format_version {} is newer than this wallfacer reads ({}); use a newer wallfacer "
                           "or make the plan again",
                           version, Plan::kFormatVersion));
  if (version < 1) yaml::fail(source, node, fmt::format("unsupported plan format_version {}", version));
  return int(version);
}

void read_topology(const std::string& source, const YAML::Node& root, Plan& plan) {
  const YAML::Node node = section(source, root, "topology");
  yaml::check_keys(source, node, {"name", "hash", "nodes", "file"}, "topology");
  plan.topology_name = yaml::get_string(source, node, "name");
  plan.topology_file = yaml::get_string(source, node, "file", "");
  plan.topology_hash = yaml::get_string(source, node, "hash");
  plan.topology_nodes = get_int_at_least(source, node, "nodes", 1);
  if (plan.topology_hash.empty()) yaml::fail(source, node["hash"], "'hash' must not be empty");
}

// An optional knob: absent means 1 (plans write only their strategy's knobs).
int knob(const std::string& source, const YAML::Node& node, const char* key) {
  return node[key] ? get_int_at_least(source, node, key, 1) : 1;
}

// A knob the plan's strategy does not take may still appear with its neutral value 1 (plans of
// earlier versions wrote every knob); any other value is an error rather than silently dropped.
void expect_neutral(const std::string& source, const YAML::Node& node, StrategyKind strategy,
                    std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (knob(source, node, key) != 1)
      yaml::fail(source, node[key], fmt::format("'{}' does not apply to strategy {}", key, to_string(strategy)));
}

// The placement as the strategy takes it: `default` is the first choice of those with one.
Placement read_placement(const std::string& source, const YAML::Node& node, StrategyKind strategy) {
  if (!node["placement"]) return Placement::Default;
  const YAML::Node at = node["placement"];
  const Placement p = parse_at(source, at, "placement", parse_placement);
  const bool context = strategy == StrategyKind::Usp || strategy == StrategyKind::DoubleRing;
  const bool team = strategy == StrategyKind::WallFacer;
  if (p == Placement::Default) return p;
  if (context && (p == Placement::HeadFirst || p == Placement::ContextFirst)) return p;
  if (team && (p == Placement::CollectIntra || p == Placement::P2PIntra)) return p;
  const char* takes = context ? "head-first or context-first" : team ? "collect-intra or p2p-intra" : "default only";
  yaml::fail(source, at,
             fmt::format("placement {} does not apply to strategy {} ({})", to_string(p), to_string(strategy), takes));
}

StrategyParams read_params(const std::string& source, const YAML::Node& root, StrategyKind strategy) {
  const YAML::Node node = section(source, root, "params");
  yaml::check_keys(source, node,
                   {"sequence_parallel", "data_parallel", "tensor_parallel", "pipeline_parallel", "virtual_stages",
                    "team", "ulysses", "ring", "window", "placement"},
                   "params");
  StrategyParams p;
  p.sequence_parallel = get_int_at_least(source, node, "sequence_parallel", 1);
  p.data_parallel = get_int_at_least(source, node, "data_parallel", 1);
  if (node["tensor_parallel"].IsDefined()) p.tensor_parallel = get_int_at_least(source, node, "tensor_parallel", 1);
  if (node["pipeline_parallel"].IsDefined())
    p.pipeline_parallel = get_int_at_least(source, node, "pipeline_parallel", 1);
  if (node["virtual_stages"].IsDefined()) p.virtual_stages = get_int_at_least(source, node, "virtual_stages", 1);
  const Placement placement = read_placement(source, node, strategy);
  const ContextPlacement context =
      placement == Placement::ContextFirst ? ContextPlacement::ContextFirst : ContextPlacement::HeadFirst;
  switch (strategy) {
    case StrategyKind::Usp:
      expect_neutral(source, node, strategy, {"team", "window"});
      p.knobs = UspKnobs{knob(source, node, "ulysses"), knob(source, node, "ring"), context};
      break;
    case StrategyKind::DoubleRing:
      expect_neutral(source, node, strategy, {"team", "ring"});
      p.knobs = DoubleRingKnobs{knob(source, node, "ulysses"), knob(source, node, "window"), context};
      break;
    case StrategyKind::WallFacer:
      expect_neutral(source, node, strategy, {"ulysses", "ring", "window"});
      p.knobs =
          WallFacerKnobs{knob(source, node, "team"),
                         placement == Placement::P2PIntra ? TeamPlacement::P2PIntra : TeamPlacement::CollectIntra};
      break;
    default:
      expect_neutral(source, node, strategy, {"team", "ulysses", "ring", "window"});
      p.knobs = NoKnobs{};
  }
  return p;
}

std::vector<RankSlot> read_ranks(const std::string& source, const YAML::Node& root, int topology_nodes) {
  const YAML::Node list = section(source, root, "ranks");
  yaml::expect_sequence(source, list, "ranks");
  if (list.size() == 0) yaml::fail(source, list, "'ranks' must list at least one rank");
  std::vector<RankSlot> ranks;
  std::map<int, int> rank_of_gpu;
  for (const YAML::Node& entry : list) {
    const auto [rank, gpu, node, local_gpu, nic] =
        fields_of<5>(source, entry, {"rank", "gpu", "node", "local_gpu", "nic"}, "rank entry");
    RankSlot slot;
    slot.rank = int_at_least(source, rank, "rank", 0);
    const int expected = int(ranks.size());
    if (slot.rank < expected) yaml::fail(source, rank, fmt::format("rank {} is listed twice", slot.rank));
    if (slot.rank > expected)
      yaml::fail(source, rank,
                 fmt::format("expected rank {} here, got {} (ranks are listed once each, in order 0, 1, ..., P-1)",
                             expected, slot.rank));
    slot.gpu = int_at_least(source, gpu, "gpu", 0);
    if (auto [it, fresh] = rank_of_gpu.emplace(slot.gpu, slot.rank); !fresh)
      yaml::fail(source, gpu, fmt::format("gpu {} is used by rank {} and rank {}", slot.gpu, it->second, slot.rank));
    slot.node = int_at_least(source, node, "node", 0);
    if (slot.node >= topology_nodes)
      yaml::fail(source, node,
                 fmt::format("node {} does not exist: the plan's topology has {} nodes", slot.node, topology_nodes));
    slot.local_gpu = int_at_least(source, local_gpu, "local_gpu", 0);
    slot.nic = yaml::as_string(source, nic, "nic");
    ranks.push_back(std::move(slot));
  }
  return ranks;
}

CommGroup read_group(const std::string& source, const YAML::Node& entry, int num_ranks) {
  const auto [name, kind, members, all_reduce] =
      fields_of<4>(source, entry, {"name", "kind", "ranks", "all_reduce"}, "group", 1);
  CommGroup group;
  group.name = yaml::as_string(source, name, "name");
  if (group.name.empty()) yaml::fail(source, name, "group 'name' must not be empty");
  group.kind = parse_at(source, kind, "kind", parse_group_kind);
  if (!all_reduce.IsNull()) group.all_reduce = parse_at(source, all_reduce, "all_reduce", parse_all_reduce_algorithm);
  yaml::expect_sequence(source, members, "group 'ranks'");
  if (members.size() == 0) yaml::fail(source, members, fmt::format("group '{}' has no ranks", group.name));
  std::set<int> seen;
  for (const YAML::Node& member : members) {
    const int64_t r = yaml::as_int(source, member, "ranks");
    if (r < 0 || r >= num_ranks)
      yaml::fail(
          source, member,
          fmt::format("group '{}': rank {} does not exist (the plan has ranks 0..{})", group.name, r, num_ranks - 1));
    if (!seen.insert(int(r)).second)
      yaml::fail(source, member, fmt::format("group '{}' lists rank {} twice", group.name, r));
    group.ranks.push_back(int(r));
  }
  return group;
}

std::vector<CommGroup> read_groups(const std::string& source, const YAML::Node& root, int num_ranks) {
  const YAML::Node list = section(source, root, "groups");
  yaml::expect_sequence(source, list, "groups");
  std::vector<CommGroup> groups;
  std::map<std::string, int> line_of_name;
  for (const YAML::Node& entry : list) {
    CommGroup group = read_group(source, entry, num_ranks);
    if (auto [it, fresh] = line_of_name.emplace(group.name, yaml::line_of(entry)); !fresh)
      yaml::fail(source, entry["name"],
                 fmt::format("group name '{}' is used twice (first on line {})", group.name, it->second));
    groups.push_back(std::move(group));
  }
  return groups;
}

double get_non_negative(const std::string& source, const YAML::Node& node, const char* key) {
  const double v = yaml::get_double(source, node, key);
  if (v < 0) yaml::fail(source, node[key], fmt::format("'{}' must not be negative, got {}", key, v));
  return v;
}

int64_t get_bytes(const std::string& source, const YAML::Node& node, const char* key) {
  const int64_t v = yaml::get_int(source, node, key);
  if (v < 0) yaml::fail(source, node[key], fmt::format("'{}' must not be negative, got {}", key, v));
  return v;
}

Prediction read_prediction(const std::string& source, const YAML::Node& node) {
  yaml::check_keys(
      source, node,
      {"forward_ms", "backward_ms", "step_ms", "p2p_bytes_forward", "p2p_bytes_backward", "collective_bytes_forward",
       "collective_bytes_backward", "attention_ms", "tokens_per_s", "memory_GiB", "mfu"},
      "prediction");
  Prediction p;
  p.forward_ms = get_non_negative(source, node, "forward_ms");
  p.backward_ms = get_non_negative(source, node, "backward_ms");
  p.step_ms = get_non_negative(source, node, "step_ms");
  p.p2p_bytes_forward = get_bytes(source, node, "p2p_bytes_forward");
  p.p2p_bytes_backward = get_bytes(source, node, "p2p_bytes_backward");
  p.collective_bytes_forward = get_bytes(source, node, "collective_bytes_forward");
  p.collective_bytes_backward = get_bytes(source, node, "collective_bytes_backward");
  if (node["attention_ms"].IsDefined()) p.attention_ms = get_non_negative(source, node, "attention_ms");
  if (node["tokens_per_s"].IsDefined()) p.tokens_per_s = get_non_negative(source, node, "tokens_per_s");
  p.memory_GiB = get_non_negative(source, node, "memory_GiB");
  p.mfu = get_non_negative(source, node, "mfu");
  return p;
}

}  // namespace

Plan parse_plan(const std::string& yaml_text, const std::string& source) {
  const YAML::Node root = yaml::parse(yaml_text, source);
  yaml::expect_map(source, root, "a plan file");
  Plan plan;
  // The version comes first: a newer file may have keys this reader does not know.
  plan.format_version = read_format_version(source, root);
  yaml::check_keys(
      source, root,
      {"format_version", "scope", "topology", "workload", "strategy", "params", "ranks", "groups", "prediction"},
      "plan");
  // Version 1 had no scope: its schedules and predictions were one attention layer's.
  if (plan.format_version < 2)
    plan.scope = Scope::Attention;
  else
    plan.scope = parse_at(source, section(source, root, "scope"), "scope", parse_scope);
  plan.format_version = Plan::kFormatVersion;  // in memory a plan is always of the current version
  read_topology(source, root, plan);
  plan.workload = detail::workload_from_yaml(section(source, root, "workload"), source, true);
  plan.strategy = parse_at(source, section(source, root, "strategy"), "strategy", parse_strategy);
  plan.params = read_params(source, root, plan.strategy);
  // Pipeline stages split the model's layers; a plan of one attention layer has none to split.
  if (plan.scope != Scope::Step && plan.params.pipeline_parallel > 1)
    yaml::fail(source, root["params"]["pipeline_parallel"],
               fmt::format("pipeline_parallel {} needs a plan of the whole step (scope: step); one attention layer "
                           "has no layers to split into stages",
                           plan.params.pipeline_parallel));
  plan.ranks = read_ranks(source, root, plan.topology_nodes);
  const StrategyParams& sp = plan.params;
  const int64_t p = int64_t(sp.sequence_parallel) * sp.data_parallel * sp.tensor_parallel * sp.pipeline_parallel;
  if (p != plan.num_ranks()) {
    yaml::fail(
        source, root["params"],
        fmt::format("sequence_parallel * data_parallel{}{} = {} * {}{}{} = {}, but the plan lists {} ranks",
                    sp.tensor_parallel > 1 ? " * tensor_parallel" : "",
                    sp.pipeline_parallel > 1 ? " * pipeline_parallel" : "", sp.sequence_parallel, sp.data_parallel,
                    sp.tensor_parallel > 1 ? fmt::format(" * {}", sp.tensor_parallel) : "",
                    sp.pipeline_parallel > 1 ? fmt::format(" * {}", sp.pipeline_parallel) : "", p, plan.num_ranks()));
  }
  plan.groups = read_groups(source, root, plan.num_ranks());
  if (root["prediction"].IsDefined()) plan.prediction = read_prediction(source, root["prediction"]);
  return plan;
}

Plan read_plan_file(const std::string& path) {
  return parse_plan(yaml::read_file(path), path);
}

}  // namespace wallfacer
