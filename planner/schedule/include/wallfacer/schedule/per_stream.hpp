// One op index per stream, for the cursors that walk a program stream by stream ("the last op of
// each stream so far"). no_op_on_any_stream() sets every entry to -1 (none yet) for however many
// streams there are: a brace list of -1s written out by hand would leave the entry of a stream
// added later at 0, which is a real op index.
#pragma once

#include <array>
#include <cstdint>

#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer {

using OpPerStream = std::array<int32_t, kNumStreams>;

constexpr OpPerStream no_op_on_any_stream() {
  OpPerStream ops{};
  ops.fill(-1);
  return ops;
}

static_assert(no_op_on_any_stream()[kNumStreams - 1] == -1);

}  // namespace wallfacer
