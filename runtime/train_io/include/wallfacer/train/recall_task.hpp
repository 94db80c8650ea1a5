// The long-range task that ships with the project: synthetic key retrieval. A sequence of filler
// text holds `pairs` definitions "#KEY:VALUE" early on and, at its end, a query "?KEY:VALUE" for
// every key in a shuffled order; the loss counts only the query's value tokens, which the model can
// only predict by finding the definition at least min_distance tokens back. With min_distance a
// large share of seq_len, the answers cross the rank boundaries of a sequence-parallel run (how
// many, per split, in docs/training-data.md), so the task is learnt only if attention across ranks
// works. Deterministic in (seed, step, sample); docs/training-data.md defines the layout exactly.
#pragma once

#include <cstdint>
#include <vector>

#include <wallfacer/train/sample.hpp>

namespace wallfacer::train {

// seq_len: tokens the model sees (the sample holds seq_len + 1). pairs: definitions and queries per
// sample, >= 1. key_len: uppercase letters per key, >= 1, with 26^key_len >= pairs (keys of a
// sample are distinct). value_len: digits per value, >= 1. min_distance: each answer token sits at
// least this many positions after the definition token it copies, >= 0 (0: anywhere before its
// query). filler_symbols: how many of the filler alphabet's 27 symbols the filler draws from
// (1..27; 1 fills with 'a' only, the filler then carrying no information at all).
// A curriculum (curriculum_steps > 0) writes every definition several times in the early steps,
// curriculum_copies at step 0 falling geometrically to 1 at step curriculum_steps (recall_copies),
// every copy as far from the queries as min_distance asks: the same retrieval with more of the
// attention's mass on the answer at first. A length curriculum (curriculum_length > 0) confines
// the task to the first recall_task_len tokens, curriculum_length at step 0 growing geometrically
// to seq_len at step curriculum_steps, with min_distance scaled in proportion (recall_min_distance):
// the queries then sit at the end of that window, the filler after it is never attended to by an
// answer (the mask is causal), so at first each answer competes with few keys, as in progressive
// sequence-length training. From curriculum_steps on the task is the plain one.
// InputError naming the field for a spec that breaks these or does not fit in seq_len.
struct RecallTaskSpec {
  int64_t seq_len = 0;
  int64_t pairs = 8;
  int64_t key_len = 4;
  int64_t value_len = 4;
  int64_t min_distance = 0;
  int64_t filler_symbols = 27;
  int64_t curriculum_copies = 1;
  int64_t curriculum_steps = 0;
  int64_t curriculum_length = 0;  // 0: the task spans the whole sequence from step 0
};

// The alphabet of the task (ASCII, so a sample prints as text).
inline constexpr char kRecallDefinitionMark = '#';
inline constexpr char kRecallQueryMark = '?';
inline constexpr char kRecallSeparator = ':';
inline constexpr int kRecallValueSymbols = 10;  // '0'..'9'
inline constexpr int kRecallKeySymbols = 26;    // 'A'..'Z'
// Filler: 'a'..'z' and ' ' (the first filler_symbols of them).
inline constexpr int kRecallFillerSymbols = 27;

// Throws InputError when the spec is impossible (see RecallTaskSpec).
void validate(const RecallTaskSpec& spec);
// The smallest seq_len at which the spec's other fields fit.
int64_t recall_min_seq_len(const RecallTaskSpec& spec);

TrainingSample recall_sample(const RecallTaskSpec& spec, uint64_t seed, int64_t step, int64_t sample);

// Tokens the task spans at `step` (its queries end at token recall_task_len, the sample holding
// seq_len + 1): round(curriculum_length * (seq_len / curriculum_length)^(step / curriculum_steps))
// during a length curriculum, seq_len otherwise.
int64_t recall_task_len(const RecallTaskSpec& spec, int64_t step);
// The distance every answer keeps from its definition at `step`: min_distance * recall_task_len /
// seq_len, rounded down (min_distance itself once the task spans the sequence).
int64_t recall_min_distance(const RecallTaskSpec& spec, int64_t step);

// Copies of each definition at `step`: round(curriculum_copies^(1 - step / curriculum_steps)) before
// curriculum_steps, 1 from then on (and without a curriculum).
int64_t recall_copies(const RecallTaskSpec& spec, int64_t step);

// Mean loss per answer token of a model that does not look back past the query (its best guess is
// the uniform distribution over the value digits): ln 10. A trained model that retrieves the answers
// goes well below it; docs/training-data.md states the threshold.
double recall_chance_loss(const RecallTaskSpec& spec);

// Answer tokens of the sample (positions t with loss_mask[t] == 1) per sample: pairs * value_len.
int64_t recall_answer_tokens(const RecallTaskSpec& spec);

}  // namespace wallfacer::train
