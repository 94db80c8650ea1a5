// The executor's state and stream loop: buffers and their token sets, input and output
// bindings, point-to-point transfers, and the loop that advances the four streams.
#include <wallfacer/runtime/executor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include "executor_impl.hpp"

namespace wallfacer::runtime {

int weight_grad_class(int rank) {
  return int((int64_t(rank) + 1) * 37 % kWeightGradClasses);
}
double weight_grad_class_value(int value_class, int64_t index) {
  return double((value_class + index * 11) % kWeightGradClasses) - 30.0;
}
double weight_grad_value(int rank, int64_t index) {
  return weight_grad_class_value(weight_grad_class(rank), index);
}

namespace detail {
namespace {

// CPU time of the calling thread: what a rank consumed, however busy the machine is.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<char> to_bytes(const std::vector<double>& values, ElemType type) {
  std::vector<char> bytes(values.size() * elem_size(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == ElemType::F32)
      reinterpret_cast<float*>(bytes.data())[i] = float(values[i]);
    else
      reinterpret_cast<double*>(bytes.data())[i] = values[i];
  }
  return bytes;
}

std::vector<double> from_bytes(const std::vector<char>& bytes, ElemType type) {
  std::vector<double> values(bytes.size() / elem_size(type));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = type == ElemType::F32 ? double(reinterpret_cast<const float*>(bytes.data())[i])
                                      : reinterpret_cast<const double*>(bytes.data())[i];
  return values;
}

const Tensor<double>* global_of(const GlobalInputs& inputs, Field field) {
  switch (field) {
    case Field::Q:
      return inputs.q;
    case Field::K:
      return inputs.k;
    case Field::V:
      return inputs.v;
    case Field::dO:
      return inputs.dO;
    default:
      return nullptr;
  }
}

}  // namespace

Executor::Executor(const Schedule& schedule_, const RankProgram& program_, const Plan& plan_, Backend& backend_,
                   const ExecutorOptions& options_, ElemType type_)
    : schedule(schedule_),
      program(program_),
      plan(plan_),
      backend(backend_),
      options(options_),
      type(type_),
      batches(program_.batch_end - program_.batch_begin),
      head_dim(schedule_.dims.head_dim),
      group(schedule_.dims.kv_heads > 0 ? schedule_.dims.heads / schedule_.dims.kv_heads : 1) {
  if (schedule.dims.kv_heads <= 0 || schedule.dims.heads % schedule.dims.kv_heads != 0)
    throw ScheduleError(fmt::format("schedule dims: heads {} not a multiple of kv_heads {}", schedule.dims.heads,
                                    schedule.dims.kv_heads));
  if (batches < 1) throw ScheduleError(fmt::format("rank {}: empty batch range", program.rank));
  backend.program_begins();
  allocate_buffers();
  stream_ops_.resize(kNumStreams);
  for (size_t i = 0; i < program.ops.size(); ++i)
    stream_ops_[size_t(program.ops[i].stream)].push_back(int32_t(i));
  done_.assign(program.ops.size(), 0);
}

void Executor::allocate_buffers() {
  buffers_.resize(program.buffers.size());
  for (size_t i = 0; i < program.buffers.size(); ++i) {
    const BufferDecl& decl = program.buffers[i];
    BufferState& b = buffers_[i];
    b.name = decl.name;
    b.storage = packed_shape(decl.fields, decl.capacity_tokens, decl.heads, mask_has_query_field(decl.fields), batches,
                             head_dim, group, type);
    if (b.storage.has(Field::WeightGrad)) {
      b.storage.weight_elements = decl.capacity_tokens;
      for (const Op& op : program.ops)
        if (op.kind == OpKind::AllReduce && op.buf[0] == int32_t(i))
          b.storage.weight_elements =
              std::max(b.storage.weight_elements, program.collectives[size_t(op.coll)].elements);
    }
    for (int f = 0; f < kNumFields; ++f) {
      if (!b.storage.has(Field(f))) continue;
      size_t count = size_t(b.storage.elements(Field(f)));
      b.memory.emplace_back(backend, std::max<size_t>(count, 1) * elem_size(type));
      b.storage.base[size_t(f)] = b.memory.back().data();
      if (options.poison) backend.fill(b.memory.back().data(), type, count, std::nan(""));
    }
  }
}

BufferState& Executor::buffer(int32_t index, int32_t op_index) {
  if (index < 0 || size_t(index) >= buffers_.size())
    throw ScheduleError(fmt::format("{}: buffer index {} out of range", where(op_index), index));
  return buffers_[size_t(index)];
}

const TokenSet& Executor::tokens(int32_t id, int32_t op_index) const {
  if (id < 0 || size_t(id) >= schedule.tokens.size())
    throw ScheduleError(fmt::format("{}: token set {} out of range", where(op_index), id));
  return schedule.tokens.get(id);
}

std::string Executor::where(int32_t op_index) const {
  if (op_index < 0) return fmt::format("rank {} bindings", program.rank);
  const Op& op = program.ops[size_t(op_index)];
  return fmt::format("rank {} op {} ({}, step {})", program.rank, op_index, to_string(op.kind), op.step);
}

RowRuns Executor::readable(const BufferState& buf, const TokenSet& set, FieldMask fields, int32_t op_index) const {
  auto runs = map_rows(buf.tokens, set);
  if (!runs)
    throw ScheduleError(fmt::format("{}: reads tokens {} of buffer '{}', which holds {}", where(op_index),
                                    describe(set), buf.name, describe(buf.tokens)));
  for (int f = 0; f < kNumFields; ++f) {
    if (!(fields & field_bit(Field(f)))) continue;
    if (!buf.storage.has(Field(f)))
      throw ScheduleError(
          fmt::format("{}: buffer '{}' has no field {}", where(op_index), buf.name, to_string(Field(f))));
    if (!buf.valid[size_t(f)])
      throw ScheduleError(fmt::format("{}: reads field {} of buffer '{}' before anything wrote it", where(op_index),
                                      to_string(Field(f)), buf.name));
  }
  return *runs;
}

void Executor::fill_identity(const Storage& storage, Field field) {
  double value = field == Field::Lse ? -std::numeric_limits<double>::infinity() : 0.0;
  backend.fill(storage.base[size_t(field)], type, size_t(storage.elements(field)), value);
}

RowRuns Executor::prepare_write(BufferState& buf, const TokenSet& set, FieldMask fields, const TokenSet* mirror,
                                int32_t op_index) {
  for (int f = 0; f < kNumFields; ++f)
    if ((fields & field_bit(Field(f))) && !buf.storage.has(Field(f)))
      throw ScheduleError(
          fmt::format("{}: buffer '{}' has no field {}", where(op_index), buf.name, to_string(Field(f))));
  auto runs = map_rows(buf.tokens, set);
  if (!runs) {
    const TokenSet& fresh = mirror ? *mirror : set;
    if (token_count(fresh) > buf.storage.capacity)
      throw ScheduleError(fmt::format("{}: {} tokens do not fit buffer '{}' (capacity {})", where(op_index),
                                      token_count(fresh), buf.name, buf.storage.capacity));
    buf.tokens = fresh;
    buf.valid.fill(false);
    if (options.poison)
      for (int f = 0; f < kNumFields; ++f)
        if (buf.storage.has(Field(f)) && Field(f) != Field::WeightGrad)
          backend.fill(buf.storage.base[size_t(f)], type, size_t(buf.storage.elements(Field(f))), std::nan(""));
    runs = map_rows(buf.tokens, set);
    if (!runs)
      throw ScheduleError(fmt::format("{}: accumulates tokens {} into '{}', whose partner holds {}", where(op_index),
                                      describe(set), buf.name, describe(fresh)));
  }
  for (int f = 0; f < kNumFields; ++f) {
    if (!(fields & field_bit(Field(f)))) continue;
    if (mirror && !buf.valid[size_t(f)]) fill_identity(buf.storage, Field(f));
    buf.valid[size_t(f)] = true;
  }
  return *runs;
}

HeadRange Executor::op_heads(const Op& op, const BufferState& buf) const {
  return op.heads.size() > 0 ? op.heads : buf.storage.heads;
}

PackedBlock Executor::pack(const BufferState& buf, const RowRuns& runs, FieldMask fields, int64_t count,
                           HeadRange heads, bool heads_are_query) {
  PackedBlock block = make_packed(backend, fields, count, heads, heads_are_query, batches, head_dim, group, type);
  copy_rows(backend, buf.storage, runs, block.shape, identity_runs(count), fields, heads, heads_are_query);
  return block;
}

// ---- bindings ---------------------------------------------------------------------------------

void Executor::bind_inputs(const GlobalInputs& inputs) {
  const ScheduleDims& dims = schedule.dims;
  for (const Binding& binding : program.inputs) {
    if (binding.field == Field::WeightGrad) {
      bind_weight_grad(binding);
      continue;
    }
    const Tensor<double>* global = global_of(inputs, binding.field);
    if (!global)
      throw ScheduleError(fmt::format("{}: no global input for field {}", where(-1), to_string(binding.field)));
    const int heads_total = is_query_class(binding.field) ? dims.heads : dims.kv_heads;
    const std::vector<int64_t> want{dims.batch, dims.seq, heads_total, dims.head_dim};
    if (global->shape != want)
      throw ScheduleError(fmt::format("global {} has shape {}, the schedule needs {}", to_string(binding.field),
                                      shape_to_string(global->shape), shape_to_string(want)));
    bind_values(
        binding,
        [&](int b, int64_t t, int head, int d) {
          return (*global)[global->offset({b, t, head, d})];
        },
        false);
  }
}

void Executor::bind_weight_grad(const Binding& binding) {
  BufferState& buf = buffer(binding.buf, -1);
  prepare_write(buf, buf.tokens, field_bit(Field::WeightGrad), nullptr, -1);
  std::vector<double> values(size_t(buf.storage.weight_elements));
  if (!options.skip_weight_grad)
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = weight_grad_value(program.rank, int64_t(i));
  auto bytes = to_bytes(values, type);
  backend.upload(buf.storage.base[size_t(Field::WeightGrad)], bytes.data(), bytes.size());
}

void Executor::bind_values(const Binding& binding, const std::function<double(int, int64_t, int, int)>& value,
                           bool in_place) {
  const ScheduleDims& dims = schedule.dims;
  BufferState& buf = buffer(binding.buf, -1);
  const FieldMask bit = field_bit(binding.field);
  const int heads_total = is_query_class(binding.field) ? dims.heads : dims.kv_heads;
  const TokenSet& set = tokens(binding.tokens, -1);
  const HeadRange h = binding.heads;
  if (h.begin < 0 || h.end > heads_total)
    throw ScheduleError(fmt::format("{}: input {} out of range", where(-1), describe(h)));
  // A late binding (dO after the forward) must not evict rows the forward left for the backward.
  const bool holds_data = std::any_of(buf.valid.begin(), buf.valid.end(), [](bool v) { return v; });
  if (in_place && holds_data && !map_rows(buf.tokens, set))
    throw ScheduleError(fmt::format("{}: {} binds tokens {} into buffer '{}', which holds {} after the forward",
                                    where(-1), to_string(binding.field), describe(set), buf.name,
                                    describe(buf.tokens)));
  std::vector<double> values;
  values.reserve(size_t(batches * token_count(set) * h.size() * dims.head_dim));
  const std::vector<int64_t> pos = positions(set);
  for (int b = program.batch_begin; b < program.batch_end; ++b)
    for (int64_t t : pos)
      for (int head = h.begin; head < h.end; ++head)
        for (int d = 0; d < dims.head_dim; ++d)
          values.push_back(value(b, t, head, d));
  const bool query = is_query_class(binding.field);
  RowRuns runs = prepare_write(buf, set, bit, nullptr, -1);
  PackedBlock block = make_packed(backend, bit, token_count(set), h, query, batches, head_dim, group, type);
  auto bytes = to_bytes(values, type);
  backend.upload(block.memory.data(), bytes.data(), bytes.size());
  copy_rows(backend, block.shape, identity_runs(token_count(set)), buf.storage, runs, bit, h, query);
}

std::vector<OutputSlice> Executor::collect_outputs(FieldMask fields) {
  std::vector<OutputSlice> slices;
  for (const Binding& binding : program.outputs)
    if (fields & field_bit(binding.field)) slices.push_back(collect_output(binding));
  return slices;
}

OutputSlice Executor::collect_output(const Binding& binding) {
  BufferState& buf = buffer(binding.buf, -1);
  const FieldMask bit = field_bit(binding.field);
  OutputSlice slice;
  slice.field = binding.field;
  slice.heads = binding.heads;
  slice.batch_begin = program.batch_begin;
  slice.batch_end = program.batch_end;
  std::vector<char> bytes;
  if (binding.field == Field::WeightGrad) {
    if (!buf.valid[size_t(Field::WeightGrad)])
      throw ScheduleError(fmt::format("{}: WeightGrad never written", where(-1)));
    bytes.resize(size_t(buf.storage.weight_elements) * elem_size(type));
    backend.download(bytes.data(), buf.storage.base[size_t(Field::WeightGrad)], bytes.size());
  } else {
    slice.tokens = tokens(binding.tokens, -1);
    const int64_t count = token_count(slice.tokens);
    RowRuns runs = readable(buf, slice.tokens, bit, -1);
    PackedBlock block = pack(buf, runs, bit, count, binding.heads, is_query_class(binding.field));
    bytes.resize(size_t(block.elements) * elem_size(type));
    backend.download(bytes.data(), block.memory.data(), bytes.size());
  }
  slice.values = from_bytes(bytes, type);
  return slice;
}

void Executor::restart_fields(int32_t index, FieldMask fields) {
  BufferState& buf = buffer(index, -1);
  for (int f = 0; f < kNumFields; ++f)
    if (fields & field_bit(Field(f))) buf.valid[size_t(f)] = false;
}

// ---- the stream loop --------------------------------------------------------------------------

bool Executor::skipped(const Op& op) const {
  return options.skip_weight_grad && op.kind == OpKind::AllReduce &&
         program.collectives[size_t(op.coll)].fields == field_bit(Field::WeightGrad);
}

bool Executor::ready(int32_t op_index) const {
  if (op_index >= op_limit_) return false;
  const Op& op = program.ops[size_t(op_index)];
  for (const int32_t* d = program.deps_begin(op); d != program.deps_end(op); ++d) {
    if (*d < 0 || *d >= op_index)
      throw ScheduleError(fmt::format("{}: dependency on op {} which is not earlier", where(op_index), *d));
    if (!done_[size_t(*d)]) return false;
  }
  return true;
}

bool Executor::advance_streams() {
  bool progressed = false;
  static constexpr Stream kComm[] = {Stream::Send, Stream::Recv, Stream::Collective, Stream::Sync};
  for (Stream s : kComm) {
    InFlight& flight = flight_[size_t(s)];
    if (flight.op >= 0 && backend.test(flight.request)) {
      finish(flight);
      progressed = true;
    }
  }
  // Post before computing, so that the transfers run while the compute op does.
  for (Stream s : kComm) {
    const auto& ops = stream_ops_[size_t(s)];
    size_t& head = head_[size_t(s)];
    InFlight& flight = flight_[size_t(s)];
    if (flight.op < 0 && head < ops.size() && ready(ops[head])) {
      flight = InFlight{};
      flight.op = ops[head++];
      progressed = true;
      if (hooks && hooks->started) hooks->started(flight.op);
      if (skipped(program.ops[size_t(flight.op)])) {
        done_[size_t(flight.op)] = 1;
        ++done_count_;
        flight = InFlight{};
        continue;
      }
      post(flight);
    }
  }
  const auto& compute = stream_ops_[size_t(Stream::Compute)];
  size_t& head = head_[size_t(Stream::Compute)];
  if (head < compute.size() && ready(compute[head])) {
    int32_t op = compute[head++];
    if (hooks && hooks->started) hooks->started(op);
    run_compute(op);
    done_[size_t(op)] = 1;
    ++done_count_;
    progressed = true;
  }
  return progressed;
}

void Executor::run(int64_t op_limit) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  op_limit_ = std::min<int64_t>(op_limit, int64_t(program.ops.size()));
  while (done_count_ < op_limit_) {
    if (advance_streams()) continue;
    std::vector<RequestId> pending;
    for (const InFlight& flight : flight_)
      if (flight.op >= 0) pending.push_back(flight.request);
    if (pending.empty()) {
      std::string heads;
      for (int s = 0; s < kNumStreams; ++s)
        if (head_[size_t(s)] < stream_ops_[size_t(s)].size())
          heads += fmt::format("\n  {} stream waits at op {}", to_string(Stream(s)),
                               stream_ops_[size_t(s)][head_[size_t(s)]]);
      throw ScheduleError(fmt::format("rank {}: no stream can advance:{}", program.rank, heads));
    }
    const auto wait_start = std::chrono::steady_clock::now();
    backend.wait_any(pending);
    stats_.wait_seconds += seconds_since(wait_start);
  }
  backend.synchronize();
  stats_.seconds += seconds_since(start);
  if (const DeviceTimes device = backend.device_times(); device.valid) {
    stats_.compute_seconds = device.compute_seconds;
    stats_.comm_seconds = device.comm_seconds;
    stats_.wait_seconds = std::max(0.0, stats_.seconds - device.compute_seconds);
  }
  stats_.cpu_seconds += thread_cpu_seconds() - cpu_start;
  stats_.ops = done_count_;
}

