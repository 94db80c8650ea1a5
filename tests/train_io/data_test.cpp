// The byte-level dataset: errors naming the file, windows equal to the file's bytes at the offset
// the documented rule gives (reimplemented here from docs/training-data.md), no hidden state (any
// order of calls, any split over ranks, gives the same samples), full range of offsets.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/train/data.hpp>

#include "train_io/temp_dir.hpp"

namespace wallfacer::train {
namespace {

using testing::TempDir;
using testing::write_bytes;

// docs/training-data.md, "Random numbers": SplitMix64 keyed by (seed, step, sample, stream).
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
uint64_t documented_first_draw(uint64_t seed, int64_t step, int64_t sample, uint64_t stream) {
  uint64_t h = mix(seed + kGamma);
  h = mix(h + static_cast<uint64_t>(step) + kGamma);
  h = mix(h + static_cast<uint64_t>(sample) + kGamma);
  h = mix(h + stream + kGamma);
  return mix(h + kGamma);
}
int64_t documented_offset(uint64_t seed, int64_t step, int64_t sample, int64_t size, int64_t seq_len) {
  const uint64_t draw = documented_first_draw(seed, step, sample, 0x62797465);  // "byte"
  return static_cast<int64_t>((static_cast<unsigned __int128>(draw) * static_cast<uint64_t>(size - seq_len)) >> 64);
}

std::string text_of(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i)
    s.push_back(static_cast<char>((i * 7919 + i / 13) % 256));
  return s;
}

// Runs `f`, which must throw an InputError naming `file` whose message contains `text`.
template <typename F>
void expect_input_error(F&& f, const std::string& file, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << file << " with '" << text << "'";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), file) << e.what();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
  }
}

TEST(ByteDataset, MissingEmptyDirectoryAndShortFilesNameTheFile) {
  TempDir dir;
  expect_input_error([&] { ByteDataset::open(dir.file("missing.txt")); }, dir.file("missing.txt"), "No such file");
  write_bytes(dir.file("empty.txt"), "");
  expect_input_error([&] { ByteDataset::open(dir.file("empty.txt")); }, dir.file("empty.txt"), "empty");
  expect_input_error([&] { ByteDataset::open(dir.str()); }, dir.str(), "not a regular file");

  write_bytes(dir.file("short.txt"), "0123456789");
  const ByteDataset data = ByteDataset::open(dir.file("short.txt"));
  EXPECT_EQ(data.size_bytes(), 10);
  EXPECT_NO_THROW(data.check_fits(9));  // 9 inputs + the last target = 10 bytes
  expect_input_error([&] { data.sequence(1, 0, 0, 10); }, dir.file("short.txt"),
                     "10 bytes, a sequence of 10 tokens needs 11");
  expect_input_error([&] { data.check_fits(10); }, dir.file("short.txt"), "shorter than one sample");
  EXPECT_THROW(data.check_fits(0), InputError);
}

TEST(ByteDataset, WindowsAreTheFileBytesAtTheDocumentedOffset) {
  TempDir dir;
  const std::string text = text_of(5000);
  write_bytes(dir.file("corpus.bin"), text);
  const ByteDataset data = ByteDataset::open(dir.file("corpus.bin"));
  const int64_t seq_len = 64;
  for (int64_t step = 0; step < 20; ++step) {
    for (int64_t sample = 0; sample < 4; ++sample) {
      const int64_t offset = documented_offset(42, step, sample, 5000, seq_len);
      ASSERT_EQ(data.window_offset(42, step, sample, seq_len), offset);
      const std::vector<int32_t> tokens = data.sequence(42, step, sample, seq_len);
      ASSERT_EQ(tokens.size(), size_t(seq_len + 1));
      for (int64_t i = 0; i <= seq_len; ++i) {
        ASSERT_EQ(tokens[i], static_cast<unsigned char>(text[offset + i]));
        ASSERT_GE(tokens[i], 0);
        ASSERT_LT(tokens[i], 256);
      }
    }
  }
}

