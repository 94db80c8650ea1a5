// SimResult as JSON and back: the public to_json text, and the channel that brings a result
// from the simulation's child process to the caller (doubles round-trip exactly).
#pragma once

#include <string>

#include <wallfacer/simulator/simulator.hpp>

namespace wallfacer::sim {

// Keys: step_ms, forward_ms, backward_ms, activities, wall_seconds, ranks[], links{classes[],
// busiest[]}. `compact` drops the indentation.
std::string result_to_json(const SimResult& result, bool compact);
SimResult result_from_json(const std::string& text);  // throws std::runtime_error on bad text

}  // namespace wallfacer::sim
