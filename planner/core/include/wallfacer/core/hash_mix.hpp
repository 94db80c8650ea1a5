// The SplitMix64 finaliser, shared by every hash and seeded stream of the project: a bijection of
// 64-bit words whose outputs pass BigCrush, so one multiply-xor pass makes any word well mixed.
#pragma once

#include <cstdint>

namespace wallfacer {

constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// SplitMix64's increment, added to a state before mixing it.
inline constexpr uint64_t kSplitmix64Golden = 0x9e3779b97f4a7c15ULL;

}  // namespace wallfacer
