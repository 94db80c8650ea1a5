// Writing and committing checkpoints, the `latest` pointer, and the fault injection of tests.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include <wallfacer/core/atomic_file.hpp>
#include <wallfacer/train/checkpoint.hpp>

#include "checkpoint_format.hpp"

namespace fs = std::filesystem;

namespace wallfacer::train {

namespace {

std::mutex g_fault_mutex;
std::optional<CheckpointFault> g_fault;

CheckpointFault parse_fault_env(const char* text) {
  CheckpointFault fault;
  std::stringstream items(text);
  std::string item;
  const auto bad = [&](const std::string& why) {
    return InputError(
        fmt::format("WALLFACER_CHECKPOINT_FAULT='{}': {} (expected "
                    "after-bytes=N[,mode=kill|throw][,step=S][,rank=R])",
                    text, why));
  };
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw bad(fmt::format("'{}' has no '='", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      if (key == "after-bytes") {
        fault.after_bytes = std::stoll(value);
      } else if (key == "step") {
        fault.only_step = std::stoll(value);
      } else if (key == "rank") {
        fault.only_rank = std::stoi(value);
      } else if (key == "mode" && (value == "kill" || value == "throw")) {
        fault.mode = value == "kill" ? CheckpointFault::Mode::Kill : CheckpointFault::Mode::Throw;
      } else {
        throw bad(fmt::format("unknown setting '{}'", item));
      }
    } catch (const std::logic_error&) {  // stoll/stoi: not a number
      throw bad(fmt::format("'{}' is not a number", value));
    }
  }
  if (fault.after_bytes < 0) throw bad("after-bytes is missing or negative");
  return fault;
}

// The fault armed for this file, if any: set_checkpoint_fault first, else the environment.
std::optional<CheckpointFault> fault_for(int64_t step, int rank) {
  std::optional<CheckpointFault> fault;
  {
    const std::lock_guard lock(g_fault_mutex);
    fault = g_fault;
  }
  if (!fault) {
    if (const char* env = std::getenv("WALLFACER_CHECKPOINT_FAULT"); env != nullptr && *env != '\0')
      fault = parse_fault_env(env);
  }
  if (!fault || fault->after_bytes < 0) return std::nullopt;
  if (fault->only_step >= 0 && fault->only_step != step) return std::nullopt;
  if (fault->only_rank >= 0 && fault->only_rank != rank) return std::nullopt;
  return fault;
}

// Writes to the stream, counting bytes, and fires the armed fault once `after_bytes` are out.
class SectionWriter {
 public:
  SectionWriter(std::ostream& out, std::optional<CheckpointFault> fault) : out_(out), fault_(fault) {}

  void write(const void* data, size_t size) {
    if (size == 0) return;  // empty vectors may have no storage at all
    const char* p = static_cast<const char*>(data);
    if (fault_) {
      const auto room = static_cast<uint64_t>(fault_->after_bytes) - written_;
      if (size >= room) {
        out_.write(p, static_cast<std::streamsize>(room));
        written_ += room;
        fire();
      }
    }
    out_.write(p, static_cast<std::streamsize>(size));
    written_ += size;
  }

  void section(const char kind[4], uint64_t length, uint32_t crc) {
    format::SectionHeader header;
    std::memcpy(header.kind, kind, 4);
    header.length = length;
    header.payload_crc = crc;
    char bytes[format::kSectionHeaderBytes];
    format::encode(header, bytes);
    write(bytes, sizeof bytes);
  }

  void string_section(const char kind[4], const std::string& text) {
    section(kind, text.size(), format::crc32_update(0, text.data(), text.size()));
    write(text.data(), text.size());
  }

 private:
  [[noreturn]] void fire() {
    out_.flush();  // what was written reaches the temporary file, as in a crash mid-write
    if (fault_->mode == CheckpointFault::Mode::Kill) ::raise(SIGKILL);
    throw std::runtime_error(fmt::format("checkpoint fault injection: stopped after {} bytes", written_));
  }

