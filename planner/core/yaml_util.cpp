#include <wallfacer/core/yaml_util.hpp>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/input_limits.hpp>

namespace wallfacer::yaml {

namespace {

// The readers look fields up by name, so a key that is itself a list or a mapping (`{}: 1`, valid
// YAML) can only be a mistake; rejected here once for every file instead of in each reader.
void check_plain_keys(const std::string& source, const YAML::Node& node) {
  if (node.IsSequence()) {
    for (const auto& item : node)
      check_plain_keys(source, item);
  } else if (node.IsMap()) {
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        fail(source, kv.first,
             fmt::format("a key must be a plain name, not {}", kv.first.IsMap()        ? "a mapping"
                                                               : kv.first.IsSequence() ? "a list"
                                                                                       : "empty"));
      check_plain_keys(source, kv.second);
    }
  }
}

// `size` is the file's size, or -1 for a stream that went past the limit while read.
InputError too_large(const std::string& path, int64_t size, int64_t limit) {
  const std::string what = size >= 0 ? fmt::format("{} bytes", size) : "a stream";
  return InputError(path, 0,
                    fmt::format("{} is larger than the input limit of {} MiB; set WALLFACER_MAX_INPUT_MIB to raise it",
                                what, limit >> 20));
}

}  // namespace

YAML::Node parse(const std::string& text, const std::string& source) {
  limits::expect_text(text, source);
  limits::check_yaml_shape(text, source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw InputError(source, e.mark.line + 1, "mappings and lists nest too deeply");
  } catch (const YAML::ParserException& e) {
    throw InputError(source, e.mark.line + 1, fmt::format("invalid YAML: {}", e.msg));
  }
  check_plain_keys(source, root);
  return root;
}

int line_of(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

void fail(const std::string& source, const YAML::Node& node, const std::string& message) {
  throw InputError(source, line_of(node), message);
}

void expect_map(const std::string& source, const YAML::Node& node, std::string_view what) {
  if (!node.IsMap()) fail(source, node, fmt::format("{} must be a mapping of keys to values", what));
}

void expect_sequence(const std::string& source, const YAML::Node& node, std::string_view what) {
  if (!node.IsSequence()) fail(source, node, fmt::format("{} must be a list", what));
}

void check_keys(const std::string& source, const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                std::string_view what) {
  expect_map(source, node, what);
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    bool known = false;
    for (auto a : allowed)
      known = known || a == key;
    if (known) continue;
    std::string list;
    for (auto a : allowed)
      list += (list.empty() ? "" : ", ") + std::string(a);
    fail(source, kv.first, fmt::format("unknown key '{}' in {} (allowed: {})", key, what, list));
  }
}

void require_keys(const std::string& source, const YAML::Node& node, std::initializer_list<std::string_view> required,
                  std::string_view what) {
  expect_map(source, node, what);
  std::vector<std::string> missing;
  for (std::string_view key : required) {
    const YAML::Node value = node[std::string(key)];
    if (!value.IsDefined() || value.IsNull()) missing.push_back(fmt::format("'{}'", key));
  }
  if (missing.size() == 1) fail(source, node, fmt::format("missing required field {}", missing.front()));
  if (missing.size() > 1)
    fail(source, node, fmt::format("missing required fields {} in {}", fmt::join(missing, ", "), what));
}

static YAML::Node required(const std::string& source, const YAML::Node& parent, const std::string& key) {
  if (!parent.IsMap()) fail(source, parent, fmt::format("expected a mapping holding '{}'", key));
  YAML::Node n = parent[key];
  if (!n.IsDefined() || n.IsNull()) fail(source, parent, fmt::format("missing required field '{}'", key));
  return n;
}

double as_double(const std::string& source, const YAML::Node& node, std::string_view what) {
  if (!node.IsScalar()) fail(source, node, fmt::format("'{}' must be a number", what));
  double v = 0;
  if (!YAML::convert<double>::decode(node, v) || !std::isfinite(v))
    fail(source, node, fmt::format("'{}' must be a number, got '{}'", what, node.Scalar()));
  return v;
}

int64_t as_int(const std::string& source, const YAML::Node& node, std::string_view what) {
  if (!node.IsScalar()) fail(source, node, fmt::format("'{}' must be an integer", what));
  int64_t v = 0;
  if (!YAML::convert<int64_t>::decode(node, v))
    fail(source, node, fmt::format("'{}' must be an integer, got '{}'", what, node.Scalar()));
  return v;
}

std::string as_string(const std::string& source, const YAML::Node& node, std::string_view what) {
  if (!node.IsScalar()) fail(source, node, fmt::format("'{}' must be a string", what));
  return node.Scalar();
}

std::string get_string(const std::string& source, const YAML::Node& parent, const std::string& key) {
  return as_string(source, required(source, parent, key), key);
}
double get_double(const std::string& source, const YAML::Node& parent, const std::string& key) {
  return as_double(source, required(source, parent, key), key);
}
int64_t get_int(const std::string& source, const YAML::Node& parent, const std::string& key) {
  return as_int(source, required(source, parent, key), key);
}
bool get_bool(const std::string& source, const YAML::Node& parent, const std::string& key) {
  YAML::Node n = required(source, parent, key);
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
    fail(source, n, fmt::format("'{}' must be true or false", key));
  return v;
}

std::string get_string(const std::string& source, const YAML::Node& parent, const std::string& key,
                       const std::string& fallback) {
  return parent[key].IsDefined() ? get_string(source, parent, key) : fallback;
}
double get_double(const std::string& source, const YAML::Node& parent, const std::string& key, double fallback) {
  return parent[key].IsDefined() ? get_double(source, parent, key) : fallback;
}
int64_t get_int(const std::string& source, const YAML::Node& parent, const std::string& key, int64_t fallback) {
  return parent[key].IsDefined() ? get_int(source, parent, key) : fallback;
}
bool get_bool(const std::string& source, const YAML::Node& parent, const std::string& key, bool fallback) {
  return parent[key].IsDefined() ? get_bool(source, parent, key) : fallback;
}

double get_positive(const std::string& source, const YAML::Node& parent, const std::string& key) {
  double v = get_double(source, parent, key);
  if (!(v > 0)) fail(source, parent[key], fmt::format("'{}' must be positive, got {}", key, v));
  return v;
}
double get_positive(const std::string& source, const YAML::Node& parent, const std::string& key, double fallback) {
  return parent[key].IsDefined() ? get_positive(source, parent, key) : fallback;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(status)) throw InputError(path, 0, "is a directory, not a file");
  const int64_t limit = limits::max_input_bytes();
  if (!ec && std::filesystem::is_regular_file(status)) {
    const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (!ec && size > limit) throw too_large(path, size, limit);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, "cannot open file");
  // Read in chunks so that a pipe or a device (no size to check up front) is bounded too.
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(text.size()) > limit) throw too_large(path, -1, limit);
  }
  if (in.bad()) throw InputError(path, 0, "read error");
  return text;
}

}  // namespace wallfacer::yaml
