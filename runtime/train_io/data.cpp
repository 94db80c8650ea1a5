#include <wallfacer/train/data.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::train {

namespace {
constexpr uint64_t kByteWindowStream = 0x62797465;  // "byte": the stream of the window offset
}

// The bytes of a dataset: a read-only mapping of the file, or a vector for from_bytes.
struct ByteDataset::Bytes {
  const uint8_t* data = nullptr;
  int64_t size = 0;
  void* mapping = nullptr;
  std::vector<uint8_t> owned;

  Bytes() = default;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() {
    if (mapping != nullptr) ::munmap(mapping, static_cast<size_t>(size));
  }
};

ByteDataset::ByteDataset(std::shared_ptr<const Bytes> bytes, std::string path)
    : bytes_(std::move(bytes)), path_(std::move(path)) {}

ByteDataset ByteDataset::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, 0, fmt::format("cannot open the dataset: {}", std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw InputError(path, 0, fmt::format("cannot read the dataset: {}", std::strerror(error)));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw InputError(path, 0, "the dataset is not a regular file");
  }
  if (info.st_size == 0) {
    ::close(fd);
    throw InputError(path, 0, "the dataset is empty: byte-level training needs a file of text (any bytes)");
  }
  auto bytes = std::make_shared<Bytes>();
  bytes->size = static_cast<int64_t>(info.st_size);
  void* mapping = ::mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) throw InputError(path, 0, fmt::format("cannot map the dataset: {}", std::strerror(error)));
  bytes->mapping = mapping;
  bytes->data = static_cast<const uint8_t*>(mapping);
  return ByteDataset(std::move(bytes), path);
}

ByteDataset ByteDataset::from_bytes(std::vector<uint8_t> data, const std::string& name) {
  if (data.empty())
    throw InputError(name, 0, "the dataset is empty: byte-level training needs a file of text (any bytes)");
  auto bytes = std::make_shared<Bytes>();
  bytes->owned = std::move(data);
  bytes->data = bytes->owned.data();
  bytes->size = static_cast<int64_t>(bytes->owned.size());
  return ByteDataset(std::move(bytes), name);
}

int64_t ByteDataset::size_bytes() const {
  return bytes_->size;
}

const std::string& ByteDataset::path() const {
  return path_;
}

void ByteDataset::check_fits(int64_t seq_len) const {
  if (seq_len < 1) throw InputError(fmt::format("the sequence length must be at least 1 token, got {}", seq_len));
  if (bytes_->size < seq_len + 1)
    throw InputError(path_, 0,
                     fmt::format("the dataset is shorter than one sample: {} bytes, a sequence of {} tokens needs {} "
                                 "(seq_len + 1: inputs and the shifted targets)",
                                 bytes_->size, seq_len, seq_len + 1));
}

int64_t ByteDataset::window_offset(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const {
  check_fits(seq_len);
  const auto windows = static_cast<uint64_t>(bytes_->size - seq_len);  // offsets 0 .. size - seq_len - 1
  SampleRandom random(seed, step, sample, kByteWindowStream);
  return static_cast<int64_t>(random.below(windows));
}

std::vector<int32_t> ByteDataset::sequence(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const {
  const int64_t offset = window_offset(seed, step, sample, seq_len);
  const uint8_t* begin = bytes_->data + offset;
  return std::vector<int32_t>(begin, begin + seq_len + 1);
}

TrainingSample ByteDataset::training_sample(uint64_t seed, int64_t step, int64_t sample, int64_t seq_len) const {
  TrainingSample result;
  result.tokens = sequence(seed, step, sample, seq_len);
  result.loss_mask.assign(static_cast<size_t>(seq_len), 1);
  return result;
}

}  // namespace wallfacer::train
