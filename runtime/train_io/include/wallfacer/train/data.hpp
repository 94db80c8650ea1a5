// The byte-level dataset: any file is a sequence of tokens, one per byte (a vocabulary of 256). A
// training sample is a window of seq_len + 1 bytes starting at an offset drawn from
// (seed, step, sample) alone, never from the rank count or the history of the run, so the data of
// a run is the same on any number of ranks and after a resume (docs/training-data.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

class ByteDataset {
 public:
  // Maps the file read-only. InputError naming the file when it is missing, unreadable, not a
  // regular file, or empty.
  static ByteDataset open(const std::string& path);
  // A dataset over bytes held in memory (tests, generated text); `name` stands for the file in errors.
  static ByteDataset from_bytes(std::vector<uint8_t> bytes, const std::string& name);

  int64_t size_bytes() const;
  const std::string& path() const;
  // InputError naming the file when it is shorter than one sample of seq_len (seq_len + 1 bytes),
  // or when seq_len < 1. Call once before training to fail before the first step.
  void check_fits(int64_t seq_len) const;

  // Sample `sample` of global step `step`: seq_len + 1 tokens in [0, 256). Same checks as check_fits.
  std::vector<int32_t> sequence(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const;
  // The window's first byte, in [0, size_bytes() - seq_len - 1]: what sequence() reads from.
  int64_t window_offset(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const;
  // sequence() with a loss mask of all ones.
  TrainingSample training_sample(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const;

 private:
  struct Bytes;
  ByteDataset(std::shared_ptr<const Bytes> bytes, std::string path);
  std::shared_ptr<const Bytes> bytes_;
  std::string path_;
};

}  // namespace wallfacer::train
