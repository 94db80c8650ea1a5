// Internal to the calibration: how an entry's `gpu` names a GPU model, shared by the curves and
// GEMM grids (calibration.cpp) and the pointwise rates (calibration_pointwise.cpp): a
// case-insensitive prefix of the topology's model name.
#pragma once

#include <cctype>
#include <string>

namespace wallfacer::detail {

inline std::string lower(std::string s) {
  for (char& c : s)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline bool gpu_matches(const std::string& prefix, const std::string& gpu) {
  return gpu.size() >= prefix.size() && lower(gpu.substr(0, prefix.size())) == lower(prefix);
}

}  // namespace wallfacer::detail
