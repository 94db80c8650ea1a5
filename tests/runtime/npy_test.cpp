// .npy I/O: round trips in both dtypes, files written byte by byte here (not by write_npy) to
// check the reader against the format itself, and every malformed-file error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/runtime/npy.hpp>

namespace wallfacer::runtime {
namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / "wallfacer_npy_test";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A version 1.0 file with `dict` as its header and `data` after it.
std::string npy_v1(std::string dict, const std::string& data) {
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes.push_back(char(dict.size() & 0xff));
  bytes.push_back(char(dict.size() >> 8));
  return bytes + dict + data;
}

std::string floats(std::initializer_list<float> values) {
  std::string s;
  for (float v : values)
    s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}

void expect_input_error(const std::string& path, const std::string& fragment) {
  try {
    read_npy(path);
    FAIL() << "expected an InputError containing '" << fragment << "'";
  } catch (const InputError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(Npy, RoundTripFloat32) {
  Tensor<float> t({2, 3, 4});
  for (int64_t i = 0; i < t.numel(); ++i)
    t[i] = float(i) * 0.25f - 1.5f;
  const std::string path = temp_path("f32.npy");
  write_npy(path, t);
  NpyDType dtype;
  Tensor<double> back = read_npy(path, &dtype);
  EXPECT_EQ(dtype, NpyDType::Float32);
  EXPECT_EQ(back.shape, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    EXPECT_EQ(back[i], double(t[i]));
}

TEST(Npy, RoundTripFloat64AndOneDimension) {
  Tensor<double> t({5});
  for (int64_t i = 0; i < 5; ++i)
    t[i] = 1.0 / double(i + 3);
  const std::string path = temp_path("f64.npy");
  write_npy(path, t);
  NpyDType dtype;
  Tensor<double> back = read_npy(path, &dtype);
  EXPECT_EQ(dtype, NpyDType::Float64);
  EXPECT_EQ(back.shape, std::vector<int64_t>{5});
  EXPECT_EQ(back.data, t.data);
}

TEST(Npy, HeaderOfWrittenFileFollowsTheFormat) {
  Tensor<float> t({2, 3});
  const std::string path = temp_path("header.npy");
  write_npy(path, t);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  size_t header_len = size_t(uint8_t(bytes[8])) | size_t(uint8_t(bytes[9])) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  std::string dict = bytes.substr(10, header_len);
  EXPECT_NE(dict.find("'descr': '<f4'"), std::string::npos) << dict;
  EXPECT_NE(dict.find("'shape': (2, 3)"), std::string::npos) << dict;
  EXPECT_EQ(dict.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 6 * 4);
}

TEST(Npy, ReadsHandWrittenFiles) {
  const std::string path = temp_path("hand.npy");
  write_bytes(path, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", floats({1.5f, -2.f, 4.f})));
  Tensor<double> t = read_npy(path);
  EXPECT_EQ(t.shape, std::vector<int64_t>{3});
  EXPECT_EQ(t.data, (std::vector<double>{1.5, -2.0, 4.0}));
  // Format 2.0 has a four-byte header length; key order does not matter.
  std::string dict = "{'shape': (1, 2), 'fortran_order': False, 'descr': '<f4'}";
  dict.append((64 - (12 + dict.size() + 1) % 64) % 64, ' ');
  dict.push_back('\n');
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i)
    v2.push_back(char((dict.size() >> (8 * i)) & 0xff));
  write_bytes(path, v2 + dict + floats({7.f, 8.f}));
  t = read_npy(path);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.data, (std::vector<double>{7.0, 8.0}));
}

TEST(Npy, MalformedFiles) {
  const std::string path = temp_path("bad.npy");
  write_bytes(path, "PK\x03\x04 this is a zip file, not npy");
  expect_input_error(path, "bad magic");
  write_bytes(path, npy_v1("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  expect_input_error(path, "'<i4'");
  write_bytes(path, npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  expect_input_error(path, "big-endian");
  write_bytes(path, npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')));
  expect_input_error(path, "Fortran");
  write_bytes(path, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", floats({1, 2, 3})));
  expect_input_error(path, "truncated");
  write_bytes(path, npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", floats({1, 2})));
  expect_input_error(path, "after the data");
  // Shapes far beyond the file are rejected before anything is allocated for them.
  write_bytes(path,
              npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 256, 99999999999, 8), }", floats({1, 2})));
  expect_input_error(path, "needs 819199999991808 data bytes, the file has 8");
  write_bytes(path,
              npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", floats({1, 2})));
  expect_input_error(path, "larger than any file can hold");
  write_bytes(path,
              npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", floats({1})));
  expect_input_error(path, "shape dimension 99999999999999999999 is too large");
  write_bytes(path, std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18));
  expect_input_error(path, "truncated .npy header");
  expect_input_error(temp_path("does_not_exist.npy"), "cannot open");
}

TEST(Npy, ShapeMismatchNamesBothShapes) {
  const std::string path = temp_path("shape.npy");
  write_npy(path, Tensor<float>({2, 8, 4}));
  try {
    read_npy_expecting(path, {2, 8, 4, 16});
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 8, 4]"), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 8, 4, 16]"), std::string::npos) << what;
  }
}

TEST(SeededInputs, DoNotDependOnWhatElseWasGenerated) {
  // Counter-based: element i is the same whether or not elements before it were generated.
  Tensor<double> a = seeded_tensor({4, 8}, 11, 3, true);
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_EQ(a[i], double(float(seeded_uniform(11, 3, uint64_t(i)))));
  EXPECT_NE(seeded_uniform(11, 3, 0), seeded_uniform(12, 3, 0));
  EXPECT_NE(seeded_uniform(11, 3, 0), seeded_uniform(11, 4, 0));
  double lo = 1, hi = -1;
  for (uint64_t i = 0; i < 10000; ++i) {
    double v = seeded_uniform(5, 1, i);
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);
}

}  // namespace
}  // namespace wallfacer::runtime
