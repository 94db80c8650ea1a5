// Model presets against the numbers of their sources, parameter counts against published totals,
// and CLI-style overrides.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <wallfacer/plan/workload.hpp>
#include "test_util.hpp"

namespace wallfacer {
namespace {

using testing::input_error_of;

struct Shape {
  std::string name;
  int layers, heads, kv_heads, head_dim;
  int64_t hidden, ffn, vocab;
  bool gated;
  int batch = 1;
  DType dtype = DType::BF16;
};

// Numbers from the sources each preset names (WallFacer's setups, Llama 2 / Llama 3 configs).
const Shape kShapes[] = {
    {"gpt-3b", 12, 16, 16, 256, 4096, 16384, 50257, false},
    {"gpt-30b", 64, 64, 64, 96, 6144, 24576, 50304, false},
    {"gpt-7b", 32, 32, 32, 128, 4096, 16384, 50257, false},
    {"llama-2-7b", 32, 32, 32, 128, 4096, 11008, 32000, true},
    {"llama-3-8b", 32, 32, 8, 128, 4096, 14336, 128256, true},
    {"llama-3-70b", 80, 64, 8, 128, 8192, 28672, 128256, true},
    {"llama-3-405b", 126, 128, 8, 128, 16384, 53248, 128256, true},
    // The CPU training preset (docs/training.md): byte vocabulary, fp32, two sequences per step.
    {"gpt-tiny", 2, 4, 2, 16, 64, 256, 256, true, 2, DType::FP32},
};

TEST(ModelPresets, MatchTheirSources) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const Workload w = load_workload(s.name);
    EXPECT_EQ(w.model, s.name);
    EXPECT_EQ(w.layers, s.layers);
    EXPECT_EQ(w.hidden, s.hidden);
    EXPECT_EQ(w.heads, s.heads);
    EXPECT_EQ(w.kv_heads, s.kv_heads);
    EXPECT_EQ(w.head_dim, s.head_dim);
    EXPECT_EQ(w.ffn, s.ffn);
    EXPECT_EQ(w.vocab, s.vocab);
    EXPECT_EQ(w.gated_ffn, s.gated);
    EXPECT_EQ(w.q_width(), s.hidden);
    EXPECT_EQ(w.kv_width(), int64_t(s.kv_heads) * s.head_dim);
    EXPECT_GE(w.seq, 1);
    EXPECT_EQ(w.batch, s.batch);
    EXPECT_EQ(w.dtype, s.dtype);
    EXPECT_TRUE(w.causal);
    EXPECT_NO_THROW(validate(w, s.name));
  }
}

TEST(ModelPresets, GptPresetsUseThePaperTrainingSetup) {
  for (const char* name : {"gpt-3b", "gpt-7b"}) {
    const Workload w = load_workload(name);
    EXPECT_EQ(w.zero_stage, 2) << name;  // WallFacer: Adam, ZeRO-2, batch 1, bf16
    EXPECT_EQ(w.seq, 65536) << name;     // 64K, one of the paper's lengths
  }
}

// Every file in models/ is embedded, every preset has a file, and each names its source.
TEST(ModelPresets, EveryFileIsAPresetWithASource) {
  const std::filesystem::path dir = std::filesystem::path(WALLFACER_SOURCE_DIR) / "models";
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    files.insert(entry.path().stem().string());
    const YAML::Node root = YAML::LoadFile(entry.path().string());
    EXPECT_TRUE(root["source"].IsScalar() && !root["source"].Scalar().empty()) << entry.path();
    EXPECT_EQ(root["model"].as<std::string>(), entry.path().stem().string());
  }
  const std::vector<std::string> names = model_preset_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), files);
  EXPECT_EQ(names.size(), std::size(kShapes));
}

