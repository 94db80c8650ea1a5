// Attention-kernel throughput table: sourced defaults, YAML overrides, and the lookup that
// interpolates in log2(block tokens). Where each default number comes from: docs/calibration.md.
#include <wallfacer/cost/calibration.hpp>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/yaml_util.hpp>

#include "calibration_match.hpp"
#include "calibration_pointwise.hpp"

namespace wallfacer {
namespace {

// Small-block throughput relative to the large-block figure. FlashAttention-2 spans 50-73 % of
// the A100 peak over its benchmark's sequence lengths (docs/hardware.md §5); we read the low end as the
// 512-token block and the high end as the 16K block (ratio 156/228), and halve the 512-token value
// again at 128 tokens, where a single 128-row tile per head leaves most SMs idle. Assumptions.
constexpr double kRatio512 = 156.0 / 228.0;
constexpr double kRatio128 = 0.5 * kRatio512;

struct Curve {
  const char* gpu;
  KernelOp op;
  double large_tflops;  // at 16,384 tokens
  const char* source;
};

CalibrationPoint point(const char* gpu, KernelOp op, DType dtype, bool causal, int64_t tokens, double tflops,
                       std::string source) {
  CalibrationPoint p;
  p.gpu = gpu;
  p.op = op;
  p.dtype = dtype;
  p.head_dim = 128;
  p.causal = causal;
  p.block_tokens = tokens;
  p.tflops = tflops;
  p.source = std::move(source);
  return p;
}

void add_curve(std::vector<CalibrationPoint>& points, const Curve& curve, DType dtype) {
  const std::pair<int64_t, double> shape[] = {{128, kRatio128}, {512, kRatio512}, {16384, 1.0}};
  for (auto [tokens, ratio] : shape)
    points.push_back(point(
        curve.gpu, curve.op, dtype, false, tokens, curve.large_tflops * ratio,
        tokens == 16384 ? curve.source
                        : fmt::format("{}; scaled by the assumed small-block ratio {:.3f}", curve.source, ratio)));
}

// FlashAttention-3 on H100 SXM5, BF16, head dim 128 (arXiv 2407.08608, Figure 5c without and 5d
// with the causal mask): forward TFLOP/s at 512 to 16K tokens. The backward scales each by the
// backward/forward ratio FlashAttention-3 measured at 8K in one run of hopper/benchmark_attn.py
// (Dao-AILab/flash-attention pull request 1791: 553.9 / 659.1 without the mask, 531.6 / 630.0 with
// it). At 128 tokens half the 512-token figure, as the other curves assume.
constexpr std::pair<int64_t, double> kFa3Forward[] = {{512, 467},  {1024, 565}, {2048, 625},
                                                      {4096, 638}, {8192, 646}, {16384, 648}};
constexpr std::pair<int64_t, double> kFa3CausalForward[] = {{512, 292},  {1024, 423}, {2048, 521},
                                                            {4096, 579}, {8192, 602}, {16384, 616}};
constexpr double kFa3BackwardRatio = 553.9 / 659.1, kFa3CausalBackwardRatio = 531.6 / 630.0;

void add_fa3_curves(std::vector<CalibrationPoint>& points, const char* gpu, const char* note) {
  for (bool causal : {false, true}) {
    const auto& forward = causal ? kFa3CausalForward : kFa3Forward;
    const double backward = causal ? kFa3CausalBackwardRatio : kFa3BackwardRatio;
    const std::string figure = fmt::format("FlashAttention-3 (arXiv 2407.08608) Fig. 5{} H100 forward, head dim 128{}",
                                           causal ? "d" : "c", note);
    for (KernelOp op : {KernelOp::AttnFwd, KernelOp::AttnBwd}) {
      const double scale = op == KernelOp::AttnFwd ? 1.0 : backward;
      const std::string how = op == KernelOp::AttnFwd ? figure
                                                      : fmt::format(
                                                            "{} x {:.3f}, FlashAttention-3's backward/forward at 8K "
                                                            "(Dao-AILab/flash-attention PR 1791)",
                                                            figure, backward);
      points.push_back(point(gpu, op, DType::BF16, causal, 128, 0.5 * forward[0].second * scale,
                             how + "; half the 512-token figure (assumption)"));
      for (auto [tokens, tflops] : forward)
        points.push_back(point(gpu, op, DType::BF16, causal, tokens, tflops * scale, how));
    }
  }
}

// FlashAttention-2 on A100 80GB, head dim 128, causal against full mask at the same sequence
// length, forward + backward (arXiv 2307.08691, Figure 4d over 4b: 133/173, 155/187, 173/196,
// 182/201, 189/203 from 1K to 16K). A causal diagonal block runs at the full-mask curve times that
// ratio in both directions; below 1K the 1K ratio (the 512-token full-mask bar is hidden in the
// figure: an assumption).
constexpr std::pair<int64_t, double> kFa2CausalRatio[] = {{128, 133.0 / 173},  {512, 133.0 / 173},  {1024, 133.0 / 173},
                                                          {2048, 155.0 / 187}, {4096, 173.0 / 196}, {8192, 182.0 / 201},
                                                          {16384, 189.0 / 203}};

void add_fa2_causal_curves(std::vector<CalibrationPoint>& points, const Curve& forward, const Curve& backward) {
  // The full-mask curve of add_curve at `tokens`: linear in log2(tokens) between its three points.
  auto full = [](const Curve& curve, int64_t tokens) {
    const double x = std::log2(double(tokens));
    const double share = x <= 9 ? kRatio128 + (kRatio512 - kRatio128) * (x - 7) / 2
                                : kRatio512 + (1.0 - kRatio512) * (std::min(x, 14.0) - 9) / 5;
    return curve.large_tflops * share;
  };
  for (const Curve* curve : {&forward, &backward}) {
    for (auto [tokens, ratio] : kFa2CausalRatio)
      points.push_back(point(curve->gpu, curve->op, DType::BF16, true, tokens, full(*curve, tokens) * ratio,
                             fmt::format("{} x {:.3f}, FlashAttention-2's causal/full ratio at {} tokens (arXiv "
                                         "2307.08691, Fig. 4d/4b)",
                                         curve->source, ratio, tokens)));
  }
}

using detail::gpu_matches;
using detail::lower;

bool is_16bit(DType d) {
  return d == DType::BF16 || d == DType::FP16;
}

KernelOp parse_op(const std::string& source, const YAML::Node& node) {
  const std::string name = lower(yaml::as_string(source, node, "op"));
  if (name == "forward" || name == "fwd" || name == "attn_fwd") return KernelOp::AttnFwd;
  if (name == "backward" || name == "bwd" || name == "attn_bwd") return KernelOp::AttnBwd;
  yaml::fail(source, node, fmt::format("unknown op '{}' (forward, backward)", name));
}

DType parse_point_dtype(const std::string& source, const YAML::Node& node) {
  const std::string name = yaml::as_string(source, node, "dtype");
  try {
    return parse_dtype(name);
  } catch (const InputError& e) {
    yaml::fail(source, node, e.message());
  }
}

CalibrationPoint parse_point(const std::string& source, const YAML::Node& node) {
  yaml::check_keys(source, node, {"gpu", "op", "dtype", "head_dim", "block_tokens", "tflops", "causal", "source"},
                   "calibration point");
  CalibrationPoint p;
  p.gpu = yaml::get_string(source, node, "gpu");
  if (p.gpu.empty()) yaml::fail(source, node["gpu"], "'gpu' must name a GPU model prefix such as H100");
  if (!node["op"].IsDefined()) yaml::fail(source, node, "missing required field 'op'");
  p.op = parse_op(source, node["op"]);
  p.dtype = node["dtype"].IsDefined() ? parse_point_dtype(source, node["dtype"]) : DType::BF16;
  const int64_t head_dim = yaml::get_int(source, node, "head_dim", 128);
  if (head_dim <= 0 || head_dim > 1024)
    yaml::fail(source, node["head_dim"], fmt::format("'head_dim' must be in 1..1024, got {}", head_dim));
  p.head_dim = int(head_dim);
  p.block_tokens = yaml::get_int(source, node, "block_tokens");
  if (p.block_tokens <= 0)
    yaml::fail(source, node["block_tokens"], fmt::format("'block_tokens' must be positive, got {}", p.block_tokens));
  p.tflops = yaml::get_positive(source, node, "tflops");
  p.causal = yaml::get_bool(source, node, "causal", false);
  p.source = yaml::get_string(source, node, "source", source);
  return p;
}

int64_t positive_side(const std::string& source, const YAML::Node& node, const char* key) {
  const int64_t v = yaml::get_int(source, node, key);
  if (v <= 0 || v > (int64_t{1} << 31))
    yaml::fail(source, node[key], fmt::format("'{}' must be in 1..2^31, got {}", key, v));
  return v;
}

// `gemm_shapes:` entries {gpu, dtype (fp32), m, n, k, tflops, source}; each GPU and dtype's
// entries must form a full grid without duplicates.
std::vector<GemmShapePoint> parse_gemm_shapes(const std::string& source, const YAML::Node& root) {
  std::vector<GemmShapePoint> out;
  if (!root["gemm_shapes"].IsDefined()) return out;
  yaml::expect_sequence(source, root["gemm_shapes"], "gemm_shapes");
  using Key = std::tuple<std::string, DType>;
  std::map<Key, std::set<std::tuple<int64_t, int64_t, int64_t>>> shapes;
  std::map<Key, std::array<std::set<int64_t>, 3>> sides;
  for (const YAML::Node& node : root["gemm_shapes"]) {
    yaml::check_keys(source, node, {"gpu", "dtype", "m", "n", "k", "tflops", "source"}, "gemm_shapes entry");
    GemmShapePoint g;
    g.gpu = yaml::get_string(source, node, "gpu");
    if (g.gpu.empty()) yaml::fail(source, node["gpu"], "'gpu' must name a GPU model prefix such as H100");
    g.dtype = node["dtype"].IsDefined() ? parse_point_dtype(source, node["dtype"]) : DType::FP32;
    g.m = positive_side(source, node, "m");
    g.n = positive_side(source, node, "n");
    g.k = positive_side(source, node, "k");
    g.tflops = yaml::get_positive(source, node, "tflops");
    g.source = yaml::get_string(source, node, "source", source);
    const Key key{lower(g.gpu), g.dtype};
    if (!shapes[key].insert({g.m, g.n, g.k}).second)
      yaml::fail(
          source, node,
          fmt::format("duplicate gemm_shapes entry for {} {} {}x{}x{}", g.gpu, to_string(g.dtype), g.m, g.n, g.k));
    sides[key][0].insert(g.m);
    sides[key][1].insert(g.n);
    sides[key][2].insert(g.k);
    out.push_back(std::move(g));
  }
  for (const auto& [key, s] : sides)
    if (shapes[key].size() != s[0].size() * s[1].size() * s[2].size())
      throw InputError(
          source, root["gemm_shapes"].Mark().line + 1,
          fmt::format("gemm_shapes of {} {} do not form a grid: {} shapes, expected {} ({} m x {} n x {} k "
                      "values)",
                      std::get<0>(key), to_string(std::get<1>(key)), shapes[key].size(),
                      s[0].size() * s[1].size() * s[2].size(), s[0].size(), s[1].size(), s[2].size()));
  return out;
}

// Where x falls among the sorted grid values: the lower index and the weight of the upper one
// (linear in log2, clamped at the ends).
std::pair<size_t, double> bracket(const std::vector<int64_t>& grid, int64_t x) {
  if (grid.size() == 1 || x <= grid.front()) return {0, 0.0};
  if (x >= grid.back()) return {grid.size() - 2, 1.0};
  size_t i = size_t(std::upper_bound(grid.begin(), grid.end(), x) - grid.begin()) - 1;
  const double l0 = std::log2(double(grid[i])), l1 = std::log2(double(grid[i + 1]));
  return {i, (std::log2(double(x)) - l0) / (l1 - l0)};
}

// `gemm:` or `hbm:` entries: {gpu, efficiency in (0, 1], source}.
std::vector<EfficiencyPoint> parse_efficiencies(const std::string& source, const YAML::Node& root, const char* key) {
  std::vector<EfficiencyPoint> out;
  if (!root[key].IsDefined()) return out;
  yaml::expect_sequence(source, root[key], key);
  for (const YAML::Node& node : root[key]) {
    yaml::check_keys(source, node, {"gpu", "efficiency", "source"}, fmt::format("{} entry", key));
    EfficiencyPoint e;
    e.gpu = yaml::get_string(source, node, "gpu");
    if (e.gpu.empty()) yaml::fail(source, node["gpu"], "'gpu' must name a GPU model prefix such as H100");
    e.efficiency = yaml::get_positive(source, node, "efficiency");
    if (e.efficiency > 1) yaml::fail(source, node["efficiency"], "'efficiency' must be in (0, 1]");
    e.source = yaml::get_string(source, node, "source", source);
    out.push_back(std::move(e));
  }
  return out;
}

// The longest prefix match among `list`, or nullptr.
const EfficiencyPoint* match(const std::vector<EfficiencyPoint>& list, const std::string& gpu) {
  const EfficiencyPoint* best = nullptr;
  for (const EfficiencyPoint& e : list)
    if (gpu_matches(e.gpu, gpu) && (!best || e.gpu.size() > best->gpu.size())) best = &e;
  return best;
}

// Key of one throughput curve: points that differ only in block size.
using CurveKey = std::tuple<std::string, KernelOp, DType, int, bool>;
CurveKey curve_key(const CalibrationPoint& p) {
  return {lower(p.gpu), p.op, p.dtype, p.head_dim, p.causal};
}

}  // namespace

Calibration Calibration::defaults() {
  // Large-block (16K tokens, head_dim 128, dense convention) figures; docs/calibration.md.
  static const Curve curves[] = {
      {"A100", KernelOp::AttnFwd, 228.0, "FlashAttention-2 (arXiv 2307.08691) A100 forward, 73% of 312 TF/s"},
      {"A100", KernelOp::AttnBwd, 197.0, "FlashAttention-2 (arXiv 2307.08691) A100 backward, 63% of 312 TF/s"},
      {"V100", KernelOp::AttnFwd, 62.5, "assumption: 50% of the 125 TF/s FP16 peak (no FlashAttention-2 on Volta)"},
      {"V100", KernelOp::AttnBwd, 54.0,
       "assumption: forward figure x 0.864, the FlashAttention-2 backward/forward ratio on A100"},
  };
  Calibration c;
  c.gemm_ = {
      {"A100", 0.87, "maximum achievable matmul FLOPS, bf16: 271.2 of 312 TF/s (stas00/ml-engineering, MAMF table)"},
      {"H100", 0.80, "maximum achievable matmul FLOPS, bf16: 794.5 of 989 TF/s (stas00/ml-engineering, MAMF table)"},
      {"H200", 0.80, "maximum achievable matmul FLOPS: the MAMF table gives H200 as H100 (794.5 of 989 TF/s)"},
  };
  c.gemm_fp8_ = {
      {"H100", 0.71, "maximum achievable matmul FLOPS, fp8: 1402.6 of 1979 TF/s (stas00/ml-engineering, MAMF table)"},
      {"H200", 0.73, "maximum achievable matmul FLOPS, fp8: 1453.4 of 1979 TF/s (stas00/ml-engineering, MAMF table)"},
  };
  c.hbm_ = {
      {"A100", 0.87, "device copy 1355 of 1555 GB/s on A100-40GB (docs/calibration.md)"},
      {"H100", 0.90, "fused memory-bound kernels at 3.0 of 3.35 TB/s on H100 (QuACK, docs/calibration.md)"},
      {"H200", 0.90, "assumption: the H100 share (no H200 measurement found)"},
  };
  for (const Curve& curve : curves) {
    if (std::string(curve.gpu) == "V100") {
      add_curve(c.points_, curve, DType::FP16);  // Volta has no BF16
    } else {
      add_curve(c.points_, curve, DType::BF16);
    }
  }
  add_fa2_causal_curves(c.points_, curves[0], curves[1]);
  add_fa3_curves(c.points_, "H100", "");
  add_fa3_curves(c.points_, "H200", "; the H100 figures, same GH100 compute (docs/hardware.md §1; assumption)");
  // Compute kernels ran on average 18.9 % longer while collectives ran beside them (Lee et al.,
  // arXiv 2507.03114: GPT and Llama layers on A100, H100, MI250 and MI210): 1 / 1.189 of the speed.
  c.comm_slowdown_ = 1 / 1.189;
  return c;
}

Calibration Calibration::parse(const std::string& yaml_text, const std::string& source) {
  const YAML::Node root = yaml::parse(yaml_text, source);
  if (!root.IsDefined() || root.IsNull()) throw InputError(source, 1, "empty calibration file");
  yaml::check_keys(source, root,
                   {"keep_defaults", "fallback_efficiency", "compute_slowdown_under_comm", "points", "gemm", "hbm",
                    "gemm_shapes", "pointwise"},
                   "calibration file");
  Calibration c;
  c.fallback_efficiency_ = yaml::get_positive(source, root, "fallback_efficiency", c.fallback_efficiency_);
  if (c.fallback_efficiency_ > 1)
    yaml::fail(source, root["fallback_efficiency"], "'fallback_efficiency' must be in (0, 1]");
  // A file that keeps the defaults keeps their slowdown unless it gives its own.
  const bool keeps_defaults = yaml::get_bool(source, root, "keep_defaults", true);
  c.comm_slowdown_ = yaml::get_positive(source, root, "compute_slowdown_under_comm",
                                        keeps_defaults ? defaults().comm_slowdown_ : c.comm_slowdown_);
  if (c.comm_slowdown_ > 1)
    yaml::fail(source, root["compute_slowdown_under_comm"], "'compute_slowdown_under_comm' must be in (0, 1]");

  std::vector<CalibrationPoint> file_points;
  std::set<std::tuple<CurveKey, int64_t>> seen;
  if (root["points"].IsDefined()) {
    const YAML::Node list = root["points"];
    yaml::expect_sequence(source, list, "points");
    for (const YAML::Node& node : list) {
      CalibrationPoint p = parse_point(source, node);
      if (!seen.insert({curve_key(p), p.block_tokens}).second)
        yaml::fail(source, node,
                   fmt::format("duplicate calibration point for {} {} {} head_dim {}{} at {} tokens", p.gpu,
                               p.op == KernelOp::AttnFwd ? "forward" : "backward", to_string(p.dtype), p.head_dim,
                               p.causal ? " causal" : "", p.block_tokens));
      file_points.push_back(std::move(p));
    }
  }

  const bool keep = keeps_defaults;
  c.gemm_shapes_ = parse_gemm_shapes(source, root);
  c.pointwise_ = detail::parse_pointwise(source, root);
  for (auto [key, list] : {std::pair{"gemm", &c.gemm_}, std::pair{"hbm", &c.hbm_}}) {
    std::vector<EfficiencyPoint> given = parse_efficiencies(source, root, key);
    if (keep)
      for (const EfficiencyPoint& d : key == std::string("gemm") ? defaults().gemm_ : defaults().hbm_)
        if (std::none_of(given.begin(), given.end(), [&](const auto& g) { return lower(g.gpu) == lower(d.gpu); }))
          given.push_back(d);
    *list = std::move(given);
  }
  // The fp8 GEMM ceilings have no file key; a file that keeps the defaults keeps them too.
  if (keep) c.gemm_fp8_ = defaults().gemm_fp8_;
  // A curve in the file replaces the default curve with the same GPU, op, dtype, head_dim and
  // mask. A file that calibrates a GPU's op at all also drops the defaults' causal curves of that
  // GPU and op: they describe the default kernel, so without causal points of its own the file's
  // kernel prices causal blocks on its ordinary curve.
  if (keep) {
    std::set<CurveKey> replaced;
    std::set<std::pair<std::string, KernelOp>> calibrated;
    for (const auto& p : file_points) {
      replaced.insert(curve_key(p));
      calibrated.insert({lower(p.gpu), p.op});
    }
    for (const auto& p : defaults().points_)
      if (!replaced.count(curve_key(p)) && !(p.causal && calibrated.count({lower(p.gpu), p.op})))
        c.points_.push_back(p);
  }
  for (auto& p : file_points)
    c.points_.push_back(std::move(p));
  return c;
}

double Calibration::gemm_efficiency(const std::string& gpu, int64_t m, int64_t n, int64_t k, bool* fallback,
                                    bool fp8) const {
  const EfficiencyPoint* ceiling = match(fp8 ? gemm_fp8_ : gemm_, gpu);
  if (fallback) *fallback = ceiling == nullptr;
  const double top = ceiling ? ceiling->efficiency : fallback_efficiency_;
  // Size curve, as a share of the ceiling, from the H100 square-GEMM sweep (docs/calibration.md):
  // 2*1024^3 FLOPs at 0.18 of peak, 2*2048^3 at 0.68, 2*4096^3 and above at the 0.80 ceiling.
  static constexpr std::pair<double, double> kSize[] = {{31.0, 0.18 / 0.80}, {34.0, 0.68 / 0.80}, {37.0, 1.0}};
  const double x = std::log2(std::max(1.0, 2.0 * double(m) * double(n) * double(k)));
  double share = kSize[0].second;
  if (x >= kSize[2].first) {
    share = 1.0;
  } else if (x > kSize[0].first) {
    const auto& [x0, y0] = x <= kSize[1].first ? kSize[0] : kSize[1];
    const auto& [x1, y1] = x <= kSize[1].first ? kSize[1] : kSize[2];
    share = y0 + (y1 - y0) * (x - x0) / (x1 - x0);
  } else {
    // Below the sweep's smallest size, throughput falls with the work (a fixed launch cost).
    share = kSize[0].second * std::exp2(x - kSize[0].first);
  }
  // An FFN width of 10922 instead of 10944 ran at 272.7 instead of 398.4 TF/s on H100.
  const double aligned = (n % 64 == 0 && k % 64 == 0) ? 1.0 : 272.7 / 398.4;
  return top * share * aligned;
}

bool Calibration::has_gemm_shapes(const std::string& gpu, DType dtype) const {
  return std::any_of(gemm_shapes_.begin(), gemm_shapes_.end(),
                     [&](const GemmShapePoint& g) { return g.dtype == dtype && gpu_matches(g.gpu, gpu); });
}

double Calibration::gemm_shape_tflops(const std::string& gpu, DType dtype, int64_t m, int64_t n, int64_t k) const {
  size_t best_prefix = 0;
  for (const GemmShapePoint& g : gemm_shapes_)
    if (g.dtype == dtype && gpu_matches(g.gpu, gpu)) best_prefix = std::max(best_prefix, g.gpu.size());
  if (best_prefix == 0) return 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> rate;
  std::array<std::set<int64_t>, 3> sides;
  for (const GemmShapePoint& g : gemm_shapes_) {
    if (g.dtype != dtype || g.gpu.size() != best_prefix || !gpu_matches(g.gpu, gpu)) continue;
    rate[{g.m, g.n, g.k}] = g.tflops;
    sides[0].insert(g.m);
    sides[1].insert(g.n);
    sides[2].insert(g.k);
  }
  const std::vector<int64_t> ms(sides[0].begin(), sides[0].end()), ns(sides[1].begin(), sides[1].end()),
      ks(sides[2].begin(), sides[2].end());
  const auto [im, wm] = bracket(ms, m);
  const auto [in, wn] = bracket(ns, n);
  const auto [ik, wk] = bracket(ks, k);
  auto at = [&](const std::vector<int64_t>& grid, size_t i, int upper) {
    return grid[std::min(i + upper, grid.size() - 1)];
  };
  double value = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) {
        const double weight = (a ? wm : 1 - wm) * (b ? wn : 1 - wn) * (c ? wk : 1 - wk);
        if (weight > 0) value += weight * rate.at({at(ms, im, a), at(ns, in, b), at(ks, ik, c)});
      }
  return value;
}

