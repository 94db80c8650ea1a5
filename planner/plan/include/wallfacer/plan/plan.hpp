// A plan: which strategy runs a workload on a topology, with its parameters, the rank -> GPU
// mapping and the communication groups. A versioned YAML file (docs/formats/plan.md) written by
// `wallfacer plan` and read back losslessly by the simulator and the runtimes. The schedule
// (schedule.hpp) is built from a plan and nothing else.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <wallfacer/plan/workload.hpp>

namespace wallfacer {

class Topology;

enum class StrategyKind { Ring, Zigzag, Ulysses, Usp, DoubleRing, AllGather, WallFacer, Lss };
const char* to_string(StrategyKind kind);              // "ring", "zigzag", "ulysses", "usp", ...
StrategyKind parse_strategy(const std::string& name);  // throws InputError
const std::vector<StrategyKind>& all_strategies();

// How logical ranks are laid onto the topology, by name (plan files, the CLI, tables). Only USP,
// the double ring and WallFacer have a choice, each between its own two (the types below):
//   Default        - strategies without a choice: rank r on GPU r (node-major)
//   HeadFirst      - USP / double ring: Ulysses groups contiguous, ring groups strided
//   ContextFirst   - USP / double ring: ring groups contiguous, Ulysses groups strided
//   CollectIntra   - WallFacer: teams on contiguous ranks (team collectives inside a node)
//   P2PIntra       - WallFacer: sub-rings on contiguous ranks
enum class Placement { Default, HeadFirst, ContextFirst, CollectIntra, P2PIntra };
const char* to_string(Placement placement);
Placement parse_placement(const std::string& name);

enum class ContextPlacement { HeadFirst, ContextFirst };  // USP and double ring
enum class TeamPlacement { CollectIntra, P2PIntra };      // WallFacer

// Each strategy's own parameters besides the sequence and data parallel degrees, one type per
// strategy, so that no plan can hold a knob its strategy does not read (a team size for USP, a
// window for the ring). Ring, zigzag, Ulysses, all-gather and LSS have none.
struct NoKnobs {
  bool operator==(const NoKnobs&) const = default;
};
struct UspKnobs {
  int ulysses = 1;  // head-parallel degree u
  int ring = 1;     // ring degree r (u * r = S)
  ContextPlacement placement = ContextPlacement::HeadFirst;
  bool operator==(const UspKnobs&) const = default;
};
struct DoubleRingKnobs {
  int ulysses = 1;  // head-parallel degree u; the context ring has c = S / u ranks
  int window = 1;   // window w (inner ring length), w divides c
  ContextPlacement placement = ContextPlacement::HeadFirst;
  bool operator==(const DoubleRingKnobs&) const = default;
};
struct WallFacerKnobs {
  int team = 1;  // team size C
  TeamPlacement placement = TeamPlacement::CollectIntra;
  bool operator==(const WallFacerKnobs&) const = default;
};
using StrategyKnobs = std::variant<NoKnobs, UspKnobs, DoubleRingKnobs, WallFacerKnobs>;

struct StrategyParams {
  int sequence_parallel = 1;  // S = ranks sharing one sequence
  int data_parallel = 1;      // D = replicas, each with batch / D sequences; P = T * S * D
  StrategyKnobs knobs = {};   // must be the strategy's own type (knobs_fit)
  // T, Megatron-style tensor parallelism around the strategy (docs/step.md "Tensor parallelism"):
  // global rank g = (d * S + s) * T + t; the T ranks of a tensor group split every layer's heads and
  // matrices, and each tensor slice t runs the strategy over its S * D ranks on heads / T.
  int tensor_parallel = 1;
  // Pp, pipeline stages around the tensor-lifted strategy (docs/step.md "Pipeline parallelism"):
  // global rank g = ((p * D + d) * S + s) * T + t; stage p holds layers [p L / Pp, (p + 1) L / Pp)
  // and runs the 1F1B schedule over the workload's micro-batches. P = T * S * D * Pp.
  int pipeline_parallel = 1;
  // v, virtual stages per pipeline rank (Megatron's interleaved 1F1B, docs/step.md "Interleaved
  // 1F1B"): the layers split into Pp * v chunks, chunk c on stage c mod Pp; 1 = plain 1F1B.
  int virtual_stages = 1;
  bool operator==(const StrategyParams&) const = default;
};

// The knobs type a strategy takes, default-valued; whether `params` holds that type.
StrategyKnobs default_knobs(StrategyKind strategy);
bool knobs_fit(StrategyKind strategy, const StrategyParams& params);
// The placement's name-level value (Default for strategies without a choice).
Placement placement_of(const StrategyParams& params);
// `params` with the placement knob at its default: placements only permute the GPUs a strategy
// runs on (StrategyImpl::positions), so plans equal in all else build the same programs.
StrategyParams without_placement(StrategyParams params);
// Read-only views for code that compares or prints the parameters of any strategy: the knob's
// value, 1 where the strategy has no such knob.
int team_size(const StrategyParams& params);       // WallFacer C
int ulysses_degree(const StrategyParams& params);  // USP and double ring u
int window_size(const StrategyParams& params);     // double ring w
// The strategy's knobs of type K; throws InputError naming the strategy when params holds another
// type (a plan assembled by hand for the wrong strategy).
[[noreturn]] void throw_knobs_mismatch(StrategyKind strategy);
template <typename K>
const K& knobs_of(StrategyKind strategy, const StrategyParams& params) {
  if (const K* k = std::get_if<K>(&params.knobs)) return *k;
  throw_knobs_mismatch(strategy);
}

// Where one rank runs.
struct RankSlot {
  int rank = 0;
  int gpu = 0;   // global GPU index in the topology (node-major)
  int node = 0;  // topology node
  int local_gpu = 0;
  std::string nic;  // NIC device name used for inter-node traffic, "" when none
  bool operator==(const RankSlot&) const = default;
};

enum class GroupKind {
  Ring,         // a ring in order (ring, zigzag, USP ring groups, double-ring context rings)
  SubRing,      // WallFacer sub-ring in order
  Team,         // WallFacer team (all-gather / reduce-scatter group)
  AllToAll,     // Ulysses / USP head-parallel group
  Window,       // double-ring intra-window ring
  InterWindow,  // double-ring inter-window ring
  Sequence,     // all ranks of one sequence (all-gather strategies, LSS)
  Data,         // ranks holding the same shard of different sequences (gradient averaging)
  World,        // every rank (of one tensor slice when tensor parallel)
  Tensor,       // the T ranks of a tensor-parallel group
  Pipeline,     // the Pp ranks of one (t, s, d) position, one per pipeline stage
};
const char* to_string(GroupKind kind);
GroupKind parse_group_kind(const std::string& name);

// How an all-reduce over a group moves its data (docs/simulator.md, "Collectives"): a ring of
// 2(p-1) steps, or NCCL's pipelined double binary tree, whose latency grows with log2 p instead
// of p. Chosen per group by the planner (all_reduce.hpp) and read by every consumer.
enum class AllReduceAlgorithm : uint8_t { Ring, Tree };
const char* to_string(AllReduceAlgorithm algorithm);
AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name);

