#include <wallfacer/core/atomic_file.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <vector>

#include <wallfacer/core/errors.hpp>

namespace wallfacer {

namespace {

// An output buffer over a file descriptor that remembers the first failed write's errno, so the
// caller can say why (std::ofstream loses it).
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd), buffer_(1 << 16) { setp(buffer_.data(), buffer_.data() + buffer_.size()); }
  int error() const { return error_; }
  bool drain() {
    const char* p = pbase();
    while (p < pptr() && error_ == 0) {
      const ssize_t n = ::write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        error_ = n < 0 ? errno : EIO;
      else
        p += n;
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return error_ == 0;
  }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

[[noreturn]] void fail(const std::string& path, const char* step, int error) {
  throw InputError(path, 0, fmt::format("cannot write the file: {} failed: {}", step, std::strerror(error)));
}

// Runs `write` into `fd` and flushes; returns 0 or the errno of the first failure.
int fill(int fd, const std::function<void(std::ostream&)>& write) {
  FdBuf buf(fd);
  std::ostream out(&buf);
  write(out);
  out.flush();
  if (buf.error() != 0) return buf.error();
  return out ? 0 : EIO;
}

// The temporary file being written, for the signal handler: Ctrl-C or a kill during a write
// must not leave it behind. One at a time (writes are not concurrent in the commands).
char g_temp_path[4096];
volatile sig_atomic_t g_temp_active = 0;
struct sigaction g_previous[2];
constexpr int kSignals[2] = {SIGINT, SIGTERM};

void remove_temp_and_reraise(int signal) {
  if (g_temp_active) ::unlink(g_temp_path);  // async-signal-safe
  for (size_t i = 0; i < 2; ++i)
    if (kSignals[i] == signal) ::sigaction(signal, &g_previous[i], nullptr);
  ::raise(signal);
}

// Installs the handler once, keeping what was there to hand the signal on to.
void guard_signals() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = remove_temp_and_reraise;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < 2; ++i)
      ::sigaction(kSignals[i], &action, &g_previous[i]);
    return true;
  }();
  (void)installed;
}

// Marks `temp` as the file a signal must remove, for its lifetime.
class TempGuard {
 public:
  explicit TempGuard(const std::string& temp) {
    guard_signals();
    const size_t n = std::min(temp.size(), sizeof g_temp_path - 1);
    std::memcpy(g_temp_path, temp.data(), n);
    g_temp_path[n] = '\0';
    g_temp_active = 1;
  }
  ~TempGuard() { g_temp_active = 0; }
  TempGuard(const TempGuard&) = delete;
  TempGuard& operator=(const TempGuard&) = delete;
};

std::string temporary_name(const std::filesystem::path& target) {
  static std::atomic<int> counter{0};
  const std::string name =
      fmt::format(".{}.tmp-{}-{}", target.filename().string(), static_cast<long>(::getpid()), counter++);
  return (target.parent_path() / name).string();
}

void write_in_place(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) fail(path, "open", errno);
  const int error = fill(fd, write);
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (error != 0) fail(path, "write", error);
  if (closed != 0) fail(path, "close", closed);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(status)) throw InputError(path, 0, "is a directory, not a file");
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    return write_in_place(path, write);
  const std::string temp = temporary_name(std::filesystem::path(path));
  const TempGuard guard(temp);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) fail(path, "creating a file in its directory", errno);
  int error = 0;
  const char* step = "write";
  try {
    error = fill(fd, write);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno, step = "fsync";
  if (::close(fd) != 0 && error == 0) error = errno, step = "close";
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno, step = "rename";
  if (error != 0) {
    ::unlink(temp.c_str());
    fail(path, step, error);
  }
}

void check_file_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status target = fs::status(path, error);
  if (fs::exists(target) && !fs::is_regular_file(target)) return;
  const fs::path parent = fs::path(path).parent_path();
  const std::string directory = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(directory, error)) fail(path, "creating a file in its directory", ENOENT);
  if (::access(directory.c_str(), W_OK | X_OK) != 0) fail(path, "creating a file in its directory", errno);
}

}  // namespace wallfacer
