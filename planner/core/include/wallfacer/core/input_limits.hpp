// Limits every reader of user files applies before it parses or allocates: the size of a file,
// the nesting depth and alias expansion of a YAML document, and the check that a file is text.
// They turn hostile or accidental inputs (a 1 GB log passed as a topology, a "billion laughs"
// alias bomb, a binary file) into a clear InputError instead of a hang or an exhausted memory.
#pragma once

#include <cstdint>
#include <string>

namespace wallfacer::limits {

// Largest input file read (topology, plan, model, calibration, .npy header); the environment
// variable WALLFACER_MAX_INPUT_MIB overrides it.
constexpr int64_t kDefaultMaxInputBytes = int64_t{64} << 20;
// Deepest nesting of mappings and lists in a YAML input; real files nest fewer than 10 levels.
constexpr int kMaxYamlDepth = 64;
// Most nodes a YAML document may expand to once its aliases are followed: aliases share the
// node they name, but every reader walks them as copies.
constexpr int64_t kMaxYamlExpandedNodes = 2'000'000;

int64_t max_input_bytes();

// Throws InputError (naming `source`) when `text` holds a NUL byte or is not valid UTF-8.
void expect_text(const std::string& text, const std::string& source);

// Throws InputError (naming `source` and the line) when the YAML document in `text` nests deeper
// than kMaxYamlDepth or expands past kMaxYamlExpandedNodes. Scans the event stream only, so a
// bomb costs no more than its own length; syntax errors are left to the real parse.
void check_yaml_shape(const std::string& text, const std::string& source);

}  // namespace wallfacer::limits