  std::ostream& out_;
  std::optional<CheckpointFault> fault_;
  uint64_t written_ = 0;
};

uint64_t tensor_payload_bytes(const NamedTensor& t) {
  return 4 + t.name.size() + 8 + 4 * t.values.size();
}

uint32_t tensor_crc(const NamedTensor& t) {
  char prefix[4];
  format::put(prefix, static_cast<uint32_t>(t.name.size()));
  uint32_t crc = format::crc32_update(0, prefix, 4);
  crc = format::crc32_update(crc, t.name.data(), t.name.size());
  char count[8];
  format::put(count, static_cast<uint64_t>(t.values.size()));
  crc = format::crc32_update(crc, count, 8);
  return format::crc32_update(crc, t.values.data(), 4 * t.values.size());
}

void write_tensor(SectionWriter& writer, const NamedTensor& t) {
  writer.section(format::kTensorKind, tensor_payload_bytes(t), tensor_crc(t));
  char prefix[4];
  format::put(prefix, static_cast<uint32_t>(t.name.size()));
  writer.write(prefix, 4);
  writer.write(t.name.data(), t.name.size());
  char count[8];
  format::put(count, static_cast<uint64_t>(t.values.size()));
  writer.write(count, 8);
  writer.write(t.values.data(), 4 * t.values.size());
}

void check_state(const CheckpointState& state) {
  if (state.world_size < 1 || state.rank < 0 || state.rank >= state.world_size)
    throw std::invalid_argument(
        fmt::format("checkpoint of rank {} in a world of {} ranks", state.rank, state.world_size));
  if (state.step < 0) throw std::invalid_argument(fmt::format("checkpoint of step {}", state.step));
  std::set<std::string> names;
  for (const auto& t : state.tensors)
    if (!names.insert(t.name).second) throw std::invalid_argument(fmt::format("checkpoint tensor '{}' twice", t.name));
}

void write_state(std::ostream& out, const CheckpointState& state, std::optional<CheckpointFault> fault) {
  format::FileHeader header;
  header.version = kCheckpointVersion;
  header.section_count = static_cast<uint32_t>(4 + state.tensors.size());
  header.step = state.step;
  header.rank = state.rank;
  header.world_size = state.world_size;
  header.section_bytes = 4 * format::kSectionHeaderBytes + state.plan_hash.size() + 8 * state.rng_state.size() +
                         state.data_state.size() + state.meta_json.size();
  for (const auto& t : state.tensors)
    header.section_bytes += format::kSectionHeaderBytes + tensor_payload_bytes(t);
  char bytes[format::kFileHeaderBytes];
  format::encode(header, bytes);

  SectionWriter writer(out, fault);
  writer.write(bytes, sizeof bytes);
  writer.string_section(format::kPlanKind, state.plan_hash);
  const size_t rng_bytes = 8 * state.rng_state.size();
  writer.section(format::kRngKind, rng_bytes, format::crc32_update(0, state.rng_state.data(), rng_bytes));
  writer.write(state.rng_state.data(), rng_bytes);
  writer.string_section(format::kDataKind, state.data_state);
  writer.string_section(format::kMetaKind, state.meta_json);
  for (const auto& t : state.tensors)
    write_tensor(writer, t);
}

void ensure_directory(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (!fs::is_directory(path))
    throw InputError(path, 0,
                     fmt::format("cannot create the checkpoint directory: {}", ec ? ec.message() : "not a directory"));
}

// Makes the renames inside `path` durable (a rename is only on disk once its directory is).
void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw InputError(path, 0, fmt::format("cannot open the directory to sync it: {}", std::strerror(errno)));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0 && error != EINVAL && error != EROFS)  // some filesystems cannot sync directories
    throw InputError(path, 0, fmt::format("fsync of the directory failed: {}", std::strerror(error)));
}

// Temporary files that killed writers left in a step directory (".rank-<r>.ckpt.tmp-<pid>-<n>",
// the names write_file_atomically uses). Only called once every rank has finished writing.
void remove_stray_temporaries(const std::string& step_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(step_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".rank-", 0) == 0 && name.find(".ckpt.tmp-") != std::string::npos) {
      std::error_code ignored;  // a file that cannot be removed is harmless: nothing reads it
      fs::remove(entry.path(), ignored);
    }
  }
}

}  // namespace

CheckpointError::CheckpointError(const std::string& file, CheckpointProblem problem, const std::string& message)
    : InputError(file, 0, "checkpoint: " + message), problem_(problem) {}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("step-{}", step)).string();
}

std::string checkpoint_file(const std::string& dir, int64_t step, int rank) {
  return (fs::path(checkpoint_step_dir(dir, step)) / fmt::format("rank-{}.ckpt", rank)).string();
}

void set_checkpoint_fault(const CheckpointFault& fault) {
  const std::lock_guard lock(g_fault_mutex);
  g_fault = fault;
}

void clear_checkpoint_fault() {
  const std::lock_guard lock(g_fault_mutex);
  g_fault.reset();
}

void write_checkpoint(const std::string& dir, const CheckpointState& state) {
  check_state(state);
  const std::string step_dir = checkpoint_step_dir(dir, state.step);
  ensure_directory(step_dir);
  const auto fault = fault_for(state.step, state.rank);
  write_file_atomically(checkpoint_file(dir, state.step, state.rank),
                        [&](std::ostream& out) { write_state(out, state, fault); });
  fsync_directory(step_dir);
}

void commit_checkpoint(const std::string& dir, int64_t step, int world_size) {
  for (int rank = 0; rank < world_size; ++rank)
    verify_checkpoint_header(dir, step, rank, world_size);
  remove_stray_temporaries(checkpoint_step_dir(dir, step));
  fsync_directory(checkpoint_step_dir(dir, step));
  write_file_atomically((fs::path(dir) / "latest").string(), [&](std::ostream& out) { out << step << '\n'; });
  fsync_directory(dir);
}

std::optional<int64_t> latest_checkpoint(const std::string& dir) {
  const std::string path = (fs::path(dir) / "latest").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw CheckpointError(path, CheckpointProblem::Missing, "cannot read 'latest'");
  std::string digits = text;
  if (!digits.empty() && digits.back() == '\n') digits.pop_back();
  const bool numeric =
      !digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos;
  if (!numeric)
    throw CheckpointError(
        path, CheckpointProblem::Malformed,
        fmt::format("'latest' should hold a step number and a newline, found '{}'", text.substr(0, 40)));
  return std::stoll(digits);
}

std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    steps.push_back(std::stoll(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void remove_checkpoint_step(const std::string& dir, int64_t step) {
  if (latest_checkpoint(dir) == step)
    throw std::invalid_argument(fmt::format("step {} is the latest checkpoint of {}", step, dir));
  std::error_code ec;
  fs::remove_all(checkpoint_step_dir(dir, step), ec);
  if (ec) throw InputError(checkpoint_step_dir(dir, step), 0, fmt::format("cannot remove: {}", ec.message()));
}

}  // namespace wallfacer::train
