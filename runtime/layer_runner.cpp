#include <wallfacer/runtime/layer_runner.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/npy.hpp>
#include <wallfacer/runtime/reference_attention.hpp>

namespace wallfacer::runtime {

std::vector<int64_t> query_shape(const Workload& w) {
  return {w.batch, w.seq, w.heads, w.head_dim};
}
std::vector<int64_t> kv_shape(const Workload& w) {
  return {w.batch, w.seq, w.kv_heads, w.head_dim};
}
double default_tolerance(bool fp64) {
  return fp64 ? 1e-10 : 1e-4;
}

LayerInputs seeded_inputs(const Workload& w, uint64_t seed, bool fp64) {
  LayerInputs in;
  in.q = seeded_tensor(query_shape(w), seed, 1, !fp64);
  in.k = seeded_tensor(kv_shape(w), seed, 2, !fp64);
  in.v = seeded_tensor(kv_shape(w), seed, 3, !fp64);
  in.dO = seeded_tensor(query_shape(w), seed, 4, !fp64);
  return in;
}

namespace {

Tensor<double> load_one(const std::string& path, const std::vector<int64_t>& shape, bool fp64) {
  NpyDType dtype;
  Tensor<double> t = read_npy(path, &dtype);
  if (t.shape != shape)
    throw InputError(path, 0,
                     fmt::format("shape {} ({}) but expected {} (batch, seq, heads, head_dim)",
                                 shape_to_string(t.shape), to_string(dtype), shape_to_string(shape)));
  if (dtype == NpyDType::Float64 && !fp64)
    throw InputError(path, 0, "dtype float64 but expected float32 (or run with --fp64)");
  // A NaN or infinity would run through every kernel and come out as NaN outputs.
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isfinite(t[i])) continue;
    std::vector<int64_t> index(t.shape.size());
    for (int64_t rest = i, d = static_cast<int64_t>(t.shape.size()) - 1; d >= 0; --d) {
      index[d] = rest % t.shape[d];
      rest /= t.shape[d];
    }
    throw InputError(path, 0,
                     fmt::format("element {} is {}; inputs must be finite numbers", shape_to_string(index), t[i]));
  }
  return t;
}

}  // namespace

LayerInputs load_inputs(const std::string& dir, const Workload& w, bool fp64) {
  namespace fs = std::filesystem;
  LayerInputs in;
  in.q = load_one((fs::path(dir) / "q.npy").string(), query_shape(w), fp64);
  in.k = load_one((fs::path(dir) / "k.npy").string(), kv_shape(w), fp64);
  in.v = load_one((fs::path(dir) / "v.npy").string(), kv_shape(w), fp64);
  in.dO = load_one((fs::path(dir) / "do.npy").string(), query_shape(w), fp64);
  return in;
}

void save_outputs(const std::string& dir, const LayerOutputs& out, bool fp64) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir, 0, fmt::format("cannot create the output directory: {}", ec.message()));
  auto save = [&](const char* name, const Tensor<double>& t) {
    std::string path = (fs::path(dir) / name).string();
    if (fp64)
      write_npy(path, t);
    else
      write_npy(path, convert<float>(t));
  };
  save("o.npy", out.o);
  save("lse.npy", out.lse);
  save("dq.npy", out.dq);
  save("dk.npy", out.dk);
  save("dv.npy", out.dv);
}

std::vector<TensorCheck> check_against_reference(const Workload& w, const LayerInputs& in, const LayerOutputs& out,
                                                 double tolerance) {
  reference::Shape shape;
  shape.batch = w.batch;
  shape.seq = w.seq;
  shape.heads = w.heads;
  shape.kv_heads = w.kv_heads;
  shape.head_dim = w.head_dim;
  shape.causal = w.causal;
  reference::Outputs ref = reference::attention(shape, in.q.data, in.k.data, in.v.data, in.dO.data);
  std::vector<TensorCheck> checks;
  auto check = [&](const char* name, const Tensor<double>& got, const std::vector<double>& want) {
    TensorCheck c;
    c.name = name;
    c.stats = compare_to_reference(got.data, want);
    c.tolerance = tolerance;
    c.ok = c.stats.finite && c.stats.relative <= tolerance;
    checks.push_back(c);
  };
  check("o", out.o, ref.o);
  check("lse", out.lse, ref.lse);
  check("dq", out.dq, ref.dq);
  check("dk", out.dk, ref.dk);
  check("dv", out.dv, ref.dv);
  return checks;
}

