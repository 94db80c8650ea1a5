#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
}

// Each key word is absorbed by adding it to the running state and mixing, so (seed, step, sample,
// stream) tuples that differ in any word start from unrelated states.
SampleRandom::SampleRandom(uint64_t seed, int64_t step, int64_t sample, uint64_t stream) {
  uint64_t h = splitmix64_mix(seed + kGolden);
  h = splitmix64_mix(h + static_cast<uint64_t>(step) + kGolden);
  h = splitmix64_mix(h + static_cast<uint64_t>(sample) + kGolden);
  h = splitmix64_mix(h + stream + kGolden);
  state_ = h;
}

uint64_t SampleRandom::next() {
  state_ += kGolden;
  return splitmix64_mix(state_);
}

uint64_t SampleRandom::below(uint64_t n) {
  const unsigned __int128 product = static_cast<unsigned __int128>(next()) * n;
  return static_cast<uint64_t>(product >> 64);
}

}  // namespace wallfacer::train
