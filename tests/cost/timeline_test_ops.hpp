// Ops for the timeline tests' hand-built programs (timeline_test.cpp, timeline_fold_test.cpp):
// only the fields the list schedule reads.
#pragma once

#include <wallfacer/schedule/schedule.hpp>

namespace wallfacer::testing {

inline Op compute_op(Phase phase = Phase::Forward) {
  Op op;
  op.kind = OpKind::AttnFwd;
  op.stream = Stream::Compute;
  op.phase = phase;
  return op;
}

inline Op message(OpKind kind, int peer, int tag) {
  Op op;
  op.kind = kind;
  op.stream = kind == OpKind::Send ? Stream::Send : Stream::Recv;
  op.peer = peer;
  op.tag = tag;
  return op;
}

}  // namespace wallfacer::testing
