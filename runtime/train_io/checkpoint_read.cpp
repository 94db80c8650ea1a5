// Reading and verifying checkpoint files: every field is checked before it is trusted, and each
// problem is a CheckpointError naming the file, the section and what was found.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include <wallfacer/train/checkpoint.hpp>

#include "checkpoint_format.hpp"

namespace wallfacer::train {

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// A checkpoint file open for reading, with the position and size needed to report truncation.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {
    file_.reset(std::fopen(path_.c_str(), "rb"));
    if (!file_) {
      const int error = errno;
      throw CheckpointError(path_, CheckpointProblem::Missing,
                            fmt::format("cannot open the file: {}", std::strerror(error)));
    }
    struct stat info {};
    if (::fstat(fileno(file_.get()), &info) != 0 || !S_ISREG(info.st_mode))
      throw CheckpointError(path_, CheckpointProblem::Missing, "not a regular file");
    size_ = static_cast<uint64_t>(info.st_size);
  }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  uint64_t position() const { return position_; }
  uint64_t left() const { return size_ - position_; }

  // Reads exactly `size` bytes; the caller has checked that they are there.
  void read(void* out, size_t size) {
    if (size > 0 && std::fread(out, 1, size, file_.get()) != size)
      throw CheckpointError(path_, CheckpointProblem::Truncated,
                            fmt::format("read failed at byte {}: {}", position_,
                                        std::ferror(file_.get()) ? std::strerror(errno) : "unexpected end"));
    position_ += size;
  }

  [[noreturn]] void fail(CheckpointProblem problem, const std::string& message) const {
    throw CheckpointError(path_, problem, message);
  }

 private:
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  uint64_t size_ = 0;
  uint64_t position_ = 0;
};

std::string hex_bytes(const char* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned char>(bytes[i]));
  return out;
}

// A section kind as text when it is printable ASCII ("TNSR"), else as hex bytes.
std::string printable_kind(const char kind[4]) {
  for (int i = 0; i < 4; ++i)
    if (kind[i] < 0x20 || kind[i] > 0x7e) return hex_bytes(kind, 4);
  return format::kind_name(kind);
}

std::string bytes_count(uint64_t n) {
  return fmt::format("{} byte{}", n, n == 1 ? "" : "s");
}

format::FileHeader read_file_header(Reader& in) {
  char bytes[format::kFileHeaderBytes];
  if (in.size() < 8) {
    in.read(bytes, in.size());
    in.fail(CheckpointProblem::BadMagic,
            fmt::format("not a wallfacer checkpoint: the file has only {} bytes", in.size()));
  }
  in.read(bytes, 8);
  if (std::memcmp(bytes, format::kMagic, 8) != 0)
    in.fail(CheckpointProblem::BadMagic,
            fmt::format("not a wallfacer checkpoint: bad magic (the file starts with {}, a checkpoint with {})",
                        hex_bytes(bytes, 8), hex_bytes(format::kMagic, 8)));
  if (in.left() < format::kFileHeaderBytes - 8)
    in.fail(CheckpointProblem::Truncated,
            fmt::format("truncated: the file ends inside its {}-byte header, after {} bytes", format::kFileHeaderBytes,
                        in.size()));
  in.read(bytes + 8, format::kFileHeaderBytes - 8);
  format::FileHeader h;
  h.version = format::get<uint32_t>(bytes + 8);
  if (h.version != kCheckpointVersion)
    in.fail(CheckpointProblem::Version, fmt::format("format version {} is not supported (this build reads version {})",
                                                    h.version, kCheckpointVersion));
  const uint32_t stored = format::get<uint32_t>(bytes + 40), computed = format::crc32_update(0, bytes, 40);
  if (stored != computed)
    in.fail(CheckpointProblem::Checksum,
            fmt::format("checksum mismatch in the file header: stored crc32 {:#010x}, computed {:#010x}", stored,
                        computed));
  if (format::get<uint32_t>(bytes + 44) != 0)
    in.fail(CheckpointProblem::Malformed, "the reserved word at byte 44 of the header is not zero");
  h.section_count = format::get<uint32_t>(bytes + 12);
  h.step = format::get<int64_t>(bytes + 16);
  h.rank = format::get<int32_t>(bytes + 24);
  h.world_size = format::get<int32_t>(bytes + 28);
  h.section_bytes = format::get<uint64_t>(bytes + 32);
  return h;
}

void check_identity(const Reader& in, const format::FileHeader& h, int64_t step, int rank, int world_size) {
  if (h.rank != rank)
    in.fail(CheckpointProblem::RankMismatch, fmt::format("holds rank {}, expected rank {}", h.rank, rank));
  if (h.world_size < 1 || h.rank < 0 || h.rank >= h.world_size)
    in.fail(CheckpointProblem::Malformed, fmt::format("holds rank {} of a world of {} ranks", h.rank, h.world_size));
  if (world_size > 0 && h.world_size != world_size)
    in.fail(CheckpointProblem::WorldMismatch,
            fmt::format("written by a run of {} ranks, this run has {} (resume with the same number of ranks)",
                        h.world_size, world_size));
  if (h.step != step)
    in.fail(CheckpointProblem::Malformed,
            fmt::format("holds step {}, expected step {} (its directory's)", h.step, step));
}

