// The recall task, checked by parsing its samples as text: exactly `pairs` definitions and
// queries, distinct keys, every query's answer equal to its key's definition and at least
// min_distance after it, the loss mask on exactly the answer tokens, filler elsewhere; samples a
// pure function of (seed, step, sample); impossible specs refused naming the field.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <map>
#include <string>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/train/recall_task.hpp>

namespace wallfacer::train {
namespace {

struct Block {
  int64_t start;  // position of the mark
  std::string key, value;
};

struct Parsed {
  std::vector<Block> definitions, queries;
  std::vector<bool> in_block;
};

// Reads "#KEY:VALUE" and "?KEY:VALUE" blocks; ASSERTs that nothing else but filler is there.
Parsed parse(const std::vector<int32_t>& tokens, const RecallTaskSpec& spec) {
  Parsed p;
  p.in_block.assign(tokens.size(), false);
  const int64_t block = 2 + spec.key_len + spec.value_len;
  for (int64_t i = 0; i < static_cast<int64_t>(tokens.size()); ++i) {
    const int32_t t = tokens[i];
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
    if (t != '#' && t != '?') {
      EXPECT_TRUE(std::islower(t) || t == ' ') << "token " << t << " at " << i << " is neither filler nor a mark";
      continue;
    }
    EXPECT_LE(i + block, static_cast<int64_t>(tokens.size())) << "block cut off at " << i;
    if (i + block > static_cast<int64_t>(tokens.size())) break;
    Block b{i, "", ""};
    for (int64_t k = 0; k < spec.key_len; ++k)
      b.key.push_back(static_cast<char>(tokens[i + 1 + k]));
    EXPECT_EQ(tokens[i + 1 + spec.key_len], ':');
    for (int64_t k = 0; k < spec.value_len; ++k)
      b.value.push_back(static_cast<char>(tokens[i + 2 + spec.key_len + k]));
    for (char c : b.key)
      EXPECT_TRUE(std::isupper(c)) << b.key;
    for (char c : b.value)
      EXPECT_TRUE(std::isdigit(c)) << b.value;
    (t == '#' ? p.definitions : p.queries).push_back(b);
    for (int64_t k = 0; k < block; ++k)
      p.in_block[i + k] = true;
    i += block - 1;
  }
  return p;
}

void check_sample(const RecallTaskSpec& spec, uint64_t seed, int64_t step, int64_t sample) {
  SCOPED_TRACE(::testing::Message() << "seq_len " << spec.seq_len << " pairs " << spec.pairs << " min_distance "
                                    << spec.min_distance << " step " << step << " sample " << sample);
  const TrainingSample s = recall_sample(spec, seed, step, sample);
  ASSERT_EQ(s.tokens.size(), size_t(spec.seq_len + 1));
  ASSERT_EQ(s.loss_mask.size(), size_t(spec.seq_len));
  const Parsed p = parse(s.tokens, spec);
  // Without a curriculum one definition per key; with one, as many as recall_copies says.
  const int64_t copies = recall_copies(spec, step);
  ASSERT_EQ(p.definitions.size(), size_t(spec.pairs * copies));
  ASSERT_EQ(p.queries.size(), size_t(spec.pairs));
  std::map<std::string, std::vector<Block>> by_key;
  for (const Block& d : p.definitions)
    by_key[d.key].push_back(d);
  for (const auto& [key, list] : by_key) {
    EXPECT_EQ(list.size(), size_t(copies)) << "key " << key;
    for (const Block& d : list)
      EXPECT_EQ(d.value, list.front().value) << "key " << key << ": copies with other values";
  }
  // Filler only from the first filler_symbols symbols of "a..z ".
  const std::string alphabet = std::string("abcdefghijklmnopqrstuvwxyz ").substr(0, size_t(spec.filler_symbols));
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (!p.in_block[i]) EXPECT_NE(alphabet.find(char(s.tokens[i])), std::string::npos) << "filler at " << i;
  std::vector<uint8_t> expected_mask(spec.seq_len, 0);
  for (const Block& q : p.queries) {
    ASSERT_EQ(by_key.count(q.key), 1u) << "query of an undefined key " << q.key;
    for (const Block& d : by_key.at(q.key)) {
      EXPECT_EQ(q.value, d.value) << "key " << q.key;
      EXPECT_LT(d.start, q.start);
      // Answer token j at q.start + 2 + key_len + j copies the definition's token at d.start + 2 + key_len + j.
      EXPECT_GE(q.start - d.start, recall_min_distance(spec, step)) << "key " << q.key;
    }
    for (int64_t j = 0; j < spec.value_len; ++j)
      expected_mask[q.start + 1 + spec.key_len + j] = 1;
  }
  EXPECT_EQ(s.loss_mask, expected_mask);
  int64_t ones = 0;
  for (uint8_t m : s.loss_mask)
    ones += m;
  EXPECT_EQ(ones, recall_answer_tokens(spec));
  // The queries fill the end of the task (of the sequence without a length curriculum); every
  // definition precedes every query.
  EXPECT_EQ(p.queries.back().start + 2 + spec.key_len + spec.value_len, recall_task_len(spec, step) + 1);
  for (const Block& d : p.definitions)
    EXPECT_LT(d.start, p.queries.front().start);
}

TEST(RecallTask, SamplesHoldTheirKeysValuesAndMasks) {
  const std::vector<RecallTaskSpec> specs = {
      {.seq_len = 256},
      {.seq_len = 4096, .pairs = 8, .key_len = 4, .value_len = 4, .min_distance = 2048},
      {.seq_len = 1000, .pairs = 3, .key_len = 1, .value_len = 7, .min_distance = 900},
      {.seq_len = 511, .pairs = 26, .key_len = 1, .value_len = 1, .min_distance = 0},  // every letter a key
      {.seq_len = 19, .pairs = 1, .key_len = 4, .value_len = 4, .min_distance = 0},    // exactly one def + query
  };
  for (const auto& spec : specs)
    for (int64_t step = 0; step < 12; ++step)
      for (int64_t sample = 0; sample < 3; ++sample)
        check_sample(spec, 1234, step, sample);
  // Many pairs with a small key space: keys are drawn until distinct, in linear time.
  check_sample({.seq_len = 200000, .pairs = 9000, .key_len = 3, .value_len = 2, .min_distance = 10000}, 1, 0, 0);
}

// The curriculum's copies fall geometrically: round(C^(1 - s/S)) before step S, then 1.
TEST(RecallTask, CurriculumCopiesFallGeometricallyToOne) {
  const RecallTaskSpec spec{.seq_len = 2048,
                            .pairs = 2,
                            .key_len = 1,
                            .value_len = 1,
                            .min_distance = 1024,
                            .curriculum_copies = 64,
                            .curriculum_steps = 100};
  EXPECT_EQ(recall_copies(spec, 0), 64);
  EXPECT_EQ(recall_copies(spec, 25), 23);  // 64^0.75 = 22.6
  EXPECT_EQ(recall_copies(spec, 50), 8);   // 64^0.5
  EXPECT_EQ(recall_copies(spec, 99), 1);   // 64^0.01 = 1.04
  EXPECT_EQ(recall_copies(spec, 100), 1);
  EXPECT_EQ(recall_copies(spec, 5000), 1);
  EXPECT_EQ(recall_copies(RecallTaskSpec{.seq_len = 100, .curriculum_copies = 64}, 0), 1);  // no steps: none
  for (int64_t step : {0, 1, 25, 50, 99, 100, 140})
    for (int64_t sample = 0; sample < 3; ++sample)
      check_sample(spec, 99, step, sample);
  // The longest curriculum still fits: the minimal length counts every copy.
  RecallTaskSpec tight = spec;
  tight.seq_len = recall_min_seq_len(spec);
  check_sample(tight, 3, 0, 0);
  tight.seq_len -= 1;
  EXPECT_THROW(validate(tight), InputError);
}

TEST(RecallTask, FillerDrawsFromItsFirstSymbols) {
  for (int64_t symbols : {1, 2, 26, 27})
    for (int64_t step = 0; step < 4; ++step)
      check_sample(
          {.seq_len = 300, .pairs = 2, .key_len = 1, .value_len = 1, .min_distance = 100, .filler_symbols = symbols},
          11, step, 0);
  // One symbol: every filler position holds 'a'.
  const TrainingSample s =
      recall_sample({.seq_len = 64, .pairs = 1, .key_len = 1, .value_len = 1, .filler_symbols = 1}, 1, 0, 0);
  int64_t a = 0;
  for (int32_t t : s.tokens)
    a += t == 'a';
  EXPECT_EQ(a, 65 - 2 * 4);
}

// The length curriculum: the task spans round(L0 (seq_len / L0)^(s/S)) tokens at step s < S, its
// distance scaled alike; filler follows it; from step S on it is the plain task, sample for sample.
TEST(RecallTask, LengthCurriculumGrowsTheTaskGeometricallyToTheSequence) {
  const RecallTaskSpec spec{.seq_len = 2048,
                            .pairs = 1,
                            .key_len = 1,
                            .value_len = 1,
                            .min_distance = 1024,
                            .curriculum_steps = 100,
                            .curriculum_length = 64};
  EXPECT_EQ(recall_task_len(spec, 0), 64);
  EXPECT_EQ(recall_task_len(spec, 1), 66);    // 64 * 32^0.01 = 66.26
  EXPECT_EQ(recall_task_len(spec, 50), 362);  // 64 * 32^0.5 = 362.04
  EXPECT_EQ(recall_task_len(spec, 99), 1978);
  EXPECT_EQ(recall_task_len(spec, 100), 2048);
  EXPECT_EQ(recall_task_len(spec, 5000), 2048);
  EXPECT_EQ(recall_min_distance(spec, 0), 32);
  EXPECT_EQ(recall_min_distance(spec, 50), 181);  // 1024 * 362 / 2048
  EXPECT_EQ(recall_min_distance(spec, 100), 1024);
  for (int64_t step : {0, 1, 25, 50, 99, 100, 140})
    for (int64_t sample = 0; sample < 3; ++sample)
      check_sample(spec, 42, step, sample);
  // Every answer lies inside the window, nothing of the task after it.
  const TrainingSample early = recall_sample(spec, 42, 0, 0);
  for (size_t t = 64; t < early.loss_mask.size(); ++t)
    ASSERT_EQ(early.loss_mask[t], 0) << t;
  // After the curriculum, and with it switched off, the samples are the plain task's.
  RecallTaskSpec plain = spec;
  plain.curriculum_length = 0;
  for (int64_t step : {100, 101, 3000}) {
    EXPECT_EQ(recall_sample(spec, 7, step, 1).tokens, recall_sample(plain, 7, step, 1).tokens);
    EXPECT_EQ(recall_sample(spec, 7, step, 1).loss_mask, recall_sample(plain, 7, step, 1).loss_mask);
  }
  EXPECT_EQ(recall_task_len(plain, 0), 2048);
  RecallTaskSpec no_steps = spec;
  no_steps.curriculum_steps = 0;
  EXPECT_EQ(recall_task_len(no_steps, 0), 2048);
  // Copies and lengths together: every copy fits the first window.
  RecallTaskSpec both = spec;
  both.pairs = 4;
  both.curriculum_copies = 4;
  both.curriculum_length = 160;  // distance 80: needs 5 * 16 - 4 + 80 - 1 = 155
  for (int64_t step : {0, 10, 60, 100})
    check_sample(both, 5, step, 0);
}

TEST(RecallTask, LengthCurriculumMustHoldItsFirstWindow) {
  RecallTaskSpec spec{.seq_len = 512,
                      .pairs = 4,
                      .key_len = 1,
                      .value_len = 1,
                      .min_distance = 256,
                      .curriculum_steps = 10,
                      .curriculum_length = 600};
  EXPECT_THROW(validate(spec), InputError);  // longer than the sequence
  // 4 pairs of 4-token blocks with 8 copies: 9 * 16 - 4 + 32 - 1 = 171 tokens at min distance 32.
  spec.curriculum_copies = 8;
  spec.curriculum_length = 64;
  try {
    validate(spec);
    ADD_FAILURE() << "accepted a first window that cannot hold the copies";
  } catch (const InputError& e) {
    EXPECT_NE(e.message().find("'curriculum_length' is 64"), std::string::npos) << e.what();
  }
  spec.curriculum_length = 171;  // min distance 256 * 171 / 512 = 85: needs 9 * 16 - 4 + 85 - 1 = 224
  EXPECT_THROW(validate(spec), InputError);
  spec.curriculum_length = 224;  // distance 112: needs 251
  EXPECT_THROW(validate(spec), InputError);
  spec.curriculum_length = 280;  // distance 140: needs 279
  EXPECT_NO_THROW(validate(spec));
  check_sample(spec, 1, 0, 0);
}

TEST(RecallTask, MinimalSeqLenIsExact) {
  for (RecallTaskSpec spec : {RecallTaskSpec{.pairs = 8}, RecallTaskSpec{.pairs = 2, .min_distance = 500},
                              RecallTaskSpec{.pairs = 5, .key_len = 2, .value_len = 3, .min_distance = 7}}) {
    spec.seq_len = recall_min_seq_len(spec);
    for (int64_t step = 0; step < 20; ++step)
      check_sample(spec, 5, step, 0);
    spec.seq_len -= 1;
    EXPECT_THROW(validate(spec), InputError) << spec.seq_len;
  }
}

TEST(RecallTask, DeterministicInSeedStepAndSample) {
  const RecallTaskSpec spec{.seq_len = 2048, .min_distance = 1024};
  const TrainingSample a = recall_sample(spec, 7, 3, 2);
  EXPECT_EQ(recall_sample(spec, 7, 3, 2).tokens, a.tokens);
  EXPECT_EQ(recall_sample(spec, 7, 3, 2).loss_mask, a.loss_mask);
  EXPECT_NE(recall_sample(spec, 8, 3, 2).tokens, a.tokens);
  EXPECT_NE(recall_sample(spec, 7, 4, 2).tokens, a.tokens);
  EXPECT_NE(recall_sample(spec, 7, 3, 3).tokens, a.tokens);
}

// With no distance constraint the definitions use the whole space before the queries, so the
// distances vary from a few blocks to most of the sequence.
TEST(RecallTask, DefinitionsSpreadOverTheSequence) {
  const RecallTaskSpec spec{.seq_len = 4096};
  int64_t earliest = spec.seq_len, latest = 0;
  for (int64_t step = 0; step < 50; ++step) {
    const Parsed p = parse(recall_sample(spec, 1, step, 0).tokens, spec);
    for (const Block& d : p.definitions) {
      earliest = std::min(earliest, d.start);
      latest = std::max(latest, d.start);
    }
  }
  EXPECT_LT(earliest, 100);
  EXPECT_GT(latest, 3800);  // the first query starts at 4097 - 8 * 10 = 4017
}

// The answers are uniform digits independent of the rest: the best a model that cannot look back
// to the definitions does is their entropy, ln 10, which the empirical entropy approaches.
TEST(RecallTask, ChanceLossIsTheEntropyOfTheAnswers) {
  const RecallTaskSpec spec{.seq_len = 512};
  EXPECT_DOUBLE_EQ(recall_chance_loss(spec), std::log(10.0));
  std::map<int32_t, int64_t> counts;
  int64_t total = 0;
  for (int64_t step = 0; step < 400; ++step) {
    const TrainingSample s = recall_sample(spec, 99, step, 0);
    for (int64_t t = 0; t < spec.seq_len; ++t)
      if (s.loss_mask[t]) ++counts[s.tokens[t + 1]], ++total;
  }
  ASSERT_EQ(counts.size(), 10u);
  double entropy = 0;
  for (const auto& [token, n] : counts) {
    const double p = static_cast<double>(n) / total;
    entropy -= p * std::log(p);
  }
  EXPECT_NEAR(entropy, recall_chance_loss(spec), 0.005);
}

void expect_field_error(const RecallTaskSpec& spec, const std::string& field) {
  try {
    validate(spec);
    ADD_FAILURE() << "accepted a spec with a bad '" << field << "'";
  } catch (const InputError& e) {
    EXPECT_NE(e.message().find("'" + field + "'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(recall_sample(spec, 0, 0, 0), InputError);
}

TEST(RecallTask, ImpossibleSpecsNameTheirField) {
  expect_field_error({.seq_len = 0}, "seq_len");
  expect_field_error({.seq_len = 1000, .pairs = 0}, "pairs");
  expect_field_error({.seq_len = 1000, .key_len = 0}, "key_len");
  expect_field_error({.seq_len = 1000, .value_len = 0}, "value_len");
  expect_field_error({.seq_len = 1000, .min_distance = -1}, "min_distance");
  expect_field_error({.seq_len = 1000, .pairs = 27, .key_len = 1}, "pairs");  // 26 distinct one-letter keys
  expect_field_error({.seq_len = 100, .pairs = 8}, "seq_len");                // 8 pairs need 159
  expect_field_error({.seq_len = 1000, .pairs = 2, .min_distance = 995}, "seq_len");
  expect_field_error({.seq_len = 1000, .curriculum_length = -1}, "curriculum_length");
  try {
    validate({.seq_len = 100, .pairs = 8});
  } catch (const InputError& e) {
    EXPECT_NE(e.message().find("at least 159"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wallfacer::train
