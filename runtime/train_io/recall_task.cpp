#include <wallfacer/train/recall_task.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_set>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::train {

namespace {

// Streams of SampleRandom, one per part of the sample (docs/training-data.md).
constexpr uint64_t kFillerStream = 1;
constexpr uint64_t kKeyStream = 2;
constexpr uint64_t kValueStream = 3;
constexpr uint64_t kPlacementStream = 4;
constexpr uint64_t kQueryOrderStream = 5;

constexpr char kFiller[] = "abcdefghijklmnopqrstuvwxyz ";
static_assert(sizeof(kFiller) == kRecallFillerSymbols + 1);

// Every field is bounded by this before any arithmetic, so products cannot overflow.
constexpr int64_t kMaxSeqLen = int64_t{1} << 40;

int64_t block_len(const RecallTaskSpec& spec) {
  return 2 + spec.key_len + spec.value_len;
}

[[noreturn]] void bad_field(const char* field, int64_t value, const std::string& expected) {
  throw InputError(fmt::format("recall task: '{}' is {}, expected {}", field, value, expected));
}

void validate_fields(const RecallTaskSpec& spec) {
  if (spec.seq_len < 1 || spec.seq_len > kMaxSeqLen)
    bad_field("seq_len", spec.seq_len, fmt::format("1 to {}", kMaxSeqLen));
  if (spec.pairs < 1 || spec.pairs > spec.seq_len)
    bad_field("pairs", spec.pairs, fmt::format("1 to the sequence length ({})", spec.seq_len));
  if (spec.key_len < 1 || spec.key_len > spec.seq_len)
    bad_field("key_len", spec.key_len, fmt::format("1 to the sequence length ({})", spec.seq_len));
  if (spec.value_len < 1 || spec.value_len > spec.seq_len)
    bad_field("value_len", spec.value_len, fmt::format("1 to the sequence length ({})", spec.seq_len));
  if (spec.min_distance < 0 || spec.min_distance > spec.seq_len)
    bad_field("min_distance", spec.min_distance, fmt::format("0 to the sequence length ({})", spec.seq_len));
  if (spec.filler_symbols < 1 || spec.filler_symbols > kRecallFillerSymbols)
    bad_field("filler_symbols", spec.filler_symbols, fmt::format("1 to {}", kRecallFillerSymbols));
  if (spec.curriculum_copies < 1 || spec.curriculum_copies > spec.seq_len)
    bad_field("curriculum_copies", spec.curriculum_copies, fmt::format("1 to the sequence length ({})", spec.seq_len));
  if (spec.curriculum_steps < 0) bad_field("curriculum_steps", spec.curriculum_steps, "0 or more");
  if (spec.curriculum_length < 0 || spec.curriculum_length > spec.seq_len)
    bad_field("curriculum_length", spec.curriculum_length,
              fmt::format("0 (none) or 1 to the sequence length ({})", spec.seq_len));
  // Keys of a sample are distinct: 26^key_len must reach pairs.
  int64_t keys = 1;
  for (int64_t i = 0; i < spec.key_len && keys < spec.pairs; ++i)
    keys *= kRecallKeySymbols;
  if (keys < spec.pairs)
    bad_field("pairs", spec.pairs,
              fmt::format("at most {} distinct keys of {} letters (raise key_len)", keys, spec.key_len));
}

bool has_length_curriculum(const RecallTaskSpec& spec) {
  return spec.curriculum_steps > 0 && spec.curriculum_length > 0;
}

// Tokens a task needs to hold `copies` definitions of every key and the queries after them, each
// answer at least `distance` after its definition: the queries fill the tail (pairs blocks); the
// definitions need pairs blocks (times their copies) before them, the last one starting at least
// max(distance, block) before the first query.
int64_t needed_len(const RecallTaskSpec& spec, int64_t copies, int64_t distance) {
  const int64_t block = block_len(spec);
  return (copies + 1) * spec.pairs * block - block + std::max(distance, block) - 1;
}

int64_t min_seq_len_of_valid_fields(const RecallTaskSpec& spec) {
  // A length curriculum holds its copies in its first window (validate checks that), so the whole
  // sequence only needs the plain task.
  const int64_t copies = spec.curriculum_steps > 0 && !has_length_curriculum(spec) ? spec.curriculum_copies : 1;
  return needed_len(spec, copies, spec.min_distance);
}

// Start positions of the definitions, ascending (definition i holds key i mod pairs): `count`
// blocks placed uniformly without overlap among the starts [0, last_start].
std::vector<int64_t> definition_starts(const RecallTaskSpec& spec, int64_t count, int64_t last_start,
                                       SampleRandom& random) {
  const int64_t block = block_len(spec);
  const int64_t free = last_start + block - count * block;  // slack shared by the gaps
  std::vector<int64_t> gaps(static_cast<size_t>(count));
  for (auto& g : gaps)
    g = static_cast<int64_t>(random.below(static_cast<uint64_t>(free) + 1));
  std::sort(gaps.begin(), gaps.end());
  for (size_t k = 0; k < gaps.size(); ++k)
    gaps[k] += static_cast<int64_t>(k) * block;
  return gaps;
}

std::vector<std::string> distinct_keys(const RecallTaskSpec& spec, SampleRandom& random) {
  std::vector<std::string> keys;
  std::unordered_set<std::string> seen;
  while (static_cast<int64_t>(keys.size()) < spec.pairs) {
    std::string key(static_cast<size_t>(spec.key_len), 'A');
    for (auto& c : key)
      c = static_cast<char>('A' + random.below(kRecallKeySymbols));
    if (seen.insert(key).second) keys.push_back(std::move(key));
  }
  return keys;
}

void put_block(std::vector<int32_t>& tokens, int64_t start, char mark, const std::string& key,
               const std::string& value) {
  auto at = tokens.begin() + start;
  *at++ = mark;
  for (const char c : key)
    *at++ = c;
  *at++ = kRecallSeparator;
  for (const char c : value)
    *at++ = c;
}

}  // namespace

