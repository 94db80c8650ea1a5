// Choices around the timeline (timeline.hpp): which pairing a set of programs is timed under,
// and which program a step's parts are read from.
#include <set>

#include "timeline.hpp"

namespace wallfacer::detail {

size_t critical_program(const std::vector<RankTiming>& timings) {
  size_t critical = 0;
  double latest = 0;
  for (size_t p = 0; p < timings.size(); ++p)
    if (timings[p].end_s > latest) latest = timings[p].end_s, critical = p;
  return critical;
}

PairMode pair_mode_for(int plan_ranks, const std::vector<ProgramView>& programs, bool lower_bound) {
  if (lower_bound) return PairMode::StagesOnly;
  std::set<int> distinct;
  for (const ProgramView& program : programs)
    distinct.insert(program.rank());
  const bool every_rank = int(distinct.size()) == plan_ranks && distinct.size() == programs.size();
  return every_rank ? PairMode::Matched : PairMode::Symmetric;
}

std::vector<RankTiming> time_programs(const std::vector<const RankProgram*>& programs,
                                      const std::vector<std::vector<double>>& duration, PairMode mode) {
  return TimelineShape(programs, mode).run(duration);
}

}  // namespace wallfacer::detail
