// Workloads: reading model files and presets, CLI overrides, validation and parameter counts.
// The format is described in docs/formats/workload.md.
#include <wallfacer/plan/workload.hpp>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/core/yaml_util.hpp>

namespace wallfacer {

// Generated from models/presets.cmake (cmake/EmbedFiles.cmake).
const std::map<std::string, std::string>& embedded_models();

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return "bf16";
    case DType::FP16:
      return "fp16";
    case DType::FP32:
      return "fp32";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType d : {DType::BF16, DType::FP16, DType::FP32})
    if (name == to_string(d)) return d;
  throw InputError(fmt::format("unknown dtype '{}' (bf16, fp16, fp32)", name));
}

const char* to_string(Checkpointing mode) {
  switch (mode) {
    case Checkpointing::None:
      return "none";
    case Checkpointing::Selective:
      return "selective";
    case Checkpointing::Full:
      return "full";
  }
  return "?";
}

Checkpointing parse_checkpointing(const std::string& name) {
  for (Checkpointing m : {Checkpointing::None, Checkpointing::Selective, Checkpointing::Full})
    if (name == to_string(m)) return m;
  throw InputError(fmt::format("unknown checkpointing mode '{}' (none, selective, full)", name));
}

int bytes_of(DType dtype) {
  return dtype == DType::FP32 ? 4 : 2;
}

int64_t Workload::attention_parameters_per_layer() const {
  // W_q: H x H, W_k and W_v: H x H_kv, W_o: H x H (no biases; see docs/formats/workload.md).
  return hidden * q_width() + 2 * hidden * kv_width() + q_width() * hidden;
}

int64_t Workload::layer_parameter_count() const {
  const int64_t ffn_matrices = gated_ffn ? 3 : 2;
  const int64_t norms_per_layer = 2 * hidden;  // one weight vector before attention, one before the FFN
  return attention_parameters_per_layer() + ffn_matrices * hidden * ffn + norms_per_layer;
}

int64_t Workload::parameter_count() const {
  return stage_parameter_count(0, 1);
}

int64_t Workload::stage_parameter_count(int stage, int stages) const {
  const int64_t embeddings = vocab * hidden;
  const int64_t output_head = vocab * hidden;  // untied
  const int64_t final_norm = hidden;
  int64_t count = int64_t(layers / std::max(1, stages)) * layer_parameter_count();
  if (stage == 0) count += embeddings;
  if (stage == stages - 1) count += output_head + final_norm;
  return count;
}

