#include <wallfacer/runtime/npy.hpp>

#include <fmt/format.h>

#include <bit>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/core/errors.hpp>

namespace wallfacer::runtime {

static_assert(std::endian::native == std::endian::little, ".npy I/O assumes a little-endian host");

const char* to_string(NpyDType dtype) {
  return dtype == NpyDType::Float32 ? "float32" : "float64";
}

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// A cursor over the Python dict literal of the header: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }
class DictParser {
 public:
  DictParser(const std::string& text, const std::string& source) : text_(text), source_(source) {}

  void parse(NpyHeader& header) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!peek('}')) {
      std::string key = quoted();
      expect(':');
      if (key == "descr") {
        header.dtype = dtype_of(quoted());
        have_descr = true;
      } else if (key == "fortran_order") {
        if (word() != "False") fail("Fortran-order arrays are not supported; save with C order");
        have_order = true;
      } else if (key == "shape") {
        header.shape = shape();
        have_shape = true;
      } else {
        fail(fmt::format("unexpected header key '{}'", key));
      }
      if (!peek('}')) expect(',');
    }
    if (!have_descr || !have_order || !have_shape) fail("header lacks 'descr', 'fortran_order' or 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(source_, 0, "bad .npy header: " + what); }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(fmt::format("expected '{}' at offset {}", c, pos_));
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string word() {
    skip_space();
    size_t start = pos_;
    while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  std::vector<int64_t> shape() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      std::string digits = word();
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
        fail("shape holds something other than non-negative integers");
      int64_t dim = 0;
      auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), dim);
      if (error != std::errc() || end != digits.data() + digits.size())
        fail(fmt::format("shape dimension {} is too large", digits));
      dims.push_back(dim);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }
  NpyDType dtype_of(const std::string& descr) const {
    if (descr == "<f4" || descr == "=f4") return NpyDType::Float32;
    if (descr == "<f8" || descr == "=f8") return NpyDType::Float64;
    if (descr == ">f4" || descr == ">f8") fail(fmt::format("big-endian dtype '{}' is not supported", descr));
    throw InputError(source_, 0,
                     fmt::format("dtype '{}' is not supported; expected float32 ('<f4') or float64 ('<f8')", descr));
  }

  const std::string& text_;
  const std::string& source_;
  size_t pos_ = 0;
};

// A header longer than this is not one numpy writes (it pads to 64 bytes); refused before reading.
constexpr size_t kMaxHeaderBytes = size_t{1} << 20;

// Reads the magic, the version, the length and the header dict: just enough to parse the header.
std::string read_header_bytes(std::ifstream& in, const std::string& path) {
  std::string bytes(12, '\0');
  in.read(bytes.data(), 12);
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (bytes.size() < kMagicLen + 4 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0) return bytes;
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = size_t(static_cast<unsigned char>(bytes[8])) | size_t(static_cast<unsigned char>(bytes[9])) << 8;
  size_t prefix = 10;
  if (major != 1 && bytes.size() >= 12) {
    header_len |= size_t(static_cast<unsigned char>(bytes[10])) << 16 | size_t(static_cast<unsigned char>(bytes[11]))
                                                                            << 24;
    prefix = 12;
  }
  if (header_len > kMaxHeaderBytes)
    throw InputError(path, 0,
                     fmt::format("bad .npy header: it claims {} bytes, more than the {} a header may take", header_len,
                                 kMaxHeaderBytes));
  const size_t have = bytes.size();
  bytes.resize(prefix + header_len);
  if (have < bytes.size()) {
    in.read(bytes.data() + have, static_cast<std::streamsize>(bytes.size() - have));
    bytes.resize(have + static_cast<size_t>(in.gcount()));
  }
  return bytes;
}

size_t element_bytes(NpyDType dtype) {
  return dtype == NpyDType::Float32 ? 4 : 8;
}

// Bytes the data of `header` takes, or SIZE_MAX when that does not fit in memory's address range:
// the header is checked against the file before anything that large is allocated.
size_t data_bytes(const NpyHeader& header) {
  size_t bytes = element_bytes(header.dtype);
  for (int64_t dim : header.shape) {
    if (dim != 0 && bytes > std::numeric_limits<size_t>::max() / size_t(dim)) return std::numeric_limits<size_t>::max();
    bytes *= size_t(dim);
  }
  return bytes;
}

}  // namespace

