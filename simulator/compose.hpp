// A whole step composed from replays of fewer layers (docs/simulator.md, "Composed step"): a step
// plan's layers are identical, and where the replay reaches the same state after every layer,
// each added layer adds the same time, the same counts and the same bytes. The step is replayed
// with 1, 2 and 3 layers per pipeline stage; where the third layer adds what the second added
// (repeats_exactly), the step of n layers is the 2-layer replay plus (n - 2) times that, field by
// field. Otherwise the caller replays every layer. tests/simulator/compose_test.cpp holds the
// composition to the full replay.
#pragma once

#include <string>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::sim {

// Replays a composed step is made from; replay i holds i + 1 layers per pipeline stage.
constexpr int kComposeReplays = 3;

// Whether simulate() tries to compose this plan's step: a step plan replayed with all its layers,
// more of them per stage than the longest replay has, on a topology whose nodes all hold the
// same number of GPUs, unless SimOptions::composition is Never; under Auto only where the three
// replays are less work than the full one (3F + 6L < F + nL, F and L the activities of the step's
// non-repeating part and of a layer, estimated from rank 0's program).
bool composes_step(const Plan& plan, const Topology& topology, const SimOptions& options);

// Whether the replays of 1, 2 and 3 layers per stage grow by the same amount per layer in every
// time and count, to SimGrid's clock (each time of a replay carries up to 1 ns of rounding, so
// two increments may differ by 4 ns). Sets `why` to the first difference found when not.
bool repeats_exactly(const SimResult& one, const SimResult& two, const SimResult& three, std::string& why);

// The step of `layers` layers from replays of `few.layers` and `more.layers` layers. Both results
// must list every resource in resource order (SimOptions::busiest_links = -1); the composed
// result keeps the `busiest_links` most loaded (0: every one that carried bytes).
SimResult compose_step(const SimResult& few, const SimResult& more, int layers, int busiest_links);

}  // namespace wallfacer::sim
