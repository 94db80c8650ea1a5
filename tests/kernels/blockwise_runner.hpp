// Test driver: runs the blockwise kernels over a chosen blocking of the sequence (query blocks,
// key blocks in a chosen order, head ranges, tile sizes, token permutation) and returns the
// outputs in the reference layout, so tests can compare them with reference::attention.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <wallfacer/runtime/reference_attention.hpp>

namespace wallfacer::kernel_test {

struct Blocking {
  std::vector<int64_t> q_bounds = {};     // e.g. {0, 37, 300}: query blocks [0,37), [37,300)
  std::vector<int64_t> k_bounds = {};     // key blocks likewise
  std::vector<int> head_bounds = {};      // query head ranges, e.g. {0, 3, 8}; empty = all heads at once
  bool shuffle_key_blocks = false;        // visit key blocks in a random order per query block
  bool via_partials = false;              // one partial per key block, combined with merge_partial
  std::vector<int64_t> permutation = {};  // storage row r holds token permutation[r]; empty = identity
  int tile_q = 0, tile_k = 0;
  uint32_t seed = 1;
};

struct Inputs {
  reference::Shape shape;  // batch must be 1
  std::vector<double> q, k, v, dO;
};

Inputs random_inputs(const reference::Shape& shape, uint32_t seed, double q_scale = 1.0);

// Blockwise forward and backward in precision T (float or double), outputs converted to double.
template <typename T>
reference::Outputs run_blockwise(const Inputs& in, const Blocking& blocking);

// max |a - b| / max |b|: the error measure of the kernel tests.
double max_relative_error(const std::vector<double>& a, const std::vector<double>& b);

// Bounds 0 = b0 < b1 < ... < n with `count` blocks of random uneven sizes.
std::vector<int64_t> uneven_bounds(int64_t n, int count, uint32_t seed);

}  // namespace wallfacer::kernel_test
