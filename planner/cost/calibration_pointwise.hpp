// Internal to the calibration: the `pointwise:` section of a calibration file (measured rates of
// the whole-step program's memory-bound ops) and its lookup, kept apart from the attention and
// GEMM curves of calibration.cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include <wallfacer/cost/calibration.hpp>

namespace wallfacer::detail {

// `pointwise:` entries {gpu, dtype (fp32), op, pass (forward), bytes, GBps, source}; none repeats
// the GPU, dtype, op, pass and bytes of another. Throws InputError naming the file and line.
std::vector<PointwisePoint> parse_pointwise(const std::string& source, const YAML::Node& root);

// The rate of `bytes` among the points of the longest matching GPU prefix with this dtype, op and
// pass (linear in log2(bytes), clamped); 0 when none matches.
double pointwise_rate(const std::vector<PointwisePoint>& points, const std::string& gpu, DType dtype, StepOp op,
                      bool backward, int64_t bytes);

}  // namespace wallfacer::detail