namespace {

// ---- byte serialisation of one rank's results (to gather them on rank 0) ----------------------

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_doubles(const std::vector<double>& v) {
    put(int64_t(v.size()));
    if (!v.empty()) bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
  }
  void put_string(const std::string& s) {
    put(int64_t(s.size()));
    bytes_ += s;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::vector<double> get_doubles() {
    auto n = size_t(get<int64_t>());
    need(n * sizeof(double));
    std::vector<double> v(n);
    if (n) std::memcpy(v.data(), bytes_.data() + pos_, n * sizeof(double));
    pos_ += n * sizeof(double);
    return v;
  }
  std::string get_string() {
    auto n = size_t(get<int64_t>());
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  void need(size_t n) const {
    if (pos_ + n > bytes_.size()) throw std::runtime_error("truncated rank result");
  }
  const std::string& bytes_;
  size_t pos_ = 0;
};

struct RankSummary {
  ExecutionStats stats;
  std::vector<OutputSlice> slices;  // WeightGrad slices carry no values
  WeightGradCheck weight_grad;
};

std::string serialise(const RankSummary& s) {
  ByteWriter w;
  w.put(s.stats.seconds);
  w.put(s.stats.cpu_seconds);
  w.put(s.stats.compute_seconds);
  w.put(s.stats.wait_seconds);
  w.put(s.stats.comm_seconds);
  w.put(s.stats.flops);
  w.put(s.stats.bytes_sent);
  w.put(s.weight_grad.present);
  w.put(s.weight_grad.elements);
  w.put(s.weight_grad.mismatches);
  w.put_string(s.weight_grad.first_mismatch);
  w.put(int64_t(s.slices.size()));
  for (const OutputSlice& slice : s.slices) {
    w.put(int32_t(slice.field));
    w.put(slice.batch_begin);
    w.put(slice.batch_end);
    w.put(slice.heads);
    w.put(int64_t(slice.tokens.size()));
    for (const TokenRange& r : slice.tokens)
      w.put(r);
    w.put_doubles(slice.values);
  }
  return w.take();
}

RankSummary deserialise(const std::string& bytes) {
  ByteReader r(bytes);
  RankSummary s;
  s.stats.seconds = r.get<double>();
  s.stats.cpu_seconds = r.get<double>();
  s.stats.compute_seconds = r.get<double>();
  s.stats.wait_seconds = r.get<double>();
  s.stats.comm_seconds = r.get<double>();
  s.stats.flops = r.get<double>();
  s.stats.bytes_sent = r.get<int64_t>();
  s.weight_grad.present = r.get<bool>();
  s.weight_grad.elements = r.get<int64_t>();
  s.weight_grad.mismatches = r.get<int64_t>();
  s.weight_grad.first_mismatch = r.get_string();
  s.slices.resize(size_t(r.get<int64_t>()));
  for (OutputSlice& slice : s.slices) {
    slice.field = Field(r.get<int32_t>());
    slice.batch_begin = r.get<int>();
    slice.batch_end = r.get<int>();
    slice.heads = r.get<HeadRange>();
    slice.tokens.resize(size_t(r.get<int64_t>()));
    for (TokenRange& t : slice.tokens)
      t = r.get<TokenRange>();
    slice.values = r.get_doubles();
  }
  return s;
}

// ---- WeightGrad: what the schedule's all-reduces must produce ---------------------------------

// How often contributions of each value class (weight_grad_class) end up in each rank's
// WeightGrad: the all-reduces of every program, matched group call by group call. counts[r][k].
// Per class rather than per contributing rank, so that the table is P x 61, not P x P: every rank
// of a threaded run builds it, and 1,024 ranks of P x P tables took 8 GiB.
using ClassCounts = std::vector<int64_t>;
std::vector<ClassCounts> weight_grad_counts(const Plan& plan, const Schedule& schedule, int64_t& elements) {
  const size_t p = schedule.ranks.size();
  std::vector<ClassCounts> counts(p, ClassCounts(kWeightGradClasses, 0));
  std::vector<std::vector<const CollectiveSpec*>> queue(p);
  std::map<int, size_t> index_of_rank;
  for (size_t i = 0; i < p; ++i) {
    index_of_rank[schedule.ranks[i].rank] = i;
    counts[i][size_t(weight_grad_class(schedule.ranks[i].rank))] = 1;
    for (const Op& op : schedule.ranks[i].ops) {
      if (op.kind != OpKind::AllReduce) continue;
      const CollectiveSpec& spec = schedule.ranks[i].collectives[size_t(op.coll)];
      if (spec.fields != field_bit(Field::WeightGrad)) continue;
      queue[i].push_back(&spec);
      elements = spec.elements;
    }
  }
  std::vector<size_t> head(p, 0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (size_t i = 0; i < p; ++i) {
      if (head[i] >= queue[i].size()) continue;
      const auto& members = plan.groups[size_t(queue[i][head[i]]->group)].ranks;
      bool all_there = true;
      for (int m : members) {
        size_t j = index_of_rank.at(m);
        all_there = all_there && head[j] < queue[j].size() && queue[j][head[j]]->group == queue[i][head[i]]->group;
      }
      if (!all_there) continue;
      ClassCounts sum(kWeightGradClasses, 0);
      for (int m : members)
        for (size_t c = 0; c < sum.size(); ++c)
          sum[c] += counts[index_of_rank.at(m)][c];
      for (int m : members) {
        counts[index_of_rank.at(m)] = sum;
        ++head[index_of_rank.at(m)];
      }
      progressed = true;
    }
  }
  for (size_t i = 0; i < p; ++i)
    if (head[i] != queue[i].size())
      throw ScheduleError(
          fmt::format("WeightGrad all-reduces of rank {} cannot be matched with their groups", schedule.ranks[i].rank));
  return counts;
}

WeightGradCheck check_weight_grad(const Plan& plan, const Schedule& schedule, int rank, const OutputSlice& slice) {
  WeightGradCheck check;
  check.present = true;
  int64_t reduced = 0;
  auto counts = weight_grad_counts(plan, schedule, reduced);
  size_t me = 0;
  while (me < schedule.ranks.size() && schedule.ranks[me].rank != rank)
    ++me;
  check.elements = int64_t(slice.values.size());
  for (int64_t i = 0; i < check.elements; ++i) {
    double want = 0;
    if (i < reduced) {
      for (size_t c = 0; c < counts[me].size(); ++c)
        if (counts[me][c]) want += double(counts[me][c]) * weight_grad_class_value(int(c), i);
    } else {
      want = weight_grad_value(rank, i);
    }
    if (slice.values[size_t(i)] != want) {
      if (check.mismatches++ == 0)
        check.first_mismatch =
            fmt::format("rank {} element {}: {} but expected {}", rank, i, slice.values[size_t(i)], want);
    }
  }
  check.ok = check.mismatches == 0;
  return check;
}

// ---- assembling the global outputs on rank 0 --------------------------------------------------

struct Assembly {
  Tensor<double>* tensor;
  std::vector<uint8_t> written;
  const char* name;
};

void place_slice(Assembly& a, const OutputSlice& s) {
  const auto& shape = a.tensor->shape;
  const bool lse = s.field == Field::Lse;
  const int64_t heads = lse ? shape[1] : shape[2], seq = lse ? shape[2] : shape[1];
  const int64_t d = lse ? 1 : shape[3];
  if (s.heads.begin < 0 || s.heads.end > heads)
    throw ScheduleError(fmt::format("output {}: heads [{},{}) out of range", a.name, s.heads.begin, s.heads.end));
  std::vector<int64_t> pos;
  for (const TokenRange& r : s.tokens)
    for (int64_t t = r.begin; t < r.end; ++t)
      pos.push_back(t);
  const int64_t nh = s.heads.size(), nt = int64_t(pos.size());
  if (int64_t(s.values.size()) != (s.batch_end - s.batch_begin) * nt * nh * d)
    throw ScheduleError(fmt::format("output {}: slice has {} values, expected {}", a.name, s.values.size(),
                                    (s.batch_end - s.batch_begin) * nt * nh * d));
  size_t v = 0;
  for (int b = s.batch_begin; b < s.batch_end; ++b) {
    for (int64_t x = 0; x < (lse ? nh : nt); ++x)
      for (int64_t y = 0; y < (lse ? nt : nh); ++y) {
        const int64_t t = pos[size_t(lse ? y : x)], h = s.heads.begin + (lse ? x : y);
        if (t < 0 || t >= seq) throw ScheduleError(fmt::format("output {}: token {} out of range", a.name, t));
        const int64_t base = lse ? ((b * heads + h) * seq + t) : ((b * seq + t) * heads + h) * d;
        for (int64_t e = 0; e < d; ++e) {
          if (a.written[size_t(base + e)]++)
            throw ScheduleError(fmt::format("output {}: batch {} token {} head {} produced twice", a.name, b, t, h));
          (*a.tensor)[base + e] = s.values[v++];
        }
      }
  }
}

void assemble(const Workload& w, const std::vector<RankSummary>& ranks, LayerOutputs& out) {
  out.o = Tensor<double>(query_shape(w));
  out.dq = Tensor<double>(query_shape(w));
  out.dk = Tensor<double>(kv_shape(w));
  out.dv = Tensor<double>(kv_shape(w));
  out.lse = Tensor<double>({w.batch, w.heads, w.seq});
  std::map<Field, Assembly> parts;
  parts[Field::O] = {&out.o, std::vector<uint8_t>(size_t(out.o.numel())), "O"};
  parts[Field::Lse] = {&out.lse, std::vector<uint8_t>(size_t(out.lse.numel())), "Lse"};
  parts[Field::dQ] = {&out.dq, std::vector<uint8_t>(size_t(out.dq.numel())), "dQ"};
  parts[Field::dK] = {&out.dk, std::vector<uint8_t>(size_t(out.dk.numel())), "dK"};
  parts[Field::dV] = {&out.dv, std::vector<uint8_t>(size_t(out.dv.numel())), "dV"};
  for (const RankSummary& r : ranks)
    for (const OutputSlice& s : r.slices) {
      if (s.field == Field::WeightGrad) continue;
      auto it = parts.find(s.field);
      if (it == parts.end()) throw ScheduleError(fmt::format("unexpected output field {}", to_string(s.field)));
      place_slice(it->second, s);
    }
  for (auto& [field, a] : parts)
    for (size_t i = 0; i < a.written.size(); ++i)
      if (!a.written[i])
        throw ScheduleError(fmt::format("output {}: element {} (of shape {}) produced by no rank", a.name, i,
                                        shape_to_string(a.tensor->shape)));
}

const RankProgram& program_of(const Schedule& schedule, int rank) {
  for (const RankProgram& p : schedule.ranks)
    if (p.rank == rank) return p;
  throw ScheduleError(fmt::format("the schedule has no program for rank {}", rank));
}

}  // namespace

LayerRunResult run_layer(Backend& backend, const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                         const LayerRunOptions& options) {
  if (backend.size() != plan.num_ranks())
    throw InputError(fmt::format("the plan has {} ranks but {} were launched", plan.num_ranks(), backend.size()));
  if (int(schedule.ranks.size()) != plan.num_ranks())
    throw ScheduleError("run_layer needs a schedule that holds every rank");
  backend.set_groups(plan.groups);
  const RankProgram& program = program_of(schedule, backend.rank());
  GlobalInputs global{&inputs.q, &inputs.k, &inputs.v, &inputs.dO};
  backend.barrier();  // start together, so that the wall times compare
  RankResult mine = options.fp64 ? execute_program<double>(schedule, program, plan, global, backend, options.executor)
                                 : execute_program<float>(schedule, program, plan, global, backend, options.executor);
  RankSummary summary{mine.stats, std::move(mine.outputs), {}};
  for (OutputSlice& slice : summary.slices)
    if (slice.field == Field::WeightGrad) {
      summary.weight_grad = check_weight_grad(plan, schedule, backend.rank(), slice);
      slice.values.clear();
    }
  std::vector<std::string> gathered = backend.gather_to_root(serialise(summary));

  LayerRunResult result;
  result.ranks = backend.size();
  result.backend = backend.name();
  result.fp64 = options.fp64;
  if (backend.rank() != 0) return result;
  std::vector<RankSummary> ranks;
  for (const std::string& bytes : gathered)
    ranks.push_back(deserialise(bytes));
  for (const RankSummary& r : ranks) {
    result.seconds = std::max(result.seconds, r.stats.seconds);
    result.cpu_seconds = std::max(result.cpu_seconds, r.stats.cpu_seconds);
    result.compute_seconds = std::max(result.compute_seconds, r.stats.compute_seconds);
    result.wait_seconds = std::max(result.wait_seconds, r.stats.wait_seconds);
    result.comm_seconds = std::max(result.comm_seconds, r.stats.comm_seconds);
    result.flops += r.stats.flops;
    result.bytes_sent += r.stats.bytes_sent;
    if (!r.weight_grad.present) continue;
    WeightGradCheck& wg = result.weight_grad;
    wg.present = true;
    wg.elements = r.weight_grad.elements;
    if (wg.mismatches == 0) wg.first_mismatch = r.weight_grad.first_mismatch;
    wg.mismatches += r.weight_grad.mismatches;
    wg.ok = wg.mismatches == 0;
  }
  assemble(plan.workload, ranks, result.outputs);
  result.ok = result.weight_grad.ok;
  if (options.check) {
    double tolerance = options.tolerance > 0 ? options.tolerance : default_tolerance(options.fp64);
    result.checks = check_against_reference(plan.workload, inputs, result.outputs, tolerance);
    for (const TensorCheck& c : result.checks)
      result.ok = result.ok && c.ok;
  }
  return result;
}

LayerRunResult run_layer_local(const Plan& plan, const Schedule& schedule, const LayerInputs& inputs,
                               const LayerRunOptions& options, const LocalOptions& local) {
  LayerRunResult result;
  run_local_ranks(
      plan.num_ranks(),
      [&](Backend& backend) {
        LayerRunResult r = run_layer(backend, plan, schedule, inputs, options);
        if (backend.rank() == 0) result = std::move(r);
      },
      local);
  return result;
}

}  // namespace wallfacer::runtime
