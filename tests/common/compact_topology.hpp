// A two-node topology file small enough to quote whole in tests of topology parsing and input
// limits, and a helper that edits it. Line numbers in those tests refer to this text.
#pragma once

#include <stdexcept>
#include <string>

namespace wallfacer::test {

inline constexpr const char* kCompactTopology = R"(name: tiny
gpu: {model: X, peak_bf16_tflops: 100, peak_fp16_tflops: 100, memory_GiB: 16, hbm_GBps: 1000}
nodes: 2
node:
  gpus: 2
  pcie:
    bandwidth_GBps: 16
    latency_us: 0.5
    switches:
      - {gpus: [0, 1], nics: [0]}
  nics: {count: 1, rate_Gbps: 100}
network: {type: single_switch, link_latency_us: 1}
)";

// `text` with its first `from` replaced by `to`; a test whose text lacks `from` is itself wrong.
inline std::string edit(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos) throw std::logic_error("test text lacks: " + from);
  return text.replace(at, from.size(), to);
}

}  // namespace wallfacer::test