NpyHeader parse_npy_header(const std::string& bytes, const std::string& source) {
  if (bytes.size() < kMagicLen + 4 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    throw InputError(source, 0, "not a .npy file (bad magic string; expected \\x93NUMPY)");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = size_t(static_cast<unsigned char>(bytes[8])) | size_t(static_cast<unsigned char>(bytes[9])) << 8;
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw InputError(source, 0, "truncated .npy header");
    for (int i = 0; i < 4; ++i)
      header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    prefix = 12;
  } else {
    throw InputError(source, 0, fmt::format("unsupported .npy format version {}", major));
  }
  if (bytes.size() < prefix + header_len)
    throw InputError(
        source, 0, fmt::format("truncated .npy header ({} bytes, header says {})", bytes.size(), prefix + header_len));
  NpyHeader header;
  std::string dict = bytes.substr(prefix, header_len);
  DictParser(dict, source).parse(header);
  header.data_offset = prefix + header_len;
  return header;
}

Tensor<double> read_npy(const std::string& path, NpyDType* dtype) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path, 0, "is a directory, not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, "cannot open file (missing or unreadable)");
  const std::string head = read_header_bytes(in, path);
  NpyHeader header = parse_npy_header(head, path);
  if (dtype) *dtype = header.dtype;
  const size_t want = data_bytes(header);
  // The file's size, not its contents, is checked against the header: a header claiming
  // terabytes is refused before anything is allocated.
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) throw InputError(path, 0, fmt::format("cannot find the file's size: {}", ec.message()));
  const size_t have = file_size - header.data_offset;
  if (want == std::numeric_limits<size_t>::max())
    throw InputError(path, 0,
                     fmt::format("shape {} of {} is larger than any file can hold; wrong shape in the header?",
                                 shape_to_string(header.shape), to_string(header.dtype)));
  if (have < want)
    throw InputError(path, 0,
                     fmt::format("truncated: shape {} of {} needs {} data bytes, the file has {}",
                                 shape_to_string(header.shape), to_string(header.dtype), want, have));
  if (have > want)
    throw InputError(path, 0,
                     fmt::format("{} bytes after the data of shape {} ({}); wrong shape in the header?", have - want,
                                 shape_to_string(header.shape), to_string(header.dtype)));
  std::vector<char> data(want);
  in.read(data.data(), static_cast<std::streamsize>(want));
  if (static_cast<size_t>(in.gcount()) != want) throw InputError(path, 0, "read error (the file changed?)");
  Tensor<double> t(header.shape);
  const char* src = data.data();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (header.dtype == NpyDType::Float32) {
      float v;
      std::memcpy(&v, src + size_t(i) * 4, 4);
      t[i] = v;
    } else {
      std::memcpy(&t[i], src + size_t(i) * 8, 8);
    }
  }
  return t;
}

Tensor<double> read_npy_expecting(const std::string& path, const std::vector<int64_t>& expected_shape) {
  NpyDType dtype;
  Tensor<double> t = read_npy(path, &dtype);
  if (t.shape != expected_shape)
    throw InputError(path, 0,
                     fmt::format("shape {} ({}) but expected {}", shape_to_string(t.shape), to_string(dtype),
                                 shape_to_string(expected_shape)));
  return t;
}

namespace {

template <typename T>
void write_npy_impl(const std::string& path, const Tensor<T>& tensor) {
  // Python tuple syntax: "()", "(5,)", "(2, 3)".
  std::string dims;
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    dims += (i ? ", " : "") + std::to_string(tensor.shape[i]);
  if (tensor.shape.size() == 1) dims += ",";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", sizeof(T) == 4 ? "<f4" : "<f8", dims);
  // The magic, version and length (10 bytes) plus the padded dict end on a 64-byte boundary.
  size_t total = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict.push_back('\n');
  const uint16_t len = uint16_t(dict.size());
  const char prefix[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, char(len & 0xff), char(len >> 8)};
  write_file_atomically(path, [&](std::ostream& out) {
    out.write(prefix, sizeof prefix);
    out.write(dict.data(), std::streamsize(dict.size()));
    out.write(reinterpret_cast<const char*>(tensor.data.data()), std::streamsize(tensor.data.size() * sizeof(T)));
  });
}

}  // namespace

void write_npy(const std::string& path, const Tensor<float>& tensor) {
  write_npy_impl(path, tensor);
}
void write_npy(const std::string& path, const Tensor<double>& tensor) {
  write_npy_impl(path, tensor);
}

}  // namespace wallfacer::runtime
