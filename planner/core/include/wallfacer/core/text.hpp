// Small helpers for the words the tools print: a count with its noun in the right number, so that
// messages say "1 node" and "8 nodes" alike without each caller spelling the rule out.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace wallfacer {

// "1 node", "8 nodes" (regular plurals only: the noun takes an "s").
inline std::string counted(int64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

}  // namespace wallfacer
