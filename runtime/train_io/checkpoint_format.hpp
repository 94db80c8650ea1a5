// The byte layout of a checkpoint file (private to train_io): a fixed header, then sections, each
// with its own header and CRC-32. Little-endian, as written by the host (x86-64, aarch64).
#pragma once

#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace wallfacer::train::format {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian");

inline constexpr char kMagic[8] = {'W', 'F', 'C', 'K', 'P', 'T', '\r', '\n'};
inline constexpr size_t kFileHeaderBytes = 48;
inline constexpr size_t kSectionHeaderBytes = 24;

// File header: magic[8], u32 version, u32 section_count, i64 step, i32 rank, i32 world_size,
// u64 section_bytes (everything after this header), u32 crc32 of bytes [0, 40), u32 zero.
struct FileHeader {
  uint32_t version = 0;
  uint32_t section_count = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int32_t world_size = 0;
  uint64_t section_bytes = 0;
};

// Section header: char kind[4], u32 zero, u64 payload length, u32 crc32 of the payload, u32 crc32
// of bytes [0, 20) of this header.
struct SectionHeader {
  char kind[4] = {0, 0, 0, 0};
  uint64_t length = 0;
  uint32_t payload_crc = 0;
};

inline constexpr char kPlanKind[4] = {'P', 'L', 'A', 'N'};
inline constexpr char kRngKind[4] = {'R', 'N', 'G', ' '};
inline constexpr char kDataKind[4] = {'D', 'A', 'T', 'A'};
inline constexpr char kMetaKind[4] = {'M', 'E', 'T', 'A'};
inline constexpr char kTensorKind[4] = {'T', 'N', 'S', 'R'};

// zlib treats a null buffer as a request for the initial value, so empty data must not reach it.
inline uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  if (size == 0) return crc;
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), size));
}

template <typename T>
void put(char* at, T value) {
  std::memcpy(at, &value, sizeof value);
}
template <typename T>
T get(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

inline void encode(const FileHeader& h, char* out) {
  std::memcpy(out, kMagic, 8);
  put(out + 8, h.version);
  put(out + 12, h.section_count);
  put(out + 16, h.step);
  put(out + 24, h.rank);
  put(out + 28, h.world_size);
  put(out + 32, h.section_bytes);
  put(out + 40, crc32_update(0, out, 40));
  put(out + 44, uint32_t{0});
}

inline void encode(const SectionHeader& h, char* out) {
  std::memcpy(out, h.kind, 4);
  put(out + 4, uint32_t{0});
  put(out + 8, h.length);
  put(out + 16, h.payload_crc);
  put(out + 20, crc32_update(0, out, 20));
}

inline std::string kind_name(const char kind[4]) {
  return std::string(kind, 4);
}

}  // namespace wallfacer::train::format

namespace wallfacer::train {
// Checks that dir/step-<N>/rank-<r>.ckpt exists and its file header is valid and names this step,
// rank and world size (commit_checkpoint; reads the header only). CheckpointError otherwise.
void verify_checkpoint_header(const std::string& dir, int64_t step, int rank, int world_size);
}  // namespace wallfacer::train
