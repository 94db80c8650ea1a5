#include <wallfacer/train/sample.hpp>

#include <wallfacer/core/hash_mix.hpp>

namespace wallfacer::train {

// Each key word is absorbed by adding it to the running state and mixing, so (seed, step, sample,
// stream) tuples that differ in any word start from unrelated states.
SampleRandom::SampleRandom(uint64_t seed, int64_t step, int64_t sample, uint64_t stream) {
  uint64_t h = splitmix64_mix(seed + kSplitmix64Golden);
  h = splitmix64_mix(h + static_cast<uint64_t>(step) + kSplitmix64Golden);
  h = splitmix64_mix(h + static_cast<uint64_t>(sample) + kSplitmix64Golden);
  h = splitmix64_mix(h + stream + kSplitmix64Golden);
  state_ = h;
}

uint64_t SampleRandom::next() {
  state_ += kSplitmix64Golden;
  return splitmix64_mix(state_);
}

uint64_t SampleRandom::below(uint64_t n) {
  const unsigned __int128 product = static_cast<unsigned __int128>(next()) * n;
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace wallfacer::train