void Executor::post(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv)
    post_point_to_point(flight);
  else if (flat_hooked(op))
    flat_post(flight);
  else if (is_collective(op.kind))
    post_collective(flight);
  else
    throw ScheduleError(
        fmt::format("{}: a {} op on the {} stream", where(flight.op), to_string(op.kind), to_string(op.stream)));
  WF_LOG_DEBUG("runtime", "{}: posted", where(flight.op));
}

void Executor::post_point_to_point(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  BufferState& buf = buffer(op.buf[0], flight.op);
  const TokenSet& set = tokens(op.tok[0], flight.op);
  const HeadRange heads = op_heads(op, buf);
  const bool query = buf.storage.heads_are_query;
  const size_t es = elem_size(type);
  if (op.kind == OpKind::Send) {
    RowRuns runs = readable(buf, set, op.fields, flight.op);
    PackedBlock block = pack(buf, runs, op.fields, token_count(set), heads, query);
    flight.send = std::move(block.memory);
    flight.request = backend.isend(op.peer, op.tag, flight.send.data(), size_t(block.elements) * es);
    stats_.bytes_sent += int64_t(size_t(block.elements) * es);
    return;
  }
  Storage shape = packed_shape(op.fields, token_count(set), heads, query, batches, head_dim, group, type);
  const size_t bytes = size_t(packed_elements(shape)) * es;
  flight.recv = DeviceBlock(backend, std::max<size_t>(bytes, 1));
  flight.request = backend.irecv(op.peer, op.tag, flight.recv.data(), bytes);
}

