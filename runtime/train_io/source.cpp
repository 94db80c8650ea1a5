#include <wallfacer/train/source.hpp>

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

#include <wallfacer/core/errors.hpp>

namespace wallfacer::train {

TrainingSource TrainingSource::recall(const RecallTaskSpec& spec) {
  validate(spec);
  TrainingSource source;
  source.seq_len_ = spec.seq_len;
  source.recall_ = spec;
  return source;
}

TrainingSource TrainingSource::text(ByteDataset dataset, int64_t seq_len) {
  dataset.check_fits(seq_len);
  TrainingSource source;
  source.seq_len_ = seq_len;
  source.text_.emplace(std::move(dataset));
  return source;
}

std::optional<double> TrainingSource::chance_loss() const {
  if (recall_) return recall_chance_loss(*recall_);
  return std::nullopt;
}

TrainingSample TrainingSource::sample(uint64_t seed, int64_t step, int64_t sample) const {
  if (recall_) return recall_sample(*recall_, seed, step, sample);
  return text_->training_sample(seed, step, sample, seq_len_);
}

namespace {
// ", curriculum 64 copies, lengths from 128, over 300 steps"
std::string curriculum_text(const RecallTaskSpec& spec) {
  std::string text = ", curriculum";
  if (spec.curriculum_copies > 1) text += fmt::format(" {} copies", spec.curriculum_copies);
  if (spec.curriculum_length > 0)
    text += fmt::format("{} lengths from {}", spec.curriculum_copies > 1 ? "," : "", spec.curriculum_length);
  return text + fmt::format(" over {} steps", spec.curriculum_steps);
}
}  // namespace

std::string TrainingSource::describe() const {
  if (recall_)
    return fmt::format("recall task: {} pairs, keys of {} letters, values of {} digits, min distance {}, seq {}{}{}",
                       recall_->pairs, recall_->key_len, recall_->value_len, recall_->min_distance, seq_len_,
                       recall_->filler_symbols == kRecallFillerSymbols
                           ? ""
                           : fmt::format(", {} filler symbols", recall_->filler_symbols),
                       recall_->curriculum_steps == 0 ? "" : curriculum_text(*recall_));
  return fmt::format("text: {} ({} bytes), seq {}", text_->path(), text_->size_bytes(), seq_len_);
}

std::string to_data_state(const DataPosition& position) {
  return fmt::format("seed={} next_step={}", position.seed, position.next_step);
}

namespace {
template <typename T>
bool parse_field(const std::string& text, size_t& at, const std::string& key, T& value) {
  if (text.compare(at, key.size(), key) != 0) return false;
  at += key.size();
  const auto [end, error] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() + at) return false;
  at = static_cast<size_t>(end - text.data());
  return true;
}
}  // namespace

DataPosition parse_data_state(const std::string& state, const std::string& file) {
  DataPosition position;
  size_t at = 0;
  const bool ok = parse_field(state, at, "seed=", position.seed) &&
                  parse_field(state, at, " next_step=", position.next_step) && at == state.size() &&
                  position.next_step >= 0;
  if (!ok)
    throw InputError(file, 0,
                     fmt::format("checkpoint: the data position should read 'seed=<S> next_step=<N>', found '{}'",
                                 state.substr(0, 80)));
  return position;
}

double masked_accuracy(const TrainingSample& sample, const std::vector<int32_t>& predicted) {
  if (predicted.size() != sample.loss_mask.size())
    throw std::invalid_argument(
        fmt::format("{} predictions for a sample of {} positions", predicted.size(), sample.loss_mask.size()));
  int64_t counted = 0, right = 0;
  for (size_t t = 0; t < predicted.size(); ++t) {
    if (!sample.loss_mask[t]) continue;
    ++counted;
    right += predicted[t] == sample.tokens[t + 1];
  }
  return counted == 0 ? 0.0 : static_cast<double>(right) / static_cast<double>(counted);
}

}  // namespace wallfacer::train
