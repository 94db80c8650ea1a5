// Malformed model files: each is rejected with a message naming the file, the line and the field.
#include <gtest/gtest.h>

#include <wallfacer/plan/workload.hpp>
#include "test_util.hpp"

namespace wallfacer {
namespace {

using testing::input_error_of;

struct BadModel {
  const char* what;
  const char* text;
  const char* message;
};

const BadModel kBadModels[] = {
    {"unknown key", "layers: 2\nhiden: 64\n",
     "m.yaml:2: error: unknown key 'hiden' in model file (allowed: model, description, source, layers, hidden, "
     "heads, kv_heads, head_dim, ffn, vocab, gated_ffn, seq, batch, dtype, causal, zero_stage, checkpointing, "
     "grad_bucket_MiB, fp8_linear, microbatches, grad_comm_dtype)"},
    {"zero heads", "layers: 2\nhidden: 64\nheads: 0\nkv_heads: 1\nhead_dim: 16\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:3: error: 'heads' must be at least 1, got 0"},
    {"heads not a multiple of kv_heads",
     "layers: 2\nhidden: 64\nheads: 4\nkv_heads: 3\nhead_dim: 16\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:4: error: 'heads' (4) must be a multiple of 'kv_heads' (3)"},
    {"hidden is not heads * head_dim",
     "layers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 32\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:2: error: 'hidden' (64) must equal heads * head_dim (4 * 32 = 128)"},
    {"unknown dtype", "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\ndtype: fp8\n",
     "m.yaml:7: error: unknown dtype 'fp8' (bf16, fp16, fp32)"},
    {"unknown grad_comm_dtype",
     "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\ngrad_comm_dtype: fp8\n",
     "m.yaml:7: error: unknown dtype 'fp8' (bf16, fp16, fp32)"},
    {"zero stage out of range", "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\nzero_stage: 4\n",
     "m.yaml:7: error: 'zero_stage' must be 0, 1, 2 or 3, got 4"},
    {"missing seq", "# no training shape\nlayers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\n",
     "m.yaml:2: error: missing required field 'seq'"},
    {"layers not a number", "layers: two\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:1: error: 'layers' must be an integer, got 'two'"},
    {"causal not a boolean", "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\ncausal: maybe\n",
     "m.yaml:7: error: 'causal' must be true or false"},
    {"not a mapping", "- layers\n- hidden\n", "m.yaml:1: error: model file must be a mapping of keys to values"},
    {"layers beyond int", "layers: 3000000000\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:1: error: 'layers' is out of range: 3000000000"},
    {"seq too long", "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 4294967296\n",
     "m.yaml:6: error: 'seq' must be at most 2147483647, got 4294967296"},
    {"hidden not divisible by heads", "layers: 2\nhidden: 100\nheads: 3\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:2: error: 'hidden' (100) is not a multiple of 'heads' (3); give 'head_dim'"},
    {"negative vocab", "layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: -5\nseq: 256\n",
     "m.yaml:5: error: 'vocab' must be at least 1, got -5"},
    {"hidden given as a list", "layers: 2\nhidden: [64]\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\n",
     "m.yaml:2: error: 'hidden' must be an integer"},
};

TEST(WorkloadErrors, ExactMessages) {
  for (const BadModel& bad : kBadModels) {
    SCOPED_TRACE(bad.what);
    EXPECT_EQ(input_error_of([&] { parse_workload(bad.text, "m.yaml"); }), bad.message);
  }
}

TEST(WorkloadErrors, YamlSyntaxErrorNamesTheLine) {
  const std::string message = input_error_of([] { parse_workload("layers: 2\nhidden: [64\nheads: 4\n", "m.yaml"); });
  EXPECT_EQ(message.rfind("m.yaml:", 0), 0u) << message;
  EXPECT_NE(message.find("error: invalid YAML"), std::string::npos) << message;
}

TEST(WorkloadErrors, MinimalFileGetsDefaults) {
  const Workload w = parse_workload("layers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\nseq: 256\n", "m.yaml");
  EXPECT_EQ(w.model, "custom");
  EXPECT_EQ(w.kv_heads, 4);
  EXPECT_EQ(w.head_dim, 16);
  EXPECT_EQ(w.batch, 1);
  EXPECT_EQ(w.dtype, DType::BF16);
  EXPECT_TRUE(w.causal);
  EXPECT_TRUE(w.gated_ffn);
  EXPECT_EQ(w.zero_stage, 1);
}

}  // namespace
}  // namespace wallfacer