void validate(const RecallTaskSpec& spec) {
  validate_fields(spec);
  const int64_t needed = min_seq_len_of_valid_fields(spec);
  if (spec.seq_len < needed)
    throw InputError(fmt::format(
        "recall task: 'seq_len' is {}, expected at least {} for {} pairs of {}-letter keys and {}-digit values "
        "with min_distance {} (lower pairs or min_distance, or raise seq_len)",
        spec.seq_len, needed, spec.pairs, spec.key_len, spec.value_len, spec.min_distance));
  if (!has_length_curriculum(spec)) return;
  // Later windows are no harder: the copies only fall, and the window grows faster than the
  // distance it keeps (recall_min_distance), so the first window is the one to check.
  const int64_t first = needed_len(spec, recall_copies(spec, 0), recall_min_distance(spec, 0));
  if (spec.curriculum_length < first)
    throw InputError(fmt::format(
        "recall task: 'curriculum_length' is {}, expected at least {}: the first window holds {} definitions ({} "
        "pairs, {} copies each) and their queries with min_distance {} (raise curriculum_length or lower "
        "curriculum_copies)",
        spec.curriculum_length, first, spec.pairs * recall_copies(spec, 0), spec.pairs, recall_copies(spec, 0),
        recall_min_distance(spec, 0)));
}

int64_t recall_min_seq_len(const RecallTaskSpec& spec) {
  RecallTaskSpec probe = spec;
  probe.seq_len = kMaxSeqLen;
  validate_fields(probe);
  return min_seq_len_of_valid_fields(spec);
}

TrainingSample recall_sample(const RecallTaskSpec& spec, uint64_t seed, int64_t step, int64_t sample) {
  validate(spec);
  const int64_t length = spec.seq_len + 1;
  const int64_t block = block_len(spec);
  TrainingSample result;
  result.tokens.resize(static_cast<size_t>(length));
  SampleRandom filler(seed, step, sample, kFillerStream);
  for (auto& t : result.tokens)
    t = kFiller[filler.below(uint64_t(spec.filler_symbols))];

  SampleRandom key_random(seed, step, sample, kKeyStream);
  const std::vector<std::string> keys = distinct_keys(spec, key_random);
  SampleRandom value_random(seed, step, sample, kValueStream);
  std::vector<std::string> values(keys.size(), std::string(static_cast<size_t>(spec.value_len), '0'));
  for (auto& v : values)
    for (auto& c : v)
      c = static_cast<char>('0' + value_random.below(kRecallValueSymbols));

  // The task ends at token recall_task_len (the whole sample without a length curriculum).
  const int64_t first_query = recall_task_len(spec, step) + 1 - spec.pairs * block;
  SampleRandom placement(seed, step, sample, kPlacementStream);
  const int64_t copies = recall_copies(spec, step);
  const int64_t distance = recall_min_distance(spec, step);
  const std::vector<int64_t> starts =
      definition_starts(spec, spec.pairs * copies, first_query - std::max(distance, block), placement);
  for (size_t i = 0; i < starts.size(); ++i)
    put_block(result.tokens, starts[i], kRecallDefinitionMark, keys[i % keys.size()], values[i % keys.size()]);

  std::vector<size_t> order(keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  SampleRandom shuffle(seed, step, sample, kQueryOrderStream);
  for (size_t i = order.size(); i-- > 1;)
    std::swap(order[i], order[shuffle.below(i + 1)]);

  result.loss_mask.assign(static_cast<size_t>(spec.seq_len), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t start = first_query + static_cast<int64_t>(i) * block;
    put_block(result.tokens, start, kRecallQueryMark, keys[order[i]], values[order[i]]);
    const int64_t answer = start + 2 + spec.key_len;  // first value token
    for (int64_t j = 0; j < spec.value_len; ++j)
      result.loss_mask[static_cast<size_t>(answer + j - 1)] = 1;
  }
  return result;
}

int64_t recall_copies(const RecallTaskSpec& spec, int64_t step) {
  if (spec.curriculum_steps <= 0 || step >= spec.curriculum_steps || step < 0) return 1;
  const double exponent = 1.0 - double(step) / double(spec.curriculum_steps);
  return std::max<int64_t>(1, std::llround(std::pow(double(spec.curriculum_copies), exponent)));
}

int64_t recall_task_len(const RecallTaskSpec& spec, int64_t step) {
  if (!has_length_curriculum(spec) || step < 0 || step >= spec.curriculum_steps) return spec.seq_len;
  const double growth = double(spec.seq_len) / double(spec.curriculum_length);
  const double len = double(spec.curriculum_length) * std::pow(growth, double(step) / double(spec.curriculum_steps));
  return std::clamp<int64_t>(std::llround(len), spec.curriculum_length, spec.seq_len);
}

int64_t recall_min_distance(const RecallTaskSpec& spec, int64_t step) {
  const int64_t len = recall_task_len(spec, step);
  if (len == spec.seq_len) return spec.min_distance;
  // Both factors are at most 2^40 (validate_fields), so the product fits in 128 bits.
  return static_cast<int64_t>(static_cast<__int128>(spec.min_distance) * len / spec.seq_len);
}

double recall_chance_loss(const RecallTaskSpec& spec) {
  validate_fields(spec);
  return std::log(static_cast<double>(kRecallValueSymbols));
}

int64_t recall_answer_tokens(const RecallTaskSpec& spec) {
  return spec.pairs * spec.value_len;
}

}  // namespace wallfacer::train
