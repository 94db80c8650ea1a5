// WallFacer's rank geometry (docs/algorithms.md §8.2) for the S sequence ranks of one replica: teams of
// C consecutive logical ranks, C^2 sub-rings of G = S / C^2 members, the initial K,V placement
// that makes every team meet every team's K,V exactly once, and the P2P_intra GPU permutation.
// Logical rank x = t * C + a (team t, member a); team group g = t / G; sub-ring position j = t % G.
#pragma once

namespace wallfacer::detail {

struct WallFacerLayout {
  int S = 1, C = 1, T = 1, G = 1;

  WallFacerLayout(int sequence_ranks, int team_size)
      : S(sequence_ranks), C(team_size), T(sequence_ranks / team_size), G(sequence_ranks / (team_size * team_size)) {}

  int rank(int t, int a) const { return t * C + a; }
  int team(int x) const { return x / C; }
  int member(int x) const { return x % C; }
  int team_group(int x) const { return team(x) / G; }
  int position(int x) const { return team(x) % G; }
  int subring(int x) const { return team_group(x) * C + member(x); }  // sub-ring (g, a) -> g * C + a

  // Initial placement: x sends its team's K,V to target(x) and receives from source(x) the K,V
  // of initial_kv_team(x). target(x) == x for the ranks that keep their own team's shard.
  int target(int x) const { return rank(member(x) * G + team(x) / C, team(x) % C); }
  int source(int x) const { return rank(position(x) * C + member(x), team_group(x)); }
  int initial_kv_team(int x) const { return position(x) * C + member(x); }

  // Sub-ring neighbours: same member, next / previous team of the own team group.
  int next(int x) const { return rank(team_group(x) * G + (position(x) + 1) % G, member(x)); }
  int prev(int x) const { return rank(team_group(x) * G + (position(x) + G - 1) % G, member(x)); }
  // Forward round s: whose team K,V x holds (K,V travel to next every round).
  int kv_team_at(int x, int round) const { return ((position(x) - round % G + G) % G) * C + member(x); }
  // Backward round s: whose team's query bundle x holds (bundles travel to next every round).
  int q_team_at(int x, int round) const { return team_group(x) * G + (position(x) - round % G + G) % G; }

  // P2P_intra placement: logical x runs on the GPU at this position of its replica, so each
  // sub-ring fills consecutive GPUs and team members stride by G.
  int p2p_intra_position(int x) const { return (team_group(x) * C + member(x)) * G + position(x); }
};

}  // namespace wallfacer::detail