void Executor::finish(InFlight& flight) {
  const Op& op = program.ops[size_t(flight.op)];
  if (op.kind == OpKind::Recv) {
    BufferState& buf = buffer(op.buf[0], flight.op);
    const TokenSet& set = tokens(op.tok[0], flight.op);
    const HeadRange heads = op_heads(op, buf);
    const bool query = buf.storage.heads_are_query;
    Storage shape = packed_shape(op.fields, token_count(set), heads, query, batches, head_dim, group, type);
    place_packed(shape, flight.recv.data());
    RowRuns runs = prepare_write(buf, set, op.fields, nullptr, flight.op);
    copy_rows(backend, shape, identity_runs(token_count(set)), buf.storage, runs, op.fields, heads, query);
  } else if (flat_hooked(op)) {
    flat_finish(flight);
  } else if (is_collective(op.kind)) {
    finish_collective(flight);
  }
  done_[size_t(flight.op)] = 1;
  ++done_count_;
  flight = InFlight{};
}

void deliver(const std::vector<OutputSlice>& slices, int head_dim, const SliceSink& sink) {
  for (const OutputSlice& slice : slices) {
    const std::vector<int64_t> pos = detail::positions(slice.tokens);
    const bool lse = slice.field == Field::Lse;
    const int d_count = lse ? 1 : head_dim;
    size_t v = 0;
    for (int b = slice.batch_begin; b < slice.batch_end; ++b) {
      if (lse) {
        for (int h = slice.heads.begin; h < slice.heads.end; ++h)
          for (int64_t t : pos)
            sink(slice.field, b, t, h, 0, slice.values[v++]);
        continue;
      }
      for (int64_t t : pos)
        for (int h = slice.heads.begin; h < slice.heads.end; ++h)
          for (int d = 0; d < d_count; ++d)
            sink(slice.field, b, t, h, d, slice.values[v++]);
    }
  }
}

}  // namespace detail

