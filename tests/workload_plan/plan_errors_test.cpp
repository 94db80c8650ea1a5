// Malformed plan files: each edit of a valid file is rejected with the exact message, at the line
// of the edit (found in the edited text, independently of the reader).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <wallfacer/plan/plan.hpp>
#include "sample_plan.hpp"
#include "test_util.hpp"

namespace wallfacer {
namespace {

using testing::input_error_of;
using testing::line_of;

struct Edit {
  std::string from, to;  // replace the first `from` with `to`
  std::string message;   // without "p.yaml:LINE: error: "
  std::string at = "";   // text on the blamed line of the edited file; `to` when empty
};

std::string edited(std::string text, const Edit& edit) {
  const size_t at = text.find(edit.from);
  EXPECT_NE(at, std::string::npos) << edit.from;
  return at == std::string::npos ? text : text.replace(at, edit.from.size(), edit.to);
}

void expect_rejected(const Edit& edit) {
  SCOPED_TRACE(edit.from + " -> " + edit.to);
  const std::string text = edited(plan_to_yaml(testing::sample_plan()), edit);
  const int line = line_of(text, edit.at.empty() ? edit.to : edit.at);
  ASSERT_GT(line, 0);
  EXPECT_EQ(input_error_of([&] { parse_plan(text, "p.yaml"); }),
            fmt::format("p.yaml:{}: error: {}", line, edit.message));
}

// A plan holds only its strategy's knobs: another strategy's knob or placement is an error at its
// line, not dropped (earlier plans wrote every knob, at 1, which still reads).
TEST(PlanErrors, KnobsOfAnotherStrategy) {
  expect_rejected(
      {"  team: 2\n", "  team: 2\n  window: 3\n", "'window' does not apply to strategy wallfacer", "  window: 3"});
  expect_rejected({"placement: collect-intra", "placement: head-first",
                   "placement head-first does not apply to strategy wallfacer (collect-intra or p2p-intra)"});
  const std::string text = plan_to_yaml(testing::sample_plan());
  std::string old_form = text;
  old_form.replace(old_form.find("  team: 2\n"), 10, "  team: 2\n  ulysses: 1\n  ring: 1\n  window: 1\n");
  EXPECT_TRUE(parse_plan(old_form, "p.yaml") == testing::sample_plan());
}

TEST(PlanErrors, NewerFormatVersion) {
  expect_rejected({"format_version: 2", "format_version: 3",
                   "plan format_version 3 is newer than this wallfacer reads (2); use a newer wallfacer or make the "
                   "plan again"});
  expect_rejected({"format_version: 2", "format_version: 0", "unsupported plan format_version 0"});
}

TEST(PlanErrors, NewerVersionWinsOverUnknownKeys) {
  expect_rejected({"format_version: 2\n", "format_version: 7\nlayout: torus\n",
                   "plan format_version 7 is newer than this wallfacer reads (2); use a newer wallfacer or make the "
                   "plan again",
                   "format_version: 7"});
}

TEST(PlanErrors, Ranks) {
  expect_rejected({"{rank: 3,", "{rank: 2,", "rank 2 is listed twice", "{rank: 2, gpu: 3,"});
  expect_rejected(
      {"{rank: 3,", "{rank: 4,", "expected rank 3 here, got 4 (ranks are listed once each, in order 0, 1, ..., P-1)"});
  expect_rejected({"{rank: 3, gpu: 3,", "{rank: 3, gpu: 2,", "gpu 2 is used by rank 2 and rank 3"});
  expect_rejected({"{rank: 6, gpu: 6, node: 1,", "{rank: 6, gpu: 6, node: 2,",
                   "node 2 does not exist: the plan's topology has 2 nodes"});
  expect_rejected({"{rank: 1, gpu: 1,", "{rank: 1, gpu: -1,", "'gpu' must be at least 0, got -1"});
  expect_rejected({"nic: n1/nic1}", "nic: n1/nic1, gpus: 2}",
                   "unknown key 'gpus' in rank entry (allowed: rank, gpu, node, local_gpu, nic)"});
}

TEST(PlanErrors, UnknownNames) {
  expect_rejected(
      {"strategy: wallfacer", "strategy: wall-facer",
       "unknown strategy 'wall-facer' (ring, zigzag, ulysses, usp, double-ring, allgather, wallfacer, lss)"});
  expect_rejected({"placement: collect-intra", "placement: collect_intra",
                   "unknown placement 'collect_intra' (default, head-first, context-first, collect-intra, p2p-intra)"});
  expect_rejected({"kind: sub-ring", "kind: subring",
                   "unknown group kind 'subring' (ring, sub-ring, team, all-to-all, window, inter-window, sequence, "
                   "data, world, tensor, pipeline)"});
}

TEST(PlanErrors, UnknownKeys) {
  expect_rejected(
      {"strategy: wallfacer\n", "strategy: wallfacer\ncomment: hand edited\n",
       "unknown key 'comment' in plan (allowed: format_version, scope, topology, workload, strategy, params, "
       "ranks, groups, prediction)",
       "comment: hand edited"});
  expect_rejected({"nodes: 2}", "nodes: 2, gpus: 8}",
                   "unknown key 'gpus' in topology (allowed: name, hash, nodes, file)", "topology:"});
  expect_rejected({"  seq: 131072\n", "  seq: 131072\n  source: paper\n",
                   "unknown key 'source' in workload (allowed: model, layers, hidden, heads, kv_heads, head_dim, ffn, "
                   "vocab, gated_ffn, seq, batch, dtype, causal, zero_stage, checkpointing, grad_bucket_MiB, "
                   "fp8_linear, microbatches, grad_comm_dtype)",
                   "source: paper"});
  expect_rejected({"  mfu:", "  mfu_percent: 1\n  mfu:",
                   "unknown key 'mfu_percent' in prediction (allowed: forward_ms, backward_ms, step_ms, "
                   "p2p_bytes_forward, p2p_bytes_backward, collective_bytes_forward, collective_bytes_backward, "
                   "attention_ms, tokens_per_s, memory_GiB, mfu)",
                   "mfu_percent"});
}

TEST(PlanErrors, KeysThatAreNotNames) {
  // Valid YAML that yaml-cpp cannot turn into a key name: rejected where it stands, not an
  // internal error.
  expect_rejected({"{rank: 3, gpu: 3,", "{rank: 3, {}: 3,", "a key must be a plain name, not a mapping"});
  expect_rejected({"strategy: wallfacer\n", "strategy: wallfacer\n[a, b]: 1\n",
                   "a key must be a plain name, not a list", "[a, b]: 1"});
  expect_rejected({"  seq: 131072\n", "  seq: 131072\n  ~: 1\n", "a key must be a plain name, not empty", "  ~: 1"});
}

TEST(PlanErrors, MissingFields) {
  // A missing key is blamed on the first line of the mapping that should hold it.
  expect_rejected({"strategy: wallfacer\n", "", "missing required field 'strategy'", "format_version:"});
  expect_rejected({"  seq: 131072\n", "", "missing required field 'seq'", "  model:"});
  expect_rejected({"  data_parallel: 1\n", "", "missing required field 'data_parallel'", "  sequence_parallel:"});
  expect_rejected({", nic: n0/nic0}", "}", "missing required field 'nic'", "{rank: 0,"});
  expect_rejected({"  step_ms: 12345.678901234567\n", "", "missing required field 'step_ms'", "  forward_ms:"});
}

TEST(PlanErrors, Groups) {
  expect_rejected(
      {"ranks: [3, 1]", "ranks: [3, 8]", "group 'subring.g0.a1': rank 8 does not exist (the plan has ranks 0..7)"});
  expect_rejected({"ranks: [3, 1]", "ranks: [3, 3]", "group 'subring.g0.a1' lists rank 3 twice"});
  expect_rejected({"ranks: [3, 1]", "ranks: []", "group 'subring.g0.a1' has no ranks"});
  expect_rejected({"ranks: [0, 1, 2, 3, 4, 5, 6, 7]}", "ranks: [0, 1, 2, 3, 4, 5, 6, 7], all_reduce: star}",
                   "unknown all-reduce algorithm 'star' (ring, tree)"});
  const std::string text = plan_to_yaml(testing::sample_plan());
  expect_rejected({"name: team1,", "name: team0,",
                   fmt::format("group name 'team0' is used twice (first on line {})", line_of(text, "name: team0,")),
                   "name: team0, kind: team, ranks: [2, 3]"});
}

TEST(PlanErrors, ParamsAndWorkload) {
  expect_rejected({"  sequence_parallel: 8", "  sequence_parallel: 4",
                   "sequence_parallel * data_parallel = 4 * 1 = 4, but the plan lists 8 ranks"});
  expect_rejected({"  team: 2", "  team: 0", "'team' must be at least 1, got 0"});
  expect_rejected({"  kv_heads: 8", "  kv_heads: 5", "'heads' (32) must be a multiple of 'kv_heads' (5)"});
  expect_rejected({"  dtype: bf16", "  dtype: int8", "unknown dtype 'int8' (bf16, fp16, fp32)"});
  expect_rejected({"  step_ms: 12345.678901234567", "  step_ms: -1", "'step_ms' must not be negative, got -1"});
  expect_rejected({"nodes: 2}", "nodes: 0}", "'nodes' must be at least 1, got 0"});
  // Pipeline stages split a whole step's layers; the sample is one attention layer.
  expect_rejected({"  sequence_parallel: 8\n", "  sequence_parallel: 4\n  pipeline_parallel: 2\n",
                   "pipeline_parallel 2 needs a plan of the whole step (scope: step); one attention layer has no "
                   "layers to split into stages",
                   "  pipeline_parallel: 2"});
}

TEST(PlanErrors, NotAPlan) {
  EXPECT_EQ(input_error_of([] { parse_plan("- 1\n- 2\n", "p.yaml"); }),
            "p.yaml:1: error: a plan file must be a mapping of keys to values");
  EXPECT_EQ(input_error_of([] { parse_plan("strategy: ring\n", "p.yaml"); }),
            "p.yaml:1: error: missing required field 'format_version'");
}

}  // namespace
}  // namespace wallfacer
