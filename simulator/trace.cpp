#include "trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>

namespace wallfacer::sim {
namespace {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      quoted += fmt::format("\\u{:04x}", int(c));
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

// Times on a nanosecond grid: a slice's start and end are each rounded to it and its duration is
// their difference, so slices that touch in the replay touch in the trace instead of overlapping
// by a rounding.
int64_t nanos(double seconds) {
  return std::llround(seconds * 1e9);
}

// Microseconds with nanosecond resolution: fixed digits keep the output byte-stable.
std::string micros_of_nanos(int64_t ns) {
  return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", std::llabs(ns) / 1000, std::llabs(ns) % 1000);
}
std::string micros(double seconds) {
  return micros_of_nanos(nanos(seconds));
}

// " step 3", or nothing for ops outside the step loop (step -1).
std::string step_suffix(int32_t step) {
  return step >= 0 ? fmt::format(" step {}", step) : std::string();
}

// A compute slice's name: a whole-step op by its label ("q_proj fwd", "norm (recompute)"), an
// attention op by its kind and step.
std::string compute_name(const Op& op) {
  if (op.label == StepOp::None) return fmt::format("{}{}", to_string(op.kind), step_suffix(op.step));
  std::string name = to_string(op.label);
  if (op.kind == OpKind::Gemm) name += fmt::format(" {}", to_string(op.part));
  if (op.flags & kOpRecompute) name += " (recompute)";
  return name;
}

// A collective slice's name: its label first for the whole step's ("grad_sync AllReduce world").
std::string collective_name(const Op& op, const CommGroup& group) {
  std::string name = fmt::format("{} {}{}", to_string(op.kind), group.name, step_suffix(op.step));
  return op.label == StepOp::None ? name : fmt::format("{} {}", to_string(op.label), name);
}

int tid_of(RecordKind kind, const Op& op) {
  if (op.stream == Stream::Sync) return kTraceTidSync;
  switch (kind) {
    case RecordKind::Compute:
      return kTraceTidCompute;
    case RecordKind::Send:
      return kTraceTidSend;
    case RecordKind::Recv:
      return kTraceTidRecv;
    default:
      return kTraceTidCollective;
  }
}

class TraceWriter {
 public:
  TraceWriter(std::ostream& out, const TraceContext& context) : out_(out), c_(context) {
    ranks_ = context.ranks;
    if (ranks_.empty())
      for (int rank = 0; rank < int(context.outcomes.size()); ++rank)
        ranks_.push_back(rank);
    traced_.assign(context.outcomes.size(), false);
    for (int rank : ranks_)
      traced_[size_t(rank)] = true;
  }

  void write() {
    out_ << "{\"displayTimeUnit\":\"ns\",\"otherData\":{";
    out_ << "\"strategy\":" << json_string(to_string(c_.plan.strategy))
         << ",\"topology\":" << json_string(c_.topology.name()) << ",\"ranks\":" << c_.plan.num_ranks()
         << ",\"traced_ranks\":" << ranks_.size() << ",\"network_model\":" << json_string(c_.network_model)
         << ",\"step_us\":" << micros(c_.step_seconds);
    if (c_.layers_replayed > 0) out_ << ",\"layers_replayed\":" << c_.layers_replayed;
    out_ << "},\n\"traceEvents\":[\n";
    for (int rank : ranks_)
      write_metadata(rank);
    for (int rank : ranks_)
      write_rank(rank);
    write_counters();
    flush();
    out_ << "\n]}\n";
  }

 private:
  void event(const std::string& text) {
    if (!first_) buffer_.append(std::string_view(",\n"));
    first_ = false;
    buffer_.append(text);
    if (buffer_.size() > (1u << 20)) flush();
  }
  void flush() {
    out_.write(buffer_.data(), std::streamsize(buffer_.size()));
    buffer_.clear();
  }