struct CommGroup {
  std::string name;  // unique in the plan, e.g. "ring0", "team3", "subring.g0.a1"
  GroupKind kind = GroupKind::Ring;
  std::vector<int> ranks;                                    // in order (ring order for rings)
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::Ring;  // for all-reduces over this group
  bool operator==(const CommGroup&) const = default;
};

// What a plan's schedule covers (docs/step.md): the whole training step of the whole model, or the
// forward and backward of one attention layer alone (what the runtime executes).
enum class Scope { Step, Attention };
const char* to_string(Scope scope);
Scope parse_scope(const std::string& name);  // throws InputError

// Predicted figures, recorded for reference. Times in milliseconds for the plan's scope: the whole
// training step, or one attention layer.
struct Prediction {
  double forward_ms = 0, backward_ms = 0, step_ms = 0;
  double attention_ms = 0;  // attention forward + backward alone, summed over the layers (step scope)
  double tokens_per_s = 0;  // tokens trained per second, whole cluster
  int64_t p2p_bytes_forward = 0, p2p_bytes_backward = 0;  // per GPU, max over ranks
  int64_t collective_bytes_forward = 0, collective_bytes_backward = 0;
  double memory_GiB = 0;  // peak per GPU
  double mfu = 0;         // model FLOPs / (step time * GPUs * peak), see docs/cost-model.md
  bool operator==(const Prediction&) const = default;
};

struct Plan {
  // Version 2 adds `scope`; a version-1 plan was made for one attention layer (Scope::Attention).
  // Files are always written in the current version, and a plan read from any version holds it.
  static constexpr int kFormatVersion = 2;
  int format_version = kFormatVersion;
  // What the plan's consumers price and replay. make_plan leaves the attention layer (what the
  // runtime executes); `wallfacer plan` sets the step unless told --scope attention.
  Scope scope = Scope::Attention;
  std::string topology_name;
  std::string topology_hash;
  int topology_nodes = 0;
  // The topology file the plan was made from, relative to the plan file's folder (optional; empty
  // for a preset): `simulate` and `run` load it when its hash still matches.
  std::string topology_file;
  Workload workload;
  StrategyKind strategy = StrategyKind::Ring;
  StrategyParams params;
  std::vector<RankSlot> ranks;
  std::vector<CommGroup> groups;
  std::optional<Prediction> prediction;

  int num_ranks() const { return int(ranks.size()); }
  // Index of the first group with this name, or -1.
  int find_group(const std::string& name) const;
};

// YAML I/O. write_plan emits every field; read_plan(write_plan(p)) == p (doubles written with
// 17 significant digits). Throws InputError("FILE:LINE: error: ...") for malformed files,
// unknown keys, a newer format version, or ranks/groups that do not form a valid mapping.
void write_plan(const Plan& plan, std::ostream& out);
std::string plan_to_yaml(const Plan& plan);
Plan parse_plan(const std::string& yaml_text, const std::string& source);
Plan read_plan_file(const std::string& path);

// Throws InputError when the plan was made for another topology (name, node count or content
// hash differ) or when its ranks use GPUs the topology does not have.
void check_plan_against_topology(const Plan& plan, const Topology& topology, const std::string& plan_source);

bool operator==(const Workload& a, const Workload& b);
// Every field, the optional prediction included.
bool operator==(const Plan& a, const Plan& b);

}  // namespace wallfacer