TEST(ByteDataset, BytesAbove127AreTokensAbove127) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i)
    all[i] = static_cast<uint8_t>(i);
  const ByteDataset data = ByteDataset::from_bytes(all, "all-bytes");
  const std::vector<int32_t> tokens = data.sequence(7, 0, 0, 255);  // the only window: the whole file
  for (int i = 0; i < 256; ++i)
    EXPECT_EQ(tokens[i], i);
}

// What each rank reads must not depend on how many ranks there are or in which order samples
// are drawn: ranks of worlds of 1, 2, 3 and 8 read their share (round robin, reversed) and the
// union equals the single-rank run.
TEST(ByteDataset, SamplesDoNotDependOnRankCountOrCallOrder) {
  const std::string text = text_of(3000);
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  const int64_t steps = 6, samples = 8, seq_len = 100;
  std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> single;
  {
    const ByteDataset data = ByteDataset::from_bytes(bytes, "corpus");
    for (int64_t step = 0; step < steps; ++step)
      for (int64_t s = 0; s < samples; ++s)
        single[{step, s}] = data.sequence(9, step, s, seq_len);
  }
  for (int world : {2, 3, 8}) {
    std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> split;
    for (int rank = world - 1; rank >= 0; --rank) {
      const ByteDataset data = ByteDataset::from_bytes(bytes, "corpus");  // each rank opens its own
      for (int64_t step = steps - 1; step >= 0; --step)
        for (int64_t s = rank; s < samples; s += world)
          split[{step, s}] = data.sequence(9, step, s, seq_len);
    }
    EXPECT_EQ(split, single) << "world of " << world;
  }
  const ByteDataset data = ByteDataset::from_bytes(bytes, "corpus");
  EXPECT_NE(data.sequence(9, 0, 0, seq_len), data.sequence(10, 0, 0, seq_len)) << "the seed must matter";
  EXPECT_NE(data.sequence(9, 0, 0, seq_len), data.sequence(9, 1, 0, seq_len)) << "the step must matter";
  EXPECT_NE(data.sequence(9, 0, 0, seq_len), data.sequence(9, 0, 1, seq_len)) << "the sample must matter";
}

// Every offset from 0 to size - seq_len - 1 is drawn, none beyond, with roughly equal frequency.
TEST(ByteDataset, OffsetsCoverTheWholeFileUniformly) {
  const std::string text = text_of(40);
  const ByteDataset data = ByteDataset::from_bytes(std::vector<uint8_t>(text.begin(), text.end()), "small");
  const int64_t seq_len = 30, windows = 40 - seq_len;  // offsets 0..9
  std::vector<int> counts(windows, 0);
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) {
    const int64_t offset = data.window_offset(3, i, 0, seq_len);
    ASSERT_GE(offset, 0);
    ASSERT_LT(offset, windows);
    ++counts[offset];
  }
  for (int c : counts)
    EXPECT_NEAR(c, draws / windows, 250);  // ~5.3 standard deviations
  const ByteDataset exact = ByteDataset::from_bytes(std::vector<uint8_t>(31, 'x'), "exact");
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(exact.window_offset(3, i, 0, seq_len), 0);
}

TEST(ByteDataset, TrainingSampleCountsEveryTarget) {
  const ByteDataset data = ByteDataset::from_bytes(std::vector<uint8_t>(100, 'a'), "a");
  const TrainingSample s = data.training_sample(1, 2, 3, 50);
  EXPECT_EQ(s.tokens.size(), 51u);
  EXPECT_EQ(s.loss_mask, std::vector<uint8_t>(50, 1));
}

// The corpus shipped in data/text/: plain ASCII prose long enough for sequences of 8K tokens.
TEST(ByteDataset, TheShippedCorpusIsUsable) {
  const ByteDataset data = ByteDataset::open(std::string(WALLFACER_SOURCE_DIR) + "/data/text/long-sequences.txt");
  EXPECT_GT(data.size_bytes(), 8192);
  data.check_fits(8192);
  const std::vector<int32_t> tokens = data.sequence(1, 0, 0, 8192);
  for (int32_t t : tokens)
    EXPECT_TRUE(t == '\n' || (t >= 32 && t < 127)) << t;
}

}  // namespace
}  // namespace wallfacer::train