namespace {

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

// What the reader learned besides the values: where each field sits in the file, which fields the
// file has, and which ones a CLI flag replaced (so errors can blame the file line or the flag).
struct WorkloadSource {
  std::string source;
  int root_line = 0;
  std::map<std::string, int> lines;  // field -> line, for fields present in the file
  std::set<std::string> overridden;
  bool present(const std::string& field) const { return lines.count(field) > 0; }
};

struct Problem {
  std::vector<std::string> fields;  // the fields involved, most likely culprit first
  std::string message;
};

std::string flag_of(const std::string& field) {
  std::string flag = "--" + field;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

[[noreturn]] void blame(const WorkloadSource& from, const Problem& problem) {
  for (const auto& field : problem.fields)
    if (from.overridden.count(field)) throw InputError(flag_of(field), 0, problem.message);
  for (const auto& field : problem.fields)
    if (from.present(field)) throw InputError(from.source, from.lines.at(field), problem.message);
  throw InputError(from.source, from.root_line, problem.message);
}

std::optional<Problem> find_problem(const Workload& w) {
  const std::pair<const char*, int64_t> sizes[] = {{"layers", w.layers},     {"hidden", w.hidden},
                                                   {"heads", w.heads},       {"kv_heads", w.kv_heads},
                                                   {"head_dim", w.head_dim}, {"ffn", w.ffn},
                                                   {"vocab", w.vocab},       {"seq", w.seq},
                                                   {"batch", w.batch},       {"microbatches", w.microbatches}};
  for (const auto& [name, value] : sizes) {
    if (value < 1) return Problem{{name}, fmt::format("'{}' must be at least 1, got {}", name, value)};
    if (value > kMaxSize) return Problem{{name}, fmt::format("'{}' must be at most {}, got {}", name, kMaxSize, value)};
  }
  if (w.grad_bucket_MiB < 1 || w.grad_bucket_MiB > 1 << 20)
    return Problem{{"grad_bucket_MiB"},
                   fmt::format("'grad_bucket_MiB' must be between 1 and {}, got {}", 1 << 20, w.grad_bucket_MiB)};
  if (w.batch % w.microbatches != 0)
    return Problem{{"microbatches", "batch"},
                   fmt::format("'microbatches' ({}) must divide 'batch' ({})", w.microbatches, w.batch)};
  if (w.zero_stage < 0 || w.zero_stage > 3)
    return Problem{{"zero_stage"}, fmt::format("'zero_stage' must be 0, 1, 2 or 3, got {}", w.zero_stage)};
  if (w.heads % w.kv_heads != 0)
    return Problem{{"kv_heads", "heads"},
                   fmt::format("'heads' ({}) must be a multiple of 'kv_heads' ({})", w.heads, w.kv_heads)};
  if (w.hidden != w.q_width())
    return Problem{{"hidden", "head_dim", "heads"},
                   fmt::format("'hidden' ({}) must equal heads * head_dim ({} * {} = {})", w.hidden, w.heads,
                               w.head_dim, w.q_width())};
  return std::nullopt;
}

const std::initializer_list<std::string_view> kPlanKeys = {
    "model",         "layers",          "hidden",     "heads",        "kv_heads",       "head_dim", "ffn",
    "vocab",         "gated_ffn",       "seq",        "batch",        "dtype",          "causal",   "zero_stage",
    "checkpointing", "grad_bucket_MiB", "fp8_linear", "microbatches", "grad_comm_dtype"};
const std::initializer_list<std::string_view> kModelFileKeys = {
    "model",    "description", "source",        "layers",          "hidden",     "heads",        "kv_heads",
    "head_dim", "ffn",         "vocab",         "gated_ffn",       "seq",        "batch",        "dtype",
    "causal",   "zero_stage",  "checkpointing", "grad_bucket_MiB", "fp8_linear", "microbatches", "grad_comm_dtype"};

// Reads the fields present in `node`; absent ones keep Workload's defaults for now.
Workload read_fields(const YAML::Node& node, WorkloadSource& from, bool all_fields) {
  const std::string& src = from.source;
  yaml::check_keys(src, node, all_fields ? kPlanKeys : kModelFileKeys, all_fields ? "workload" : "model file");
  from.root_line = yaml::line_of(node);
  auto has = [&](const char* key) {
    const YAML::Node value = node[key];
    if (!value.IsDefined()) return false;
    from.lines[key] = yaml::line_of(value);
    return true;
  };
  auto read_int = [&](const char* key, auto& member) {
    if (!has(key)) return;
    const int64_t v = yaml::as_int(src, node[key], key);
    using T = std::remove_reference_t<decltype(member)>;
    if constexpr (sizeof(T) < sizeof(int64_t)) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
        yaml::fail(src, node[key], fmt::format("'{}' is out of range: {}", key, v));
    }
    member = static_cast<T>(v);
  };
  Workload w;
  if (has("model")) w.model = yaml::as_string(src, node["model"], "model");
  read_int("layers", w.layers);
  read_int("hidden", w.hidden);
  read_int("heads", w.heads);
  read_int("kv_heads", w.kv_heads);
  read_int("head_dim", w.head_dim);
  read_int("ffn", w.ffn);
  read_int("vocab", w.vocab);
  read_int("seq", w.seq);
  read_int("batch", w.batch);
  read_int("zero_stage", w.zero_stage);
  read_int("grad_bucket_MiB", w.grad_bucket_MiB);
  read_int("microbatches", w.microbatches);
  if (has("checkpointing")) {
    try {
      w.checkpointing = parse_checkpointing(yaml::as_string(src, node["checkpointing"], "checkpointing"));
    } catch (const InputError& e) {
      if (!e.file().empty()) throw;
      yaml::fail(src, node["checkpointing"], e.message());
    }
  }
  if (has("gated_ffn")) w.gated_ffn = yaml::get_bool(src, node, "gated_ffn");
  if (has("causal")) w.causal = yaml::get_bool(src, node, "causal");
  if (has("fp8_linear")) w.fp8_linear = yaml::get_bool(src, node, "fp8_linear");
  if (has("dtype")) {
    try {
      w.dtype = parse_dtype(yaml::as_string(src, node["dtype"], "dtype"));
    } catch (const InputError& e) {
      if (!e.file().empty()) throw;
      yaml::fail(src, node["dtype"], e.message());
    }
  }
  if (has("grad_comm_dtype")) {
    try {
      w.grad_comm_dtype = parse_dtype(yaml::as_string(src, node["grad_comm_dtype"], "grad_comm_dtype"));
    } catch (const InputError& e) {
      if (!e.file().empty()) throw;
      yaml::fail(src, node["grad_comm_dtype"], e.message());
    }
  }
  return w;
}

// Applies the CLI overrides. A changed architecture keeps its shape consistent: new heads keep a
// multi-head model multi-head, and a new hidden or head count re-derives head_dim (or a new
// head_dim re-derives hidden) unless that field was given too.
void apply_overrides(Workload& w, WorkloadSource& from, const WorkloadOverrides& o) {
  const Workload before = w;
  auto take = [&](const char* field, const auto& value, auto& member) {
    if (!value) return;
    member = *value;
    from.overridden.insert(field);
  };
  take("layers", o.layers, w.layers);
  take("hidden", o.hidden, w.hidden);
  take("heads", o.heads, w.heads);
  take("kv_heads", o.kv_heads, w.kv_heads);
  take("head_dim", o.head_dim, w.head_dim);
  take("ffn", o.ffn, w.ffn);
  take("vocab", o.vocab, w.vocab);
  take("seq", o.seq, w.seq);
  take("batch", o.batch, w.batch);
  take("zero_stage", o.zero_stage, w.zero_stage);
  take("grad_bucket_MiB", o.grad_bucket_MiB, w.grad_bucket_MiB);
  take("microbatches", o.microbatches, w.microbatches);
  if (o.checkpointing) {
    try {
      w.checkpointing = parse_checkpointing(*o.checkpointing);
    } catch (const InputError& e) {
      throw InputError("--checkpointing", 0, e.message());
    }
    from.overridden.insert("checkpointing");
  }
  take("causal", o.causal, w.causal);
  take("fp8_linear", o.fp8_linear, w.fp8_linear);
  if (o.dtype) {
    try {
      w.dtype = parse_dtype(*o.dtype);
    } catch (const InputError& e) {
      throw InputError("--dtype", 0, e.message());
    }
    from.overridden.insert("dtype");
  }
  if (o.grad_comm_dtype) {
    try {
      w.grad_comm_dtype = parse_dtype(*o.grad_comm_dtype);
    } catch (const InputError& e) {
      throw InputError("--grad-comm-dtype", 0, e.message());
    }
    from.overridden.insert("grad_comm_dtype");
  }
  auto given = [&](const char* f) { return from.overridden.count(f) > 0; };
  if (given("heads") && !given("kv_heads") && before.kv_heads == before.heads) w.kv_heads = w.heads;
  if ((given("hidden") || given("heads")) && !given("head_dim") && w.heads > 0 && w.hidden % w.heads == 0)
    w.head_dim = int(w.hidden / w.heads);
  else if (given("head_dim") && !given("hidden"))
    w.hidden = w.q_width();
}

// Defaults that depend on other fields, then required fields, then the checks.
void complete_and_check(Workload& w, const WorkloadSource& from, bool all_fields) {
  auto known = [&](const char* f) { return from.present(f) || from.overridden.count(f) > 0; };
  if (!known("kv_heads")) w.kv_heads = w.heads;
  if (!known("head_dim") && w.heads > 0) {
    if (w.hidden % w.heads != 0)
      blame(from, {{"hidden", "heads"},
                   fmt::format("'hidden' ({}) is not a multiple of 'heads' ({}); give 'head_dim'", w.hidden, w.heads)});
    w.head_dim = int(w.hidden / w.heads);
  }
  std::vector<const char*> required = {"layers", "hidden", "heads", "ffn", "vocab", "seq"};
  if (all_fields)
    required.insert(required.end(),
                    {"model", "kv_heads", "head_dim", "gated_ffn", "batch", "dtype", "causal", "zero_stage"});
  for (const char* field : required)
    if (!known(field)) throw InputError(from.source, from.root_line, fmt::format("missing required field '{}'", field));
  if (auto problem = find_problem(w)) blame(from, *problem);
}

Workload load_from_text(const std::string& text, const std::string& source, const WorkloadOverrides& overrides) {
  const YAML::Node root = yaml::parse(text, source);
  WorkloadSource from;
  from.source = source;
  Workload w = read_fields(root, from, false);
  apply_overrides(w, from, overrides);
  complete_and_check(w, from, false);
  return w;
}

}  // namespace

