// Training sources give the samples of their task or file unchanged; the data position reads back
// and refuses anything else; masked accuracy counts only the targets the mask selects.
#include <gtest/gtest.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/train/source.hpp>

namespace wallfacer::train {
namespace {

TEST(TrainingSource, RecallAndTextGiveTheirSamples) {
  const RecallTaskSpec spec{.seq_len = 300, .pairs = 2, .min_distance = 100};
  const TrainingSource recall = TrainingSource::recall(spec);
  EXPECT_TRUE(recall.is_recall());
  EXPECT_EQ(recall.seq_len(), 300);
  EXPECT_EQ(recall.sample(5, 6, 7).tokens, recall_sample(spec, 5, 6, 7).tokens);
  EXPECT_EQ(recall.chance_loss(), recall_chance_loss(spec));
  EXPECT_EQ(recall.describe(),
            "recall task: 2 pairs, keys of 4 letters, values of 4 digits, min distance 100, seq 300");
  EXPECT_THROW(TrainingSource::recall({.seq_len = 10}), InputError);
  RecallTaskSpec curriculum = spec;
  curriculum.curriculum_steps = 100;
  curriculum.curriculum_copies = 2;
  EXPECT_EQ(TrainingSource::recall(curriculum).describe(),
            "recall task: 2 pairs, keys of 4 letters, values of 4 digits, min distance 100, seq 300, curriculum 2 "
            "copies over 100 steps");
  curriculum.curriculum_length = 150;
  EXPECT_EQ(TrainingSource::recall(curriculum).describe(),
            "recall task: 2 pairs, keys of 4 letters, values of 4 digits, min distance 100, seq 300, curriculum 2 "
            "copies, lengths from 150 over 100 steps");
  curriculum.curriculum_copies = 1;
  EXPECT_EQ(TrainingSource::recall(curriculum).describe(),
            "recall task: 2 pairs, keys of 4 letters, values of 4 digits, min distance 100, seq 300, curriculum "
            "lengths from 150 over 100 steps");

  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 31);
  const ByteDataset data = ByteDataset::from_bytes(bytes, "corpus.txt");
  const TrainingSource text = TrainingSource::text(data, 128);
  EXPECT_FALSE(text.is_recall());
  EXPECT_EQ(text.chance_loss(), std::nullopt);
  EXPECT_EQ(text.sample(5, 6, 7).tokens, data.sequence(5, 6, 7, 128));
  EXPECT_EQ(text.sample(5, 6, 7).loss_mask, std::vector<uint8_t>(128, 1));
  EXPECT_EQ(text.describe(), "text: corpus.txt (1000 bytes), seq 128");
  EXPECT_THROW(TrainingSource::text(data, 1000), InputError);
}

TEST(DataPosition, ReadsBackAndRefusesOtherText) {
  const DataPosition p{.seed = 18446744073709551615ULL, .next_step = 1234};
  EXPECT_EQ(to_data_state(p), "seed=18446744073709551615 next_step=1234");
  const DataPosition back = parse_data_state(to_data_state(p), "ckpt");
  EXPECT_EQ(back.seed, p.seed);
  EXPECT_EQ(back.next_step, p.next_step);
  for (const char* bad : {"", "seed=1", "seed=1 next_step=", "seed=x next_step=2", "seed=1 next_step=2 extra",
                          "seed=1 next_step=-3", "step=5"}) {
    try {
      parse_data_state(bad, "run/step-5/rank-0.ckpt");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "run/step-5/rank-0.ckpt");
      EXPECT_NE(e.message().find("seed=<S> next_step=<N>"), std::string::npos) << e.what();
    }
  }
}

TEST(MaskedAccuracy, CountsOnlyMaskedTargets) {
  TrainingSample s;
  s.tokens = {1, 2, 3, 4, 5};
  s.loss_mask = {0, 1, 1, 0};                               // targets 3 and 4 count
  EXPECT_DOUBLE_EQ(masked_accuracy(s, {9, 3, 4, 9}), 1.0);  // the unmasked positions are wrong
  EXPECT_DOUBLE_EQ(masked_accuracy(s, {2, 3, 0, 5}), 0.5);
  EXPECT_DOUBLE_EQ(masked_accuracy(s, {2, 0, 0, 5}), 0.0);
  EXPECT_THROW(masked_accuracy(s, {1, 2}), std::invalid_argument);
  s.loss_mask = {0, 0, 0, 0};
  EXPECT_DOUBLE_EQ(masked_accuracy(s, {2, 3, 4, 5}), 0.0);
}

}  // namespace
}  // namespace wallfacer::train
