// The schedule checker's state and stages (docs/checker.md), shared by checker.cpp (structure,
// buffer contents and hazards, matching, collectives, deadlock) and checker_step.cpp (layers,
// block and binding coverage per layer, whole-step compute ops and flat collectives). Nothing
// outside planner/check/ includes this header.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <string>
#include <vector>

#include <wallfacer/check/checker.hpp>
#include <wallfacer/schedule/per_stream.hpp>
#include "checker_detail.hpp"

namespace wallfacer::detail::check {

constexpr size_t kMaxErrors = 20;
using Clock = std::array<int32_t, kNumStreams>;

inline bool has(FieldMask mask, Field f) {
  return (mask & field_bit(f)) != 0;
}
inline int32_t heads_in_both(HeadRange a, HeadRange b) {
  return std::max(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}
inline bool within(HeadRange inner, HeadRange outer) {
  return inner.begin >= outer.begin && inner.end <= outer.end;
}
// Fields without a token or head axis: the flat gradient and parameter vectors of a whole step.
inline constexpr FieldMask kFlatFields = field_mask({Field::WeightGrad, Field::Weight, Field::Activation});

// One buffer access of an op: what it reads or writes and where its row layout comes from.
enum class Mode { Read, Write, Accumulate };
struct Access {
  int32_t buf = -1;
  FieldMask fields = 0;
  int32_t tokens = -1;  // pool id; -1: no token axis (WeightGrad, Weight)
  Mode mode = Mode::Read;
  int32_t layout_buf = -1;  // Accumulate: an accumulator never overwritten mirrors this buffer's rows
  HeadRange heads;          // heads the op touches; empty: the whole buffer
};

// At most four accesses per op, kept off the heap: one list per op of a million-op schedule.
class Accesses {
 public:
  Accesses() = default;
  Accesses(std::initializer_list<Access> list) : size_(list.size()) {
    std::copy(list.begin(), list.end(), items_.begin());
  }
  const Access* begin() const { return items_.data(); }
  const Access* end() const { return items_.data() + size_; }

 private:
  std::array<Access, 4> items_{};
  size_t size_ = 0;
};

// The rows one buffer holds (docs/schedule.md): one token list for all its fields, which fields
// hold data, and, for an accumulator never overwritten, the partner buffer whose rows it mirrors.
struct BufferRows {
  int32_t list = -1;  // pool id; -1: none of its own
  FieldMask valid = 0;
  int32_t mirror = -1;
};

struct FieldState {  // last write and last read per stream of one (buffer, field), for hazards
  int32_t write_op = -1, write_pos = 0;
  Stream write_stream = Stream::Compute;
  OpPerStream read_op = no_op_on_any_stream();
  std::array<int32_t, kNumStreams> read_pos{};
};

// One coverage rectangle: an op's batch x heads x query range x key range.
struct Rect {
  int32_t rank, op;
  HeadRange heads;
  TokenRange q, k;
};

// The three coverages of one layer: its forward blocks, its backward blocks and the forward
// blocks its backward recomputes (kOpRecompute).
enum class Pass { Forward, Backward, Recompute };
constexpr int kNumPasses = 3;

class Checker {
 public:
  Checker(const Plan& plan, const Schedule& schedule) : plan_(plan), sched_(schedule), dims_(schedule.dims) {}
  CheckReport run();

 private:
  template <typename... Args>
  void error(fmt::format_string<Args...> f, Args&&... args) {
    if (report_.errors.size() < kMaxErrors) report_.errors.push_back(fmt::format(f, std::forward<Args>(args)...));
    ++error_count_;
  }
  std::string where(int rank, int32_t i) const;
  const TokenSet& norm(int32_t id) const { return norm_[size_t(id)]; }
  int64_t count(int32_t id) const { return counts_[size_t(id)]; }
  int member_index(int rank, int32_t group) const;

  // structure (checker.cpp)
  bool check_structure();
  bool check_op_structure(const RankProgram& prog, int32_t i);
  std::string collective_structure_problem(const RankProgram& prog, const Op& op) const;
  void check_token_pool();
  // whole-step ops and layers (checker_step.cpp)
  void find_layers();
  int layer_of_buffer(int rank, int32_t buf) const;
  std::string layer_name(int slot) const;
  std::string step_compute_problem(const Op& op) const;
  std::string flat_collective_problem(const RankProgram& prog, const Op& op) const;
  // block coverage, per layer and pass (checker_step.cpp)
  void check_compute_op(const RankProgram& prog, int32_t i);
  int block_layer(const RankProgram& prog, int32_t i);
  void check_coverage();
  void check_coverage_slice(int b0, int b1, int pass);
  void report_cell(int pass, int b0, int b1, const std::vector<Rect>& rects, HeadRange h, TokenRange q, TokenRange k,
                   int32_t covered, bool detail);
  // buffer contents and hazards (checker.cpp)
  Accesses accesses(const RankProgram& prog, int32_t i) const;
  void check_dataflow(const RankProgram& prog);
  void check_buffer_decls(const RankProgram& prog);
  void check_access(const RankProgram& prog, int32_t i, const Access& a, std::vector<BufferRows>& bufs);
  void check_hazard(const RankProgram& prog, int32_t i, const Access& a, const Clock& clock, int32_t pos,
                    std::vector<FieldState>& states);
  void check_outputs_held(const RankProgram& prog, const std::vector<BufferRows>& bufs);
  // matching, collectives, deadlock (checker.cpp)
  void check_p2p();
  void match_receives(const RankProgram& prog, const std::vector<std::vector<std::pair<uint64_t, int32_t>>>& sends);
  void check_pair(int send_rank, int32_t send_op, int recv_rank, int32_t recv_op);
  void check_stage_pair(int send_rank, int32_t send_op, int recv_rank, int32_t recv_op);  // checker_step.cpp
  void check_collectives();
  void check_collective_semantics(const CollectiveSpec& spec, const std::string& label);
  void check_flat_bytes(const RankProgram& prog, int32_t i);  // checker_step.cpp
  void check_deadlock();
  // inputs and outputs, per layer (checker_step.cpp)
  void check_bindings();
  void check_binding_cover(Field field, bool outputs);

  const Plan& plan_;
  const Schedule& sched_;
  const ScheduleDims& dims_;
  CheckReport report_;
  size_t error_count_ = 0;
  std::vector<TokenSet> norm_;
  std::vector<int64_t> counts_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> memberships_;  // rank -> (group, index)
  Rendezvous rv_;  // global op ids, send/receive partners, collective instances
  bool has_backward_ = false;
  // Layers: the distinct numbers n of buffers named "<name>.L<n>" (empty: one unnamed layer),
  // and per rank and buffer the slot of its layer in that list (-1: shared by all layers).
  std::vector<int> layer_numbers_;
  std::vector<std::vector<int32_t>> buffer_layer_;
  // Attention blocks by (layer slot * kNumPasses + pass): (rank, op).
  std::vector<std::vector<std::pair<int32_t, int32_t>>> blocks_;
};

}  // namespace wallfacer::detail::check