TEST(ParameterCount, LlamaMatchesPublishedTotals) {
  // Totals of the released checkpoints (sum of tensor sizes): 6,738,415,616, 8,030,261,248 and
  // 70,553,706,496; the model cards round them to 7B/6.74e9, 8.03e9 and 70.6e9.
  EXPECT_EQ(load_workload("llama-2-7b").parameter_count(), 6738415616);
  EXPECT_EQ(load_workload("llama-3-8b").parameter_count(), 8030261248);
  EXPECT_EQ(load_workload("llama-3-70b").parameter_count(), 70553706496);
  // The published shapes (126 x 3,187,703,808 per layer, untied 128256 x 16384 embedding and head,
  // final norm) sum to 405,853,388,800: the "405B" of the model card.
  EXPECT_EQ(load_workload("llama-3-405b").parameter_count(), 405853388800);
  EXPECT_NEAR(double(load_workload("llama-2-7b").parameter_count()), 6.74e9, 0.005 * 6.74e9);
  EXPECT_NEAR(double(load_workload("llama-3-8b").parameter_count()), 8.03e9, 0.005 * 8.03e9);
}

TEST(ParameterCount, GptClosedForm) {
  // Per layer 4H^2 (attention) + 2*H*4H (GELU MLP) + 2H (norms); plus 2*V*H (untied embedding
  // and head) + H (final norm). H = 4096, V = 50257.
  // gpt-3b: 12 * (67,108,864 + 134,217,728 + 8,192) + 411,705,344 + 4,096
  EXPECT_EQ(load_workload("gpt-3b").parameter_count(), 2827726848);
  // gpt-7b: 32 * 201,334,784 + 411,705,344 + 4,096
  EXPECT_EQ(load_workload("gpt-7b").parameter_count(), 6854422528);
}

TEST(ParameterCount, AttentionPerLayerCountsGroupedKv) {
  // W_q and W_o: 4096 x 4096 each; W_k and W_v: 4096 x (8 * 128) each.
  EXPECT_EQ(load_workload("llama-3-8b").attention_parameters_per_layer(), 2 * 16777216 + 2 * 4194304);
  EXPECT_EQ(load_workload("llama-2-7b").attention_parameters_per_layer(), 4 * 16777216);
}

TEST(Overrides, TrainingShape) {
  WorkloadOverrides o;
  o.seq = 262144;
  o.batch = 4;
  o.dtype = "fp16";
  o.causal = false;
  o.zero_stage = 3;
  const Workload w = load_workload("llama-3-8b", o);
  EXPECT_EQ(w.seq, 262144);
  EXPECT_EQ(w.batch, 4);
  EXPECT_EQ(w.dtype, DType::FP16);
  EXPECT_FALSE(w.causal);
  EXPECT_EQ(w.zero_stage, 3);
  EXPECT_EQ(w.kv_heads, 8);  // architecture untouched
  EXPECT_EQ(w.model, "llama-3-8b");
}

TEST(Overrides, HeadsOnMultiHeadModelKeepItMultiHead) {
  WorkloadOverrides o;
  o.heads = 64;
  const Workload w = load_workload("gpt-7b", o);
  EXPECT_EQ(w.heads, 64);
  EXPECT_EQ(w.kv_heads, 64);
  EXPECT_EQ(w.head_dim, 64);  // 4096 / 64
  EXPECT_EQ(w.hidden, 4096);
}

TEST(Overrides, HeadsOnGqaModelKeepKvHeads) {
  WorkloadOverrides o;
  o.heads = 16;
  const Workload w = load_workload("llama-3-8b", o);
  EXPECT_EQ(w.kv_heads, 8);
  EXPECT_EQ(w.head_dim, 256);
}

TEST(Overrides, HeadDimRederivesHidden) {
  WorkloadOverrides o;
  o.head_dim = 64;
  const Workload w = load_workload("llama-3-8b", o);
  EXPECT_EQ(w.hidden, 32 * 64);
}

TEST(Overrides, HiddenRederivesHeadDim) {
  WorkloadOverrides o;
  o.hidden = 8192;
  o.layers = 4;
  o.ffn = 1000;
  o.vocab = 10;
  const Workload w = load_workload("llama-3-8b", o);
  EXPECT_EQ(w.head_dim, 256);
  EXPECT_EQ(w.layers, 4);
  EXPECT_EQ(w.ffn, 1000);
  EXPECT_EQ(w.vocab, 10);
}

