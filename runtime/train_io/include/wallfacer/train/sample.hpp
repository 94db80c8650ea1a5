// One training sample as the training loop consumes it, whatever produced it (a byte-level text
// file or the synthetic recall task), and the counter-based random numbers that make every sample
// a pure function of (seed, step, sample): a run on 2 ranks and one on 64 read the same tokens, and
// a resumed run needs no generator state to continue the data where it stopped.
#pragma once

#include <cstdint>
#include <vector>

namespace wallfacer::train {

// tokens holds seq_len + 1 byte-level tokens in [0, 256): inputs are tokens[0, seq_len), targets
// tokens[1, seq_len]. loss_mask holds seq_len entries, 1 where the target tokens[t + 1] counts in the
// loss (every position for text, only the answers for the recall task).
struct TrainingSample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;
};

// Random numbers keyed by (seed, step, sample, stream) with no state carried between samples: the
// key is folded through SplitMix64 and each next() is one more SplitMix64 step (docs/training-data.md
// gives the exact rule, so other programs can reproduce the data).
class SampleRandom {
 public:
  SampleRandom(uint64_t seed, int64_t step, int64_t sample, uint64_t stream);
  uint64_t next();
  // Uniform in [0, n) for n >= 1 (the high half of a 128-bit product; the bias is below n / 2^64).
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

}  // namespace wallfacer::train
