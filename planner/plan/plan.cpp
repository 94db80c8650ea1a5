// Plans: names of strategies, placements and group kinds, plan equality, and the check that a plan
// belongs to the topology it is run on. Reading and writing live in plan_read.cpp / plan_write.cpp.
#include <wallfacer/plan/plan.hpp>

#include <fmt/format.h>

#include <array>
#include <utility>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/text.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer {
namespace {

template <typename Enum, size_t N>
using NameTable = std::array<std::pair<Enum, const char*>, N>;

constexpr NameTable<StrategyKind, 8> kStrategyNames{{{StrategyKind::Ring, "ring"},
                                                     {StrategyKind::Zigzag, "zigzag"},
                                                     {StrategyKind::Ulysses, "ulysses"},
                                                     {StrategyKind::Usp, "usp"},
                                                     {StrategyKind::DoubleRing, "double-ring"},
                                                     {StrategyKind::AllGather, "allgather"},
                                                     {StrategyKind::WallFacer, "wallfacer"},
                                                     {StrategyKind::Lss, "lss"}}};

constexpr NameTable<Placement, 5> kPlacementNames{{{Placement::Default, "default"},
                                                   {Placement::HeadFirst, "head-first"},
                                                   {Placement::ContextFirst, "context-first"},
                                                   {Placement::CollectIntra, "collect-intra"},
                                                   {Placement::P2PIntra, "p2p-intra"}}};

constexpr NameTable<GroupKind, 11> kGroupKindNames{{{GroupKind::Ring, "ring"},
                                                    {GroupKind::SubRing, "sub-ring"},
                                                    {GroupKind::Team, "team"},
                                                    {GroupKind::AllToAll, "all-to-all"},
                                                    {GroupKind::Window, "window"},
                                                    {GroupKind::InterWindow, "inter-window"},
                                                    {GroupKind::Sequence, "sequence"},
                                                    {GroupKind::Data, "data"},
                                                    {GroupKind::World, "world"},
                                                    {GroupKind::Tensor, "tensor"},
                                                    {GroupKind::Pipeline, "pipeline"}}};

constexpr NameTable<AllReduceAlgorithm, 2> kAllReduceNames{
    {{AllReduceAlgorithm::Ring, "ring"}, {AllReduceAlgorithm::Tree, "tree"}}};

template <typename Enum, size_t N>
const char* name_of(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}

template <typename Enum, size_t N>
Enum parse_name(const NameTable<Enum, N>& table, const std::string& name, const char* what) {
  std::string choices;
  for (const auto& [v, n] : table) {
    if (name == n) return v;
    choices += (choices.empty() ? "" : ", ") + std::string(n);
  }
  throw InputError(fmt::format("unknown {} '{}' ({})", what, name, choices));
}

}  // namespace

StrategyKnobs default_knobs(StrategyKind strategy) {
  switch (strategy) {
    case StrategyKind::Usp:
      return UspKnobs{};
    case StrategyKind::DoubleRing:
      return DoubleRingKnobs{};
    case StrategyKind::WallFacer:
      return WallFacerKnobs{};
    default:
      return NoKnobs{};
  }
}

bool knobs_fit(StrategyKind strategy, const StrategyParams& params) {
  return params.knobs.index() == default_knobs(strategy).index();
}

void throw_knobs_mismatch(StrategyKind strategy) {
  throw InputError(fmt::format("strategy {}: parameters of another strategy", to_string(strategy)));
}

int team_size(const StrategyParams& params) {
  const auto* k = std::get_if<WallFacerKnobs>(&params.knobs);
  return k ? k->team : 1;
}

int ulysses_degree(const StrategyParams& params) {
  if (const auto* k = std::get_if<UspKnobs>(&params.knobs)) return k->ulysses;
  if (const auto* k = std::get_if<DoubleRingKnobs>(&params.knobs)) return k->ulysses;
  return 1;
}

int window_size(const StrategyParams& params) {
  const auto* k = std::get_if<DoubleRingKnobs>(&params.knobs);
  return k ? k->window : 1;
}

Placement placement_of(const StrategyParams& params) {
  auto context = [](ContextPlacement p) {
    return p == ContextPlacement::ContextFirst ? Placement::ContextFirst : Placement::HeadFirst;
  };
  if (const auto* k = std::get_if<UspKnobs>(&params.knobs)) return context(k->placement);
  // A double ring without a Ulysses stage has one layout; it shows as the default.
  if (const auto* k = std::get_if<DoubleRingKnobs>(&params.knobs))
    return k->ulysses == 1 ? Placement::Default : context(k->placement);
  if (const auto* k = std::get_if<WallFacerKnobs>(&params.knobs))
    return k->placement == TeamPlacement::P2PIntra ? Placement::P2PIntra : Placement::CollectIntra;
  return Placement::Default;
}

StrategyParams without_placement(StrategyParams params) {
  std::visit(
      [](auto& knobs) {
        if constexpr (requires { knobs.placement; }) knobs.placement = {};
      },
      params.knobs);
  return params;
}

