// The checkpoint file format as docs/training-data.md writes it down, built here byte by byte with
// zlib's crc32 (not with the library's writer): the writer's files equal these bytes, the reader
// accepts them, and files that pass every checksum but break the format's rules (unknown, repeated
// or missing sections, a tensor whose count disagrees with its bytes, a repeated tensor name,
// random state that is not whole words) are refused as malformed. Also: ranks writing at once.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <thread>

#include <wallfacer/train/checkpoint.hpp>

#include "train_io/temp_dir.hpp"

namespace wallfacer::train {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

uint32_t crc_of(const std::string& bytes) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string section(const std::string& kind, const std::string& payload) {
  std::string header = kind;
  append(header, uint32_t{0});
  append(header, static_cast<uint64_t>(payload.size()));
  append(header, crc_of(payload));
  append(header, crc_of(header));
  return header + payload;
}

std::string tensor_payload(const std::string& name, const std::vector<float>& values, int64_t declared = -1) {
  std::string p;
  append(p, static_cast<uint32_t>(name.size()));
  p += name;
  append(p, static_cast<uint64_t>(declared >= 0 ? declared : static_cast<int64_t>(values.size())));
  p.append(reinterpret_cast<const char*>(values.data()), 4 * values.size());
  return p;
}

std::string file_of(int64_t step, int32_t rank, int32_t world, const std::vector<std::string>& sections) {
  std::string body;
  for (const auto& s : sections)
    body += s;
  std::string header = "WFCKPT\r\n";
  append(header, uint32_t{1});
  append(header, static_cast<uint32_t>(sections.size()));
  append(header, step);
  append(header, rank);
  append(header, world);
  append(header, static_cast<uint64_t>(body.size()));
  append(header, crc_of(header));
  append(header, uint32_t{0});
  return header + body;
}

std::string rng_payload(const std::vector<uint64_t>& words) {
  return std::string(reinterpret_cast<const char*>(words.data()), 8 * words.size());
}

std::vector<std::string> valid_sections() {
  return {section("PLAN", "plan-x"),
          section("RNG ", rng_payload({5, 6})),
          section("DATA", "seed=1 next_step=3"),
          section("META", "{}"),
          section("TNSR", tensor_payload("w", {1.5f, -2.0f})),
          section("TNSR", tensor_payload("b", {}))};
}

TEST(CheckpointFormat, TheWriterWritesTheDocumentedBytes) {
  TempDir dir;
  CheckpointState state;
  state.step = 3;
  state.rank = 1;
  state.world_size = 2;
  state.plan_hash = "plan-x";
  state.rng_state = {5, 6};
  state.data_state = "seed=1 next_step=3";
  state.meta_json = "{}";
  state.tensors = {{"w", {1.5f, -2.0f}}, {"b", {}}};
  write_checkpoint(dir.str(), state);
  EXPECT_EQ(read_bytes(checkpoint_file(dir.str(), 3, 1)), file_of(3, 1, 2, valid_sections()));

  write_bytes(checkpoint_file(dir.str(), 3, 1), file_of(3, 1, 2, valid_sections()));
  const CheckpointState back = read_checkpoint(dir.str(), 3, 1, 2);
  EXPECT_EQ(back.plan_hash, "plan-x");
  EXPECT_EQ(back.rng_state, (std::vector<uint64_t>{5, 6}));
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].values, (std::vector<float>{1.5f, -2.0f}));
}

void expect_malformed(const std::vector<std::string>& sections, const std::string& text) {
  TempDir dir;
  std::filesystem::create_directories(checkpoint_step_dir(dir.str(), 3));
  write_bytes(checkpoint_file(dir.str(), 3, 0), file_of(3, 0, 1, sections));
  try {
    read_checkpoint(dir.str(), 3, 0, 1);
    ADD_FAILURE() << "accepted a file that should fail with '" << text << "'";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.problem(), CheckpointProblem::Malformed) << e.what();
    EXPECT_NE(e.message().find(text), std::string::npos) << e.what();
  }
}

TEST(CheckpointFormat, ValidChecksumsButBrokenRulesAreMalformed) {
  auto sections = valid_sections();
  sections.push_back(section("ZZZZ", "?"));
  expect_malformed(sections, "section 7 of 7 (ZZZZ at byte");
  sections = valid_sections();
  sections.push_back(section("DATA", "seed=1 next_step=3"));
  expect_malformed(sections, "a second DATA section");
  sections = valid_sections();
  sections.erase(sections.begin() + 3);
  expect_malformed(sections, "the META section is missing");
  sections = valid_sections();
  sections.push_back(section("TNSR", tensor_payload("w", {3.0f})));
  expect_malformed(sections, "tensor 'w' appears twice");
  sections = valid_sections();
  sections.push_back(section("TNSR", tensor_payload("c", {1.0f, 2.0f}, 3)));
  expect_malformed(sections, "tensor 'c' declares 3 values in 8 bytes");
  sections = valid_sections();
  sections.push_back(section("TNSR", tensor_payload("c", {1.0f}) + "x"));
  expect_malformed(sections, "declares 1 values in 5 bytes");
  sections = valid_sections();
  sections.push_back(section("TNSR", "abc"));
  expect_malformed(sections, "a tensor section needs at least 12 bytes");
  sections = valid_sections();
  std::string long_name;
  append(long_name, uint32_t{1000});
  sections.push_back(section("TNSR", long_name + std::string(20, 'n')));
  expect_malformed(sections, "tensor name of 1000 bytes does not fit");
  sections = valid_sections();
  sections[1] = section("RNG ", "1234567");
  expect_malformed(sections, "7 bytes of random state");
}

// Ranks run as threads in one process (the threads backend) write their files at the same time.
TEST(CheckpointFormat, RanksWriteConcurrently) {
  TempDir dir;
  const int world = 6;
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      CheckpointState s;
      s.step = 9;
      s.rank = r;
      s.world_size = world;
      s.tensors = {{"w", std::vector<float>(100000, static_cast<float>(r))}};
      write_checkpoint(dir.str(), s);
    });
  for (auto& t : ranks)
    t.join();
  commit_checkpoint(dir.str(), 9, world);
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(read_checkpoint(dir.str(), 9, r, world).tensors[0].values,
              std::vector<float>(100000, static_cast<float>(r)));
}

}  // namespace
}  // namespace wallfacer::train