double Calibration::pointwise_GBps(const std::string& gpu, DType dtype, StepOp op, bool backward, int64_t bytes) const {
  return detail::pointwise_rate(pointwise_, gpu, dtype, op, backward, bytes);
}

bool Calibration::has_pointwise(const std::string& gpu, DType dtype) const {
  return std::any_of(pointwise_.begin(), pointwise_.end(),
                     [&](const PointwisePoint& p) { return p.dtype == dtype && gpu_matches(p.gpu, gpu); });
}

double Calibration::hbm_efficiency(const std::string& gpu, bool* fallback) const {
  const EfficiencyPoint* e = match(hbm_, gpu);
  if (fallback) *fallback = e == nullptr;
  return e ? e->efficiency : 0.8;
}

Calibration Calibration::load(const std::string& path) {
  return parse(yaml::read_file(path), path);
}

KernelCurve Calibration::curve(const std::string& gpu, KernelOp op, DType dtype, int head_dim, double peak_tflops,
                               bool causal) const {
  if (causal) {
    // Causal points of the best-matching GPU prefix, or the ordinary curve.
    const bool has_causal = std::any_of(points_.begin(), points_.end(), [&](const CalibrationPoint& p) {
      return p.causal && p.op == op && gpu_matches(p.gpu, gpu);
    });
    if (!has_causal) causal = false;
  }
  KernelCurve result;
  result.peak_tflops_ = peak_tflops;
  // Candidate points: the longest matching GPU prefix, the same op; the exact dtype, or the other
  // 16-bit type (same tensor-core rate on A100/H100); the nearest head_dim in log2.
  size_t best_prefix = 0;
  for (const auto& p : points_)
    if (p.op == op && p.causal == causal && gpu_matches(p.gpu, gpu)) best_prefix = std::max(best_prefix, p.gpu.size());
  auto usable = [&](const CalibrationPoint& p) {
    return p.op == op && p.causal == causal && p.gpu.size() == best_prefix && gpu_matches(p.gpu, gpu);
  };
  const CalibrationPoint* chosen_dtype = nullptr;
  for (const auto& p : points_) {
    if (!usable(p)) continue;
    if (p.dtype == dtype) {
      chosen_dtype = &p;
      break;
    }
    if (!chosen_dtype && is_16bit(p.dtype) && is_16bit(dtype)) chosen_dtype = &p;
  }
  if (!chosen_dtype) {
    result.points_.emplace_back(0.0, fallback_efficiency_ * peak_tflops);
    result.fallback_ = true;
    return result;
  }

  const DType use_dtype = chosen_dtype->dtype;
  double best_distance = std::numeric_limits<double>::infinity();
  int use_head_dim = 0;
  for (const auto& p : points_) {
    if (!usable(p) || p.dtype != use_dtype) continue;
    const double distance = std::abs(std::log2(double(p.head_dim)) - std::log2(double(std::max(head_dim, 1))));
    if (distance < best_distance || (distance == best_distance && p.head_dim < use_head_dim)) {
      best_distance = distance;
      use_head_dim = p.head_dim;
    }
  }
  for (const auto& p : points_)
    if (usable(p) && p.dtype == use_dtype && p.head_dim == use_head_dim)
      result.points_.emplace_back(std::log2(double(p.block_tokens)), p.tflops);
  std::sort(result.points_.begin(), result.points_.end());
  return result;
}

double KernelCurve::tflops(int64_t q_tokens, int64_t k_tokens) const {
  if (points_.empty()) return 0;
  // A q x k block sits on the curve at its geometric-mean side length.
  const double x =
      0.5 * (std::log2(double(std::max<int64_t>(q_tokens, 1))) + std::log2(double(std::max<int64_t>(k_tokens, 1))));
  double value = points_.front().second;
  if (x >= points_.back().first) {
    value = points_.back().second;
  } else if (x > points_.front().first) {
    for (size_t i = 1; i < points_.size(); ++i) {
      if (x > points_[i].first) continue;
      const auto [x0, y0] = points_[i - 1];
      const auto [x1, y1] = points_[i];
      value = x1 == x0 ? y1 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
      break;
    }
  }
  return peak_tflops_ > 0 ? std::min(value, peak_tflops_) : value;
}

double Calibration::tflops(const std::string& gpu, KernelOp op, DType dtype, int head_dim, int64_t q_tokens,
                           int64_t k_tokens, double peak_tflops) const {
  return curve(gpu, op, dtype, head_dim, peak_tflops).tflops(q_tokens, k_tokens);
}

}  // namespace wallfacer
