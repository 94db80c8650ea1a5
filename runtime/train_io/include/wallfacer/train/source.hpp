// Where a training run takes its samples from, chosen once by the `train` command: the recall
// task (the default: it needs attention across ranks to be learnt) or byte-level text from a file.
// Both give a TrainingSample per (seed, step, sample), so the loop does not care which; the data
// position a checkpoint keeps is then just the seed and the next step (DataPosition).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <wallfacer/train/data.hpp>
#include <wallfacer/train/recall_task.hpp>
#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

class TrainingSource {
 public:
  // Validates the spec (InputError naming the field).
  static TrainingSource recall(const RecallTaskSpec& spec);
  // Checks that the file holds one sample of seq_len (InputError naming the file).
  static TrainingSource text(ByteDataset dataset, int64_t seq_len);

  int64_t seq_len() const { return seq_len_; }
  bool is_recall() const { return recall_.has_value(); }
  // The loss of a model that ignores the context beyond the query (recall); nullopt for text.
  std::optional<double> chance_loss() const;
  TrainingSample sample(uint64_t seed, int64_t step, int64_t sample) const;
  // "recall task: 8 pairs, keys of 4 letters, values of 4 digits, min distance 2048, seq 4096" or
  // "text: corpus.txt (12345 bytes), seq 4096".
  std::string describe() const;

 private:
  TrainingSource() = default;
  int64_t seq_len_ = 0;
  std::optional<RecallTaskSpec> recall_;
  std::optional<ByteDataset> text_;
};

// The data position of a run, as CheckpointState::data_state holds it: "seed=<S> next_step=<N>".
struct DataPosition {
  uint64_t seed = 0;
  int64_t next_step = 0;
};
std::string to_data_state(const DataPosition& position);
// InputError naming `file` (the checkpoint) when `state` is not of that form.
DataPosition parse_data_state(const std::string& state, const std::string& file);

// Fraction of the counted targets (loss_mask == 1) that `predicted` (one token per input position,
// seq_len of them, else std::invalid_argument) gets right; 0 when the sample counts none.
double masked_accuracy(const TrainingSample& sample, const std::vector<int32_t>& predicted);

}  // namespace wallfacer::train