// "section 3 of 7 (TNSR at byte 1234)"
std::string where(uint32_t index, uint32_t count, const std::string& kind, uint64_t at) {
  return fmt::format("section {} of {} ({} at byte {})", index + 1, count, kind, at);
}

struct Section {
  format::SectionHeader header;
  std::string payload;        // all of it; for a tensor the head before its values (length, name, count)
  std::vector<float> values;  // a tensor's values, read in place
  uint64_t value_bytes = 0;   // bytes of a tensor section after its head
};

bool is_tensor(const Section& s) {
  return std::memcmp(s.header.kind, format::kTensorKind, 4) == 0;
}

// Reads a tensor section with its values straight into a float vector, so the largest part of a
// checkpoint is not held twice; the head is clipped where the section ends. Returns the CRC-32 of
// the whole payload.
uint32_t read_tensor_payload(Reader& in, Section& s) {
  const uint64_t length = s.header.length;
  uint64_t head = std::min<uint64_t>(length, 4);
  s.payload.resize(head);
  in.read(s.payload.data(), head);
  if (head == 4) {
    const uint64_t name_len = format::get<uint32_t>(s.payload.data());
    head = std::min<uint64_t>(length, 4 + name_len + 8);
    s.payload.resize(head);
    in.read(s.payload.data() + 4, head - 4);
  }
  uint32_t crc = format::crc32_update(0, s.payload.data(), s.payload.size());
  s.value_bytes = length - head;
  s.values.resize(s.value_bytes / 4);
  in.read(s.values.data(), 4 * s.values.size());
  crc = format::crc32_update(crc, s.values.data(), 4 * s.values.size());
  char tail[4];
  in.read(tail, s.value_bytes % 4);
  return format::crc32_update(crc, tail, s.value_bytes % 4);
}

Section read_section(Reader& in, uint32_t index, uint32_t count) {
  const uint64_t at = in.position();
  if (in.left() < format::kSectionHeaderBytes)
    in.fail(CheckpointProblem::Truncated,
            fmt::format("truncated: the file ends inside the header of section {} of {}, at byte {} of {}", index + 1,
                        count, at + in.left(), at + format::kSectionHeaderBytes));
  char bytes[format::kSectionHeaderBytes];
  in.read(bytes, sizeof bytes);
  Section s;
  std::memcpy(s.header.kind, bytes, 4);
  const std::string kind = printable_kind(s.header.kind);
  const uint32_t stored = format::get<uint32_t>(bytes + 20), computed = format::crc32_update(0, bytes, 20);
  if (stored != computed)
    in.fail(CheckpointProblem::Checksum,
            fmt::format("checksum mismatch in the header of {}: stored crc32 {:#010x}, computed {:#010x}",
                        where(index, count, kind, at), stored, computed));
  s.header.length = format::get<uint64_t>(bytes + 8);
  s.header.payload_crc = format::get<uint32_t>(bytes + 16);
  if (s.header.length > in.left())
    in.fail(CheckpointProblem::Truncated,
            fmt::format("truncated: {} holds {}, the file ends {} into it", where(index, count, kind, at),
                        bytes_count(s.header.length), bytes_count(in.left())));
  uint32_t payload_crc = 0;
  if (is_tensor(s)) {
    payload_crc = read_tensor_payload(in, s);
  } else {
    s.payload.resize(s.header.length);
    in.read(s.payload.data(), s.payload.size());
    payload_crc = format::crc32_update(0, s.payload.data(), s.payload.size());
  }
  if (payload_crc != s.header.payload_crc)
    in.fail(
        CheckpointProblem::Checksum,
        fmt::format("checksum mismatch in {}, {}: stored crc32 {:#010x}, computed {:#010x}",
                    where(index, count, kind, at), bytes_count(s.header.length), s.header.payload_crc, payload_crc));
  return s;
}

NamedTensor decode_tensor(const Reader& in, Section&& s, const std::string& place) {
  const auto bad = [&](const std::string& why) { in.fail(CheckpointProblem::Malformed, place + ": " + why); };
  if (s.payload.size() < 12) bad("a tensor section needs at least 12 bytes");
  const uint64_t name_len = format::get<uint32_t>(s.payload.data());
  if (s.payload.size() != 4 + name_len + 8) bad(fmt::format("tensor name of {} bytes does not fit", name_len));
  NamedTensor t;
  t.name = s.payload.substr(4, name_len);
  const uint64_t count = format::get<uint64_t>(s.payload.data() + 4 + name_len);
  if (s.value_bytes % 4 != 0 || count != s.value_bytes / 4)
    bad(fmt::format("tensor '{}' declares {} values in {}", t.name, count, bytes_count(s.value_bytes)));
  t.values = std::move(s.values);
  return t;
}

