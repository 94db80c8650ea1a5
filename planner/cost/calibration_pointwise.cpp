// The `pointwise:` section of a calibration file (calibration_pointwise.hpp).
#include "calibration_pointwise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>
#include <wallfacer/schedule/schedule.hpp>

#include "calibration_match.hpp"

namespace wallfacer::detail {
namespace {

// The memory-bound ops of the step program, by their names in reports (to_string(StepOp)).
constexpr StepOp kPointwiseOps[] = {StepOp::Embedding, StepOp::Norm,       StepOp::Rope,
                                    StepOp::Residual,  StepOp::Activation, StepOp::Loss,
                                    StepOp::Optimizer, StepOp::Fp8Cast,    StepOp::Fp8Scale};

StepOp parse_op(const std::string& source, const YAML::Node& node) {
  const std::string name = lower(yaml::as_string(source, node, "op"));
  std::string known;
  for (StepOp op : kPointwiseOps) {
    if (name == to_string(op)) return op;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", to_string(op));
  }
  yaml::fail(source, node, fmt::format("unknown pointwise op '{}' (one of {})", name, known));
}

bool parse_pass(const std::string& source, const YAML::Node& entry) {
  if (!entry["pass"].IsDefined()) return false;
  const std::string pass = lower(yaml::as_string(source, entry["pass"], "pass"));
  if (pass == "forward") return false;
  if (pass == "backward") return true;
  yaml::fail(source, entry["pass"], fmt::format("'pass' must be forward or backward, got '{}'", pass));
}

PointwisePoint parse_entry(const std::string& source, const YAML::Node& node) {
  yaml::check_keys(source, node, {"gpu", "dtype", "op", "pass", "bytes", "GBps", "source"}, "pointwise entry");
  PointwisePoint p;
  p.gpu = yaml::get_string(source, node, "gpu");
  if (p.gpu.empty()) yaml::fail(source, node["gpu"], "'gpu' must name a GPU model prefix such as H100");
  if (node["dtype"].IsDefined()) {
    try {
      p.dtype = parse_dtype(yaml::as_string(source, node["dtype"], "dtype"));
    } catch (const InputError& e) {
      yaml::fail(source, node["dtype"], e.message());
    }
  }
  if (!node["op"].IsDefined()) yaml::fail(source, node, "pointwise entry needs 'op'");
  p.op = parse_op(source, node["op"]);
  p.backward = parse_pass(source, node);
  p.bytes = yaml::get_int(source, node, "bytes");
  if (p.bytes <= 0) yaml::fail(source, node["bytes"], fmt::format("'bytes' must be positive, got {}", p.bytes));
  p.GBps = yaml::get_positive(source, node, "GBps");
  p.source = yaml::get_string(source, node, "source", source);
  return p;
}

}  // namespace

std::vector<PointwisePoint> parse_pointwise(const std::string& source, const YAML::Node& root) {
  std::vector<PointwisePoint> out;
  if (!root["pointwise"].IsDefined()) return out;
  yaml::expect_sequence(source, root["pointwise"], "pointwise");
  std::set<std::tuple<std::string, DType, StepOp, bool, int64_t>> seen;
  for (const YAML::Node& node : root["pointwise"]) {
    PointwisePoint p = parse_entry(source, node);
    if (!seen.insert({lower(p.gpu), p.dtype, p.op, p.backward, p.bytes}).second)
      yaml::fail(source, node,
                 fmt::format("duplicate pointwise entry for {} {} {} {} at {} bytes", p.gpu, to_string(p.dtype),
                             to_string(p.op), p.backward ? "backward" : "forward", p.bytes));
    out.push_back(std::move(p));
  }
  return out;
}

double pointwise_rate(const std::vector<PointwisePoint>& points, const std::string& gpu, DType dtype, StepOp op,
                      bool backward, int64_t bytes) {
  size_t best_prefix = 0;
  for (const PointwisePoint& p : points)
    if (p.dtype == dtype && p.op == op && p.backward == backward && gpu_matches(p.gpu, gpu))
      best_prefix = std::max(best_prefix, p.gpu.size());
  if (best_prefix == 0) return 0;
  std::vector<std::pair<int64_t, double>> curve;  // (bytes, GB/s)
  for (const PointwisePoint& p : points)
    if (p.dtype == dtype && p.op == op && p.backward == backward && p.gpu.size() == best_prefix &&
        gpu_matches(p.gpu, gpu))
      curve.emplace_back(p.bytes, p.GBps);
  std::sort(curve.begin(), curve.end());
  if (bytes <= curve.front().first) return curve.front().second;
  if (bytes >= curve.back().first) return curve.back().second;
  const auto upper = std::upper_bound(curve.begin(), curve.end(), std::pair{bytes, 0.0},
                                      [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto& [b1, r1] = *upper;
  const auto& [b0, r0] = *(upper - 1);
  const double w = (std::log2(double(bytes)) - std::log2(double(b0))) / (std::log2(double(b1)) - std::log2(double(b0)));
  return r0 + w * (r1 - r0);
}

}  // namespace wallfacer::detail