template <typename T>
RankResult execute_program(const Schedule& schedule, const RankProgram& program, const Plan& plan,
                           const GlobalInputs& inputs, Backend& backend, const ExecutorOptions& options) {
  detail::Executor executor(schedule, program, plan, backend, options, elem_type_of<T>());
  executor.bind_inputs(inputs);
  executor.run();
  RankResult result;
  result.outputs = executor.collect_outputs();
  result.stats = executor.stats();
  return result;
}

template RankResult execute_program<float>(const Schedule&, const RankProgram&, const Plan&, const GlobalInputs&,
                                           Backend&, const ExecutorOptions&);
template RankResult execute_program<double>(const Schedule&, const RankProgram&, const Plan&, const GlobalInputs&,
                                            Backend&, const ExecutorOptions&);

// ---- rank-local sessions -----------------------------------------------------------------------

namespace {

ExecutorOptions session_options(ExecutorOptions options) {
  options.skip_weight_grad = true;
  return options;
}

int64_t forward_prefix(const RankProgram& program) {
  int64_t first_backward = int64_t(program.ops.size());
  for (size_t i = 0; i < program.ops.size(); ++i)
    if (program.ops[i].phase == Phase::Backward) {
      first_backward = int64_t(i);
      break;
    }
  for (size_t i = size_t(first_backward); i < program.ops.size(); ++i)
    if (program.ops[i].phase == Phase::Forward)
      throw ScheduleError(
          fmt::format("rank {}: forward op {} comes after backward op {}; a training session needs "
                      "the forward as a prefix of the program",
                      program.rank, i, first_backward));
  return first_backward;
}

}  // namespace

