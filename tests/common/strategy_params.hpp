// Tests describe parameters by their values (S, D, u, r, w, C, placement) for whichever strategy
// they exercise; this builds the strategy's own typed parameters from them, taking only the knobs
// that strategy has.
#pragma once

#include <wallfacer/plan/plan.hpp>

namespace wallfacer::test {

struct FlatParams {
  int S = 1, D = 1, u = 1, r = 1, w = 1, C = 1;
  Placement placement = Placement::Default;
};

inline StrategyParams typed_params(StrategyKind kind, const FlatParams& f) {
  StrategyParams p{.sequence_parallel = f.S, .data_parallel = f.D, .knobs = default_knobs(kind)};
  const ContextPlacement context =
      f.placement == Placement::ContextFirst ? ContextPlacement::ContextFirst : ContextPlacement::HeadFirst;
  if (kind == StrategyKind::Usp) p.knobs = UspKnobs{f.u, f.r, context};
  if (kind == StrategyKind::DoubleRing) p.knobs = DoubleRingKnobs{f.u, f.w, context};
  if (kind == StrategyKind::WallFacer)
    p.knobs =
        WallFacerKnobs{f.C, f.placement == Placement::P2PIntra ? TeamPlacement::P2PIntra : TeamPlacement::CollectIntra};
  return p;
}

}  // namespace wallfacer::test