Workload parse_workload(const std::string& yaml_text, const std::string& source) {
  return load_from_text(yaml_text, source, {});
}

Workload load_workload(const std::string& path_or_preset, const WorkloadOverrides& overrides) {
  const auto& presets = embedded_models();
  Workload w;
  if (auto it = presets.find(path_or_preset); it != presets.end()) {
    w = load_from_text(it->second, "models/" + it->first + ".yaml", overrides);
    w.model = it->first;
  } else if (std::error_code ec; std::filesystem::exists(path_or_preset, ec)) {
    w = load_from_text(yaml::read_file(path_or_preset), path_or_preset, overrides);
  } else {
    throw InputError(fmt::format("unknown model '{}': neither a preset ({}) nor a file", path_or_preset,
                                 fmt::join(model_preset_names(), ", ")));
  }
  WF_LOG_DEBUG("planner", "workload {}: {} layers, hidden {}, heads {}/{}, seq {}, batch {}", w.model, w.layers,
               w.hidden, w.heads, w.kv_heads, w.seq, w.batch);
  return w;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : embedded_models())
    names.push_back(name);
  return names;
}

void validate(const Workload& workload, const std::string& source) {
  if (auto problem = find_problem(workload)) throw InputError(source, 0, problem->message);
}

namespace detail {
Workload workload_from_yaml(const YAML::Node& node, const std::string& source, bool all_fields) {
  WorkloadSource from;
  from.source = source;
  Workload w = read_fields(node, from, all_fields);
  complete_and_check(w, from, all_fields);
  return w;
}
}  // namespace detail

}  // namespace wallfacer