RankSession::RankSession(const Schedule& schedule, const RankProgram& program, const Plan& plan, Backend& backend,
                         ElemType type, const ExecutorOptions& options)
    : executor_(std::make_unique<detail::Executor>(schedule, program, plan, backend, session_options(options), type)),
      forward_ops_(forward_prefix(program)) {}

RankSession::~RankSession() = default;

void RankSession::forward(const SliceSource& source, const SliceSink& sink) {
  for (const Binding& binding : executor_->program.inputs) {
    if (binding.field == Field::WeightGrad)
      executor_->bind_weight_grad(binding);
    else if (binding.field != Field::dO)
      executor_->bind_values(
          binding, [&](int b, int64_t t, int h, int d) { return source(binding.field, b, t, h, d); }, false);
  }
  executor_->run(forward_ops_);
  detail::deliver(executor_->collect_outputs(field_mask({Field::O, Field::Lse})), executor_->head_dim, sink);
}

void RankSession::backward(const SliceSource& source, const SliceSink& sink) {
  for (const Binding& binding : executor_->program.inputs)
    if (binding.field == Field::dO)
      executor_->bind_values(
          binding, [&](int b, int64_t t, int h, int d) { return source(binding.field, b, t, h, d); }, true);
  executor_->run();
  detail::deliver(executor_->collect_outputs(field_mask({Field::dQ, Field::dK, Field::dV})), executor_->head_dim, sink);
}

const ExecutionStats& RankSession::stats() const {
  return executor_->stats();
}

}  // namespace wallfacer::runtime