TEST(Overrides, ErrorsNameTheFlag) {
  WorkloadOverrides kv;
  kv.kv_heads = 5;
  EXPECT_EQ(input_error_of([&] { load_workload("llama-3-8b", kv); }),
            "--kv-heads: error: 'heads' (32) must be a multiple of 'kv_heads' (5)");
  WorkloadOverrides seq;
  seq.seq = 0;
  EXPECT_EQ(input_error_of([&] { load_workload("llama-3-8b", seq); }), "--seq: error: 'seq' must be at least 1, got 0");
  WorkloadOverrides dtype;
  dtype.dtype = "fp8";
  EXPECT_EQ(input_error_of([&] { load_workload("llama-3-8b", dtype); }),
            "--dtype: error: unknown dtype 'fp8' (bf16, fp16, fp32)");
  WorkloadOverrides zero;
  zero.zero_stage = 4;
  EXPECT_EQ(input_error_of([&] { load_workload("gpt-3b", zero); }),
            "--zero-stage: error: 'zero_stage' must be 0, 1, 2 or 3, got 4");
  WorkloadOverrides dims;
  dims.hidden = 4096;
  dims.head_dim = 100;
  EXPECT_EQ(input_error_of([&] { load_workload("llama-3-8b", dims); }),
            "--hidden: error: 'hidden' (4096) must equal heads * head_dim (32 * 100 = 3200)");
}

TEST(LoadWorkload, UnknownModel) {
  EXPECT_EQ(input_error_of([] { load_workload("llama-9-1t"); }),
            "error: unknown model 'llama-9-1t': neither a preset (gpt-30b, gpt-3b, gpt-7b, gpt-tiny, llama-2-7b, "
            "llama-3-405b, "
            "llama-3-70b, llama-3-8b) nor a file");
}

TEST(LoadWorkload, FromFileWithOverride) {
  const std::filesystem::path path = testing::scratch_path("tiny-model.yaml");
  {
    std::ofstream out(path);
    out << "layers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nffn: 128\nvocab: 100\n";
  }
  WorkloadOverrides o;
  o.seq = 1024;  // the file has no seq; the flag supplies it
  const Workload w = load_workload(path.string(), o);
  std::filesystem::remove(path);
  EXPECT_EQ(w.model, "custom");
  EXPECT_EQ(w.head_dim, 16);
  EXPECT_EQ(w.kv_heads, 2);
  EXPECT_EQ(w.seq, 1024);
  EXPECT_TRUE(w.gated_ffn);
  EXPECT_EQ(w.zero_stage, 1);
}

// The model file example of docs/formats/workload.md gets the defaults the page promises.
TEST(LoadWorkload, DocumentedExample) {
  const std::string example = testing::yaml_block_of("docs/formats/workload.md");
  ASSERT_FALSE(example.empty());
  const Workload w = parse_workload(example, "workload.md");
  EXPECT_EQ(w.model, "tiny-gqa");
  EXPECT_EQ(w.head_dim, 64);
  EXPECT_EQ(w.kv_heads, 2);
  EXPECT_EQ(w.batch, 1);
  EXPECT_EQ(w.dtype, DType::BF16);
  EXPECT_TRUE(w.causal);
  EXPECT_TRUE(w.gated_ffn);
  EXPECT_EQ(w.zero_stage, 1);
}

TEST(DType, NamesAndSizes) {
  for (DType d : {DType::BF16, DType::FP16, DType::FP32})
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  EXPECT_STREQ(to_string(DType::BF16), "bf16");
  EXPECT_EQ(bytes_of(DType::BF16), 2);
  EXPECT_EQ(bytes_of(DType::FP16), 2);
  EXPECT_EQ(bytes_of(DType::FP32), 4);
  EXPECT_EQ(input_error_of([] { parse_dtype("float8"); }), "error: unknown dtype 'float8' (bf16, fp16, fp32)");
}

TEST(Validate, NamesTheSource) {
  Workload w = load_workload("llama-3-8b");
  w.kv_heads = 3;
  EXPECT_EQ(input_error_of([&] { validate(w, "my-model"); }),
            "my-model: error: 'heads' (32) must be a multiple of 'kv_heads' (3)");
  w.kv_heads = 8;
  w.batch = 0;
  EXPECT_EQ(input_error_of([&] { validate(w, "my-model"); }), "my-model: error: 'batch' must be at least 1, got 0");
}

}  // namespace
}  // namespace wallfacer
