#include <wallfacer/runtime/memory_estimate.hpp>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include "executor_storage.hpp"

namespace wallfacer::runtime {

namespace {

// Measured with 64 to 256 ranks of a tiny workload: 2 to 3 MiB per rank thread (its stack's
// touched pages and its allocator's per-thread pages), independent of the workload.
constexpr int64_t kPerThreadBytes = int64_t{3} << 20;
// Executor and backend bookkeeping per op of a rank's program (its state, its request, the
// message it posts), measured at 256 and 1,024 ranks of a ring, whose programs grow with P.
constexpr int64_t kPerOpBytes = 512;
// The process itself: code, libraries, the plan and its schedule for small runs.
constexpr int64_t kProcessBytes = int64_t{64} << 20;

// Saturating arithmetic: a 2^62-token plan must give a huge estimate, not a wrapped one.
int64_t add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}
int64_t mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}

// Buffer i of the rank's program as the executor allocates it (Executor::allocate_buffers).
int64_t buffer_bytes(const Schedule& schedule, const RankProgram& program, size_t i, bool fp64) {
  const ElemType type = fp64 ? ElemType::F64 : ElemType::F32;
  const int batches = std::max(1, program.batch_end - program.batch_begin);
  const int group = schedule.dims.kv_heads > 0 ? std::max(1, schedule.dims.heads / schedule.dims.kv_heads) : 1;
  const BufferDecl& decl = program.buffers[i];
  detail::Storage shape =
      detail::packed_shape(decl.fields, decl.capacity_tokens, decl.heads, detail::mask_has_query_field(decl.fields),
                           batches, schedule.dims.head_dim, group, type);
  if (shape.has(Field::WeightGrad)) {
    shape.weight_elements = decl.capacity_tokens;
    for (const Op& op : program.ops)
      if (op.kind == OpKind::AllReduce && op.buf[0] == int32_t(i))
        shape.weight_elements = std::max(shape.weight_elements, program.collectives[size_t(op.coll)].elements);
  }
  int64_t bytes = 0;
  for (int f = 0; f < kNumFields; ++f)
    if (shape.has(Field(f))) bytes = add(bytes, mul(std::max<int64_t>(shape.elements(Field(f)), 1), elem_size(type)));
  return bytes;
}

int64_t rank_bytes(const Schedule& schedule, const RankProgram& program, bool fp64) {
  int64_t bytes = 0;
  for (size_t i = 0; i < program.buffers.size(); ++i)
    bytes = add(bytes, buffer_bytes(schedule, program, i, fp64));
  return bytes;
}

}  // namespace

