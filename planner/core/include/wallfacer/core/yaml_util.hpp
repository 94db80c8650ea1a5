// Helpers for reading YAML input files with precise errors: every failure names the file, the
// line of the offending node and what is wrong, and unknown keys are rejected (a typo must not
// silently fall back to a default). Internal to the planner's readers.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace wallfacer::yaml {

// Parses text; a syntax error becomes InputError with the line where the parser stopped.
YAML::Node parse(const std::string& text, const std::string& source);

// 1-based line of a node (0 when the node has no position, e.g. a missing key).
int line_of(const YAML::Node& node);

[[noreturn]] void fail(const std::string& source, const YAML::Node& node, const std::string& message);

// Throws when `node` is not a map, or has a key not in `allowed`.
void expect_map(const std::string& source, const YAML::Node& node, std::string_view what);
void check_keys(const std::string& source, const YAML::Node& node, std::initializer_list<std::string_view> allowed,
                std::string_view what);
void expect_sequence(const std::string& source, const YAML::Node& node, std::string_view what);
// Throws naming every key of `required` that map `node` lacks (at the map's line), so that a
// hand-written file is put right in one go rather than one field per run.
void require_keys(const std::string& source, const YAML::Node& node, std::initializer_list<std::string_view> required,
                  std::string_view what);

// Typed reads; `key` is looked up in map `parent`. Missing required keys name the parent's line.
std::string get_string(const std::string& source, const YAML::Node& parent, const std::string& key);
double get_double(const std::string& source, const YAML::Node& parent, const std::string& key);
int64_t get_int(const std::string& source, const YAML::Node& parent, const std::string& key);
bool get_bool(const std::string& source, const YAML::Node& parent, const std::string& key);
// Optional variants return `fallback` when the key is absent.
std::string get_string(const std::string& source, const YAML::Node& parent, const std::string& key,
                       const std::string& fallback);
double get_double(const std::string& source, const YAML::Node& parent, const std::string& key, double fallback);
int64_t get_int(const std::string& source, const YAML::Node& parent, const std::string& key, int64_t fallback);
bool get_bool(const std::string& source, const YAML::Node& parent, const std::string& key, bool fallback);
// Positive (> 0) numbers, with a message naming the field otherwise.
double get_positive(const std::string& source, const YAML::Node& parent, const std::string& key);
double get_positive(const std::string& source, const YAML::Node& parent, const std::string& key, double fallback);

// Conversions of a scalar node itself.
double as_double(const std::string& source, const YAML::Node& node, std::string_view what);
int64_t as_int(const std::string& source, const YAML::Node& node, std::string_view what);
std::string as_string(const std::string& source, const YAML::Node& node, std::string_view what);

// Reads a whole file; InputError when it cannot be opened.
std::string read_file(const std::string& path);

}  // namespace wallfacer::yaml