  void write_metadata(int rank) {
    const RankSlot& slot = c_.plan.ranks[size_t(rank)];
    const std::string& gpu = c_.topology.devices()[size_t(c_.topology.gpu_device(slot.gpu))].name;
    event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":{}}}}})", rank,
                      json_string(fmt::format("rank {} ({})", rank, gpu))));
    event(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", rank, rank));
    static const char* names[] = {"", "compute", "send", "recv", "collective", "sync"};
    for (int tid = kTraceTidCompute; tid <= kTraceTidSync; ++tid) {
      event(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", rank, tid,
                        names[tid]));
      event(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})", rank,
                        tid, tid));
    }
  }

  void write_rank(int rank) {
    std::vector<const Record*> slices;
    for (const Record& r : c_.outcomes[size_t(rank)].records)
      slices.push_back(&r);
    const RankProgram& program = c_.schedule.ranks[size_t(rank)];
    std::stable_sort(slices.begin(), slices.end(), [&](const Record* a, const Record* b) {
      int ta = tid_of(a->kind, program.ops[size_t(a->op)]), tb = tid_of(b->kind, program.ops[size_t(b->op)]);
      if (ta != tb) return ta < tb;
      if (a->start != b->start) return a->start < b->start;
      return a->op < b->op;
    });
    for (const Record* r : slices)
      write_slice(rank, *r);
  }

  void write_slice(int rank, const Record& r) {
    const RankProgram& program = c_.schedule.ranks[size_t(rank)];
    const Op& op = program.ops[size_t(r.op)];
    int tid = tid_of(r.kind, op);
    std::string common = fmt::format(R"("pid":{},"tid":{},"ts":{},"dur":{})", rank, tid, micros(r.start),
                                     micros_of_nanos(nanos(r.finish) - nanos(r.start)));
    std::string phase = json_string(to_string(op.phase));
    switch (r.kind) {
      case RecordKind::Compute:
        event(fmt::format(
            R"({{"ph":"X","name":{},"cat":"compute",{},"args":{{"op":{},"phase":{},"flops":{},"q_tokens":{},"k_tokens":{}}}}})",
            json_string(compute_name(op)), common, r.op, phase, op.flops, tokens(op.tok[0]), tokens(op.tok[1])));
        break;
      case RecordKind::Send:
      case RecordKind::Recv: {
        bool send = r.kind == RecordKind::Send;
        std::string fields = fields_to_string(op.fields);
        event(fmt::format(
            R"({{"ph":"X","name":{},"cat":"p2p",{},"args":{{"op":{},"phase":{},"bytes":{},"peer":{},"tag":{}}}}})",
            json_string(fmt::format("{} {} {} r{}{}", send ? "send" : "recv", fields, send ? "->" : "<-", op.peer,
                                    step_suffix(op.step))),
            common, r.op, phase, op.bytes, op.peer, op.tag));
        // An arrow needs both ends in the trace.
        if (traced_[size_t(op.peer)])
          event(fmt::format(R"({{"ph":"{}","name":{},"cat":"flow","id":{},"pid":{},"tid":{},"ts":{}{}}})",
                            send ? "s" : "f", json_string(fields), r.flow, rank, tid, micros(r.start),
                            send ? "" : R"(,"bp":"e")"));
        break;
      }
      default: {
        const CollectiveSpec& spec = program.collectives[size_t(op.coll)];
        const CommGroup& group = c_.plan.groups[size_t(spec.group)];
        event(fmt::format(
            R"({{"ph":"X","name":{},"cat":"collective",{},"args":{{"op":{},"phase":{},"bytes":{},"group":{},"members":{},"fields":{}}}}})",
            json_string(collective_name(op, group)), common, r.op, phase, op.bytes, json_string(group.name),
            group.ranks.size(), json_string(fields_to_string(spec.fields))));
      }
    }
  }

  // The slowest kind of link between two GPUs (a collective: between the member and any other).
  LinkKind slowest_kind(int src_gpu, int dst_gpu) const {
    LinkKind worst = LinkKind::NvLink;
    if (src_gpu == dst_gpu) return worst;
    for (const Hop& hop : c_.topology.route(src_gpu, dst_gpu).hops) {
      const LinkKind kind = c_.topology.links()[size_t(hop.link)].kind;
      if (rank_of(kind) > rank_of(worst)) worst = kind;
    }
    return worst;
  }
  static int rank_of(LinkKind kind) {
    return kind == LinkKind::Network ? 3 : kind == LinkKind::Pcie ? 2 : kind == LinkKind::CpuBus ? 1 : 0;
  }
  LinkKind kind_of(int rank, const Op& op, const RankProgram& program) const {
    const int gpu = c_.plan.ranks[size_t(rank)].gpu;
    if (op.kind == OpKind::Send) return slowest_kind(gpu, c_.plan.ranks[size_t(op.peer)].gpu);
    LinkKind worst = LinkKind::NvLink;
    for (int member : c_.plan.groups[size_t(program.collectives[size_t(op.coll)].group)].ranks) {
      const LinkKind kind = slowest_kind(gpu, c_.plan.ranks[size_t(member)].gpu);
      if (rank_of(kind) > rank_of(worst)) worst = kind;
    }
    return worst;
  }

  // Counter tracks in a process of their own after the ranks: bytes in flight (sent and not yet
  // received) and, per link class, the share of the class's aggregate bandwidth (every link of
  // that kind, both directions when full duplex) that the transfers whose slowest link is of that
  // class use, each at its mean rate over its span. Sends and collectives of the traced ranks.
  void write_counters() {
    const int pid = c_.plan.num_ranks();
    std::map<LinkKind, double> capacity_GBps;
    for (const Link& link : c_.topology.links())
      capacity_GBps[link.kind] += link.bandwidth_GBps * (link.full_duplex ? 2 : 1);
    // (time on the grid, kind) -> change of bytes in flight and of rate in bytes/s.
    std::map<int64_t, std::map<LinkKind, std::pair<double, double>>> changes;
    for (int rank : ranks_) {
      const RankProgram& program = c_.schedule.ranks[size_t(rank)];
      for (const Record& r : c_.outcomes[size_t(rank)].records) {
        const Op& op = program.ops[size_t(r.op)];
        const bool counted = r.kind == RecordKind::Send || (r.kind == RecordKind::Collective && op.coll >= 0);
        const int64_t start = nanos(r.start), end = nanos(r.finish);
        if (!counted || op.bytes <= 0 || end <= start) continue;
        const LinkKind kind = kind_of(rank, op, program);
        const double rate = double(op.bytes) / ((end - start) * 1e-9);
        changes[start][kind].first += double(op.bytes);
        changes[start][kind].second += rate;
        changes[end][kind].first -= double(op.bytes);
        changes[end][kind].second -= rate;
      }
    }
    if (changes.empty()) return;
    event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"links"}}}})", pid));
    event(fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"args":{{"sort_index":{}}}}})", pid, pid));
    double in_flight = 0;
    std::map<LinkKind, double> rate;
    for (const auto& [at, by_kind] : changes) {
      for (const auto& [kind, change] : by_kind) {
        in_flight += change.first;
        rate[kind] += change.second;
      }
      event(fmt::format(R"({{"ph":"C","name":"bytes in flight","pid":{},"ts":{},"args":{{"bytes":{:.0f}}}}})", pid,
                        micros_of_nanos(at), std::max(0.0, in_flight)));
      for (const auto& [kind, change] : by_kind) {
        const double capacity = capacity_GBps[kind] * 1e9;
        const double share = capacity > 0 ? std::max(0.0, rate[kind]) / capacity : 0;
        event(fmt::format(R"({{"ph":"C","name":"{} utilisation","pid":{},"ts":{},"args":{{"percent":{:.3f}}}}})",
                          to_string(kind), pid, micros_of_nanos(at), 100 * share));
      }
    }
  }

  int64_t tokens(int32_t id) const {
    return id >= 0 && size_t(id) < c_.schedule.tokens.size() ? token_count(c_.schedule.tokens.get(id)) : 0;
  }

  std::ostream& out_;
  const TraceContext& c_;
  std::vector<int> ranks_;    // shown, ascending
  std::vector<bool> traced_;  // by rank
  fmt::memory_buffer buffer_;
  bool first_ = true;
};

}  // namespace

void write_chrome_trace(std::ostream& out, const TraceContext& context) {
  TraceWriter(out, context).write();
}

void write_chrome_trace_file(const std::string& path, const TraceContext& context) {
  write_file_atomically(path, [&](std::ostream& out) { write_chrome_trace(out, context); });
}

}  // namespace wallfacer::sim