std::string bytes_text(int64_t bytes) {
  if (bytes == INT64_MAX) return "more than 8 EiB";
  const double b = static_cast<double>(bytes);
  if (b >= double(int64_t{1} << 40)) return fmt::format("{:.1f} TiB", b / double(int64_t{1} << 40));
  if (b >= double(1 << 30)) return fmt::format("{:.1f} GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

RunMemoryEstimate estimate_run_memory(const Plan& plan, const Schedule& schedule, bool fp64, bool check,
                                      int processes_here) {
  const Workload& w = plan.workload;
  const int64_t tokens = mul(w.batch, w.seq);
  const int64_t q_elems = mul(mul(tokens, w.heads), w.head_dim);
  const int64_t kv_elems = mul(mul(tokens, w.kv_heads), w.head_dim);
  RunMemoryEstimate e;
  e.inputs = mul(add(mul(2, q_elems), mul(2, kv_elems)), 8);
  e.outputs = mul(add(add(mul(2, q_elems), mul(2, kv_elems)), mul(tokens, w.heads)), 8);
  // The reference's outputs, and the probabilities of one head (seq x seq) with its gradient row.
  if (check) e.reference = add(e.outputs, mul(mul(w.seq, w.seq), 8));
  for (const RankProgram& program : schedule.ranks) {
    const int64_t bytes = add(rank_bytes(schedule, program, fp64), mul(int64_t(program.ops.size()), kPerOpBytes));
    e.largest_rank = std::max(e.largest_rank, bytes);
    e.all_ranks = add(e.all_ranks, bytes);
  }
  // Rank 0 holds the assembled outputs and, while gathering, every rank's slices of them twice
  // (as received and as read back), and the reference.
  const int64_t root_extra = add(add(mul(3, e.outputs), e.reference), kProcessBytes);
  if (processes_here <= 0) {
    e.per_thread = kPerThreadBytes;
    e.total = add(add(e.inputs, e.all_ranks), add(mul(plan.num_ranks(), kPerThreadBytes), root_extra));
  } else {
    e.total = add(mul(processes_here, add(add(e.inputs, e.largest_rank), kProcessBytes)), root_extra);
  }
  return e;
}

std::string RunMemoryEstimate::describe() const {
  std::string text = fmt::format("{} (inputs {}, rank buffers {} in all, the largest rank {}", bytes_text(total),
                                 bytes_text(inputs), bytes_text(all_ranks), bytes_text(largest_rank));
  if (per_thread > 0) text += fmt::format(", {} per rank thread", bytes_text(per_thread));
  text += fmt::format(", outputs {}", bytes_text(outputs));
  if (reference > 0) text += fmt::format(", fp64 reference {}", bytes_text(reference));
  return text + ")";
}

int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : -1;
}

void check_run_memory(const RunMemoryEstimate& estimate, int64_t available, const std::string& plan_source) {
  if (available < 0 || estimate.total <= available) return;
  throw InputError(plan_source, 0,
                   fmt::format("running this plan needs about {}, but only {} of memory is available here "
                               "(MemAvailable); use a shorter sequence, more ranks, or --memory-check off",
                               estimate.describe(), bytes_text(available)));
}

DeviceMemoryEstimate estimate_device_memory(const Plan& plan, const Schedule& schedule, bool fp64,
                                            bool all_ranks_on_one_device) {
  DeviceMemoryEstimate e;
  e.runtime = kDeviceRuntimeAllowanceBytes;
  int64_t largest = -1, largest_messages = 0;
  for (const RankProgram& program : schedule.ranks) {
    const int64_t bytes = rank_bytes(schedule, program, fp64);
    int64_t biggest_buffer = 0;
    for (size_t i = 0; i < program.buffers.size(); ++i)
      biggest_buffer = std::max(biggest_buffer, buffer_bytes(schedule, program, i, fp64));
    if (all_ranks_on_one_device) {
      e.buffers = add(e.buffers, bytes);
      e.messages = add(e.messages, mul(2, biggest_buffer));
    } else if (bytes > largest) {
      largest = bytes;
      largest_messages = mul(2, biggest_buffer);
    }
  }
  if (all_ranks_on_one_device) {
    e.ranks_here = plan.num_ranks();
  } else {
    e.buffers = std::max<int64_t>(largest, 0);
    e.messages = largest_messages;
  }
  e.total = add(add(e.buffers, e.messages), e.runtime);
  return e;
}

std::string DeviceMemoryEstimate::describe() const {
  return fmt::format("{} ({} {} on this GPU: buffers {}, messages in flight {}, CUDA and NCCL allowance {})",
                     bytes_text(total), ranks_here, ranks_here == 1 ? "rank" : "ranks", bytes_text(buffers),
                     bytes_text(messages), bytes_text(runtime));
}

void check_device_memory(const DeviceMemoryEstimate& estimate, int64_t free_bytes, int64_t total_bytes, int device,
                         const std::string& plan_source) {
  if (free_bytes < 0 || estimate.total <= free_bytes) return;
  throw InputError(plan_source, 0,
                   fmt::format("running this plan needs about {} of GPU memory, but GPU {} has only {} free (of {}; "
                               "cudaMemGetInfo); use a shorter sequence, more ranks (more GPUs under mpirun or srun), "
                               "or --memory-check off",
                               estimate.describe(), device, bytes_text(free_bytes), bytes_text(total_bytes)));
}

}  // namespace wallfacer::runtime
