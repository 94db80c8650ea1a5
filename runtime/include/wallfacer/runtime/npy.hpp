// NumPy .npy files (format versions 1.0-3.0): float32 and float64 arrays in C order, the exchange
// format of `wallfacer run --load/--save`. Every error names the file and says what was expected:
// a bad magic string, an unsupported dtype or byte order, Fortran order, a shape other than the
// one required, or a file shorter (or longer) than its header promises.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <wallfacer/runtime/tensor.hpp>

namespace wallfacer::runtime {

enum class NpyDType { Float32, Float64 };
const char* to_string(NpyDType dtype);  // "float32", "float64"

struct NpyHeader {
  NpyDType dtype = NpyDType::Float32;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // bytes from the start of the file to the first value
};

// Parses the header at the start of `bytes` (the whole file or at least its header). `source`
// names the file in errors. Throws InputError.
NpyHeader parse_npy_header(const std::string& bytes, const std::string& source);

// Reads a float32 or float64 array; values are widened to double (exactly). Throws InputError.
Tensor<double> read_npy(const std::string& path, NpyDType* dtype = nullptr);
// As read_npy, and checks the shape: "q.npy: error: shape [2, 64, 4] but expected [2, 64, 4, 16]".
Tensor<double> read_npy_expecting(const std::string& path, const std::vector<int64_t>& expected_shape);

// Writes a little-endian C-order array (format 1.0). Throws InputError when the file cannot be written.
void write_npy(const std::string& path, const Tensor<float>& tensor);
void write_npy(const std::string& path, const Tensor<double>& tensor);

}  // namespace wallfacer::runtime