// Puts a section's payload into the state; each of PLAN, RNG, DATA, META must come exactly once.
void apply_section(const Reader& in, Section&& s, const std::string& place, CheckpointState& state,
                   std::set<std::string>& seen) {
  const std::string kind = format::kind_name(s.header.kind);
  if (kind == format::kind_name(format::kTensorKind)) {
    NamedTensor t = decode_tensor(in, std::move(s), place);
    if (!seen.insert("tensor " + t.name).second)
      in.fail(CheckpointProblem::Malformed, fmt::format("{}: tensor '{}' appears twice", place, t.name));
    state.tensors.push_back(std::move(t));
    return;
  }
  if (!seen.insert(kind).second)
    in.fail(CheckpointProblem::Malformed, fmt::format("{}: a second {} section", place, kind));
  if (kind == format::kind_name(format::kPlanKind)) {
    state.plan_hash = std::move(s.payload);
  } else if (kind == format::kind_name(format::kDataKind)) {
    state.data_state = std::move(s.payload);
  } else if (kind == format::kind_name(format::kMetaKind)) {
    state.meta_json = std::move(s.payload);
  } else if (kind == format::kind_name(format::kRngKind)) {
    if (s.payload.size() % 8 != 0)
      in.fail(CheckpointProblem::Malformed,
              fmt::format("{}: {} bytes of random state, not whole 64-bit words", place, s.payload.size()));
    state.rng_state.resize(s.payload.size() / 8);
    if (!s.payload.empty()) std::memcpy(state.rng_state.data(), s.payload.data(), s.payload.size());
  } else {
    in.fail(CheckpointProblem::Malformed,
            fmt::format("{}: unknown section kind '{}'", place, hex_bytes(s.header.kind, 4)));
  }
}

CheckpointState read_verified(const std::string& path, int64_t step, int rank, int world_size) {
  Reader in(path);
  const format::FileHeader h = read_file_header(in);
  check_identity(in, h, step, rank, world_size);
  CheckpointState state;
  state.step = h.step;
  state.rank = h.rank;
  state.world_size = h.world_size;
  std::set<std::string> seen;
  for (uint32_t i = 0; i < h.section_count; ++i) {
    const uint64_t at = in.position();
    Section s = read_section(in, i, h.section_count);
    const std::string place = where(i, h.section_count, printable_kind(s.header.kind), at);
    apply_section(in, std::move(s), place, state, seen);
  }
  for (const char* kind : {"PLAN", "RNG ", "DATA", "META"})
    if (seen.count(kind) == 0) in.fail(CheckpointProblem::Malformed, fmt::format("the {} section is missing", kind));
  if (in.left() != 0 || in.position() != format::kFileHeaderBytes + h.section_bytes)
    in.fail(
        CheckpointProblem::Malformed,
        fmt::format("{} follow{} the last of its {} sections (the header declares {} of sections)",
                    bytes_count(in.left()), in.left() == 1 ? "s" : "", h.section_count, bytes_count(h.section_bytes)));
  return state;
}

}  // namespace

void verify_checkpoint_header(const std::string& dir, int64_t step, int rank, int world_size) {
  Reader in(checkpoint_file(dir, step, rank));
  const format::FileHeader h = read_file_header(in);
  check_identity(in, h, step, rank, world_size);
  if (in.left() != h.section_bytes)
    in.fail(CheckpointProblem::Truncated,
            fmt::format("truncated: the header declares {} bytes of sections, the file has {}", h.section_bytes,
                        in.left()));
}

CheckpointState read_checkpoint(const std::string& dir, int64_t step, int rank) {
  return read_verified(checkpoint_file(dir, step, rank), step, rank, 0);
}

CheckpointState read_checkpoint(const std::string& dir, int64_t step, int rank, int world_size) {
  return read_verified(checkpoint_file(dir, step, rank), step, rank, world_size);
}

void check_resumable(const CheckpointState& state, const std::string& checkpoint_file, const std::string& plan_hash,
                     int world_size) {
  if (state.world_size != world_size)
    throw CheckpointError(
        checkpoint_file, CheckpointProblem::WorldMismatch,
        fmt::format("written by a run of {} ranks, this run has {} (resume with the same number of ranks)",
                    state.world_size, world_size));
  if (state.plan_hash != plan_hash)
    throw CheckpointError(
        checkpoint_file, CheckpointProblem::PlanMismatch,
        fmt::format("written for plan {}, this run's plan is {} (resume with the plan it was written for, "
                    "or start afresh in another directory)",
                    state.plan_hash.empty() ? "(none)" : state.plan_hash, plan_hash));
}

}  // namespace wallfacer::train