const char* to_string(StrategyKind kind) {
  return name_of(kStrategyNames, kind);
}
StrategyKind parse_strategy(const std::string& name) {
  return parse_name(kStrategyNames, name, "strategy");
}
const std::vector<StrategyKind>& all_strategies() {
  static const std::vector<StrategyKind> kinds = [] {
    std::vector<StrategyKind> v;
    for (const auto& [kind, name] : kStrategyNames)
      v.push_back(kind);
    return v;
  }();
  return kinds;
}

const char* to_string(Placement placement) {
  return name_of(kPlacementNames, placement);
}
Placement parse_placement(const std::string& name) {
  return parse_name(kPlacementNames, name, "placement");
}

const char* to_string(GroupKind kind) {
  return name_of(kGroupKindNames, kind);
}
GroupKind parse_group_kind(const std::string& name) {
  return parse_name(kGroupKindNames, name, "group kind");
}

const char* to_string(AllReduceAlgorithm algorithm) {
  return name_of(kAllReduceNames, algorithm);
}
AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name) {
  return parse_name(kAllReduceNames, name, "all-reduce algorithm");
}

const char* to_string(Scope scope) {
  return scope == Scope::Step ? "step" : "attention";
}

Scope parse_scope(const std::string& name) {
  if (name == "step") return Scope::Step;
  if (name == "attention") return Scope::Attention;
  throw InputError(fmt::format("unknown scope '{}' (step, attention)", name));
}

int Plan::find_group(const std::string& name) const {
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].name == name) return int(i);
  return -1;
}

bool operator==(const Workload& a, const Workload& b) {
  return a.model == b.model && a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads &&
         a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.ffn == b.ffn && a.vocab == b.vocab &&
         a.gated_ffn == b.gated_ffn && a.seq == b.seq && a.batch == b.batch && a.dtype == b.dtype &&
         a.causal == b.causal && a.zero_stage == b.zero_stage && a.checkpointing == b.checkpointing &&
         a.grad_bucket_MiB == b.grad_bucket_MiB && a.fp8_linear == b.fp8_linear && a.microbatches == b.microbatches &&
         a.grad_comm_dtype == b.grad_comm_dtype;
}

bool operator==(const Plan& a, const Plan& b) {
  return a.format_version == b.format_version && a.scope == b.scope && a.topology_name == b.topology_name &&
         a.topology_hash == b.topology_hash && a.topology_nodes == b.topology_nodes &&
         a.topology_file == b.topology_file && a.workload == b.workload && a.strategy == b.strategy &&
         a.params == b.params && a.ranks == b.ranks && a.groups == b.groups && a.prediction == b.prediction;
}

namespace {

// The NIC a plan names must be a NIC device of the rank's node.
void check_nic(const RankSlot& slot, const Topology& topology, const std::string& plan_source) {
  if (slot.nic.empty()) return;
  const int id = topology.device_id(slot.nic);
  if (id >= 0) {
    const Device& device = topology.devices()[id];
    if (device.kind == DeviceKind::Nic && device.node == slot.node) return;
  }
  throw InputError(plan_source, 0,
                   fmt::format("rank {}: '{}' is not a NIC of node {} in topology '{}'", slot.rank, slot.nic, slot.node,
                               topology.name()));
}

}  // namespace

void check_plan_against_topology(const Plan& plan, const Topology& topology, const std::string& plan_source) {
  if (plan.topology_name != topology.name() || plan.topology_hash != topology.content_hash() ||
      plan.topology_nodes != topology.num_nodes()) {
    const std::string given =
        plan.topology_name == topology.name() ? std::string("has") : fmt::format("is '{}' with", topology.name());
    throw InputError(plan_source, 0,
                     fmt::format("plan was made for topology '{}' with hash {} ({}), but the given topology "
                                 "{} hash {} ({})",
                                 plan.topology_name, plan.topology_hash, counted(plan.topology_nodes, "node"), given,
                                 topology.content_hash(), counted(topology.num_nodes(), "node")));
  }
  for (const RankSlot& slot : plan.ranks) {
    if (slot.gpu < 0 || slot.gpu >= topology.num_gpus())
      throw InputError(plan_source, 0,
                       fmt::format("rank {} uses gpu {}, but topology '{}' has {} GPUs", slot.rank, slot.gpu,
                                   topology.name(), topology.num_gpus()));
    const int node = topology.node_of_gpu(slot.gpu);
    const int local = topology.local_gpu(slot.gpu);
    if (node != slot.node || local != slot.local_gpu)
      throw InputError(plan_source, 0,
                       fmt::format("rank {}: gpu {} is local gpu {} of node {} in topology '{}', but the plan says "
                                   "local gpu {} of node {}",
                                   slot.rank, slot.gpu, local, node, topology.name(), slot.local_gpu, slot.node));
    check_nic(slot, topology, plan_source);
  }
}

}  // namespace wallfacer
