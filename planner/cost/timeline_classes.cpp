// Ranks that run the same timeline, found by refinement (timeline_classes.hpp).
#include "timeline_classes.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include <wallfacer/core/log.hpp>

namespace wallfacer::detail {
namespace {

// The group a collective meets its members on, as the matched pairing reads it; -1: none.
int32_t meeting_group(const RankProgram& program, const Op& op) {
  if (!is_collective_stream(op.stream) || op.coll < 0) return -1;
  return program.collectives[size_t(op.coll)].group;
}

// Whom one rank's template meets, named in order of first appearance: its message ends by (side,
// peer, tag) and its collectives' groups. Two ranks with the same names at the same template ops
// pair their unrolled ops alike (the k-th end of a key meets the k-th other end of it; the k-th
// collective of a group the k-th of every member).
struct Meetings {
  struct End {
    bool send = false;
    int32_t peer = -1, tag = -1;
  };
  std::vector<End> ends;
  std::vector<int32_t> groups;
  std::vector<int64_t> code;  // by template op: end e as e + 1, group g as -(g + 2), -1 for neither
  std::map<std::tuple<bool, int32_t, int32_t>, int32_t> end_ids;
  std::unordered_map<int32_t, int32_t> group_ids;

  explicit Meetings(const RankProgram& program) {
    code.assign(program.ops.size(), -1);
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (is_message(op)) {
        const auto [it, fresh] = end_ids.try_emplace({op.kind == OpKind::Send, op.peer, op.tag}, int32_t(ends.size()));
        if (fresh) ends.push_back({op.kind == OpKind::Send, op.peer, op.tag});
        code[i] = it->second + 1;
      } else if (const int32_t group = meeting_group(program, op); group >= 0) {
        const auto [it, fresh] = group_ids.try_emplace(group, int32_t(groups.size()));
        if (fresh) groups.push_back(group);
        code[i] = -(it->second + 2);
      }
    }
  }
  int32_t end_id(bool send, int32_t peer, int32_t tag) const {
    const auto it = end_ids.find({send, peer, tag});
    return it == end_ids.end() ? -1 : it->second;
  }
};

// Dense ids of equal keys, numbered in order of first appearance.
class Numbering {
 public:
  uint32_t of(const std::vector<int64_t>& key) { return ids_.try_emplace(key, uint32_t(ids_.size())).first->second; }
  size_t size() const { return ids_.size(); }

 private:
  std::map<std::vector<int64_t>, uint32_t> ids_;
};

struct Refinement {
  const std::vector<ProgramView>& programs;
  std::vector<Meetings> meetings;           // by program
  std::vector<std::vector<int64_t>> other;  // by program, by end: the other end as program << 32 | its end id
  std::map<int32_t, std::vector<std::pair<size_t, int32_t>>> members;  // group -> (program, its id there)
  std::vector<uint32_t> colour;                                        // by program
  std::map<int32_t, uint32_t> group_colour;                            // group -> the colour of its members' multiset

  // The first partition: order, durations and where the ends and groups are. False when an end
  // has no other end among the programs, or a rank has two programs.
  bool start(const std::vector<std::vector<double>>& durations) {
    std::unordered_map<int, size_t> program_of;  // rank -> program
    for (size_t p = 0; p < programs.size(); ++p) {
      meetings.emplace_back(programs[p].program());
      if (!program_of.emplace(programs[p].rank(), p).second) return false;  // a rank twice: not every rank once
    }
    for (size_t p = 0; p < programs.size(); ++p) {
      other.emplace_back();
      for (const Meetings::End& e : meetings[p].ends) {
        const auto q = program_of.find(e.peer);
        if (q == program_of.end()) return false;
        const int32_t id = meetings[q->second].end_id(!e.send, programs[p].rank(), e.tag);
        if (id < 0) return false;
        other.back().push_back(int64_t(q->second) << 32 | id);
      }
      for (size_t g = 0; g < meetings[p].groups.size(); ++g)
        members[meetings[p].groups[g]].emplace_back(p, int32_t(g));
    }
    std::vector<size_t> firsts;  // the first program of each colour
    for (size_t p = 0; p < programs.size(); ++p) {
      auto alike = [&](size_t q) {
        return same_order(programs[q], programs[p]) && durations[q] == durations[p] &&
               meetings[q].code == meetings[p].code;
      };
      const auto found = std::find_if(firsts.begin(), firsts.end(), alike);
      colour.push_back(uint32_t(found - firsts.begin()));
      if (found == firsts.end()) firsts.push_back(p);
    }
    return true;
  }

  // One round: each program's colour and its partners' colours at each of its ends and groups.
  // Returns the number of colours.
  size_t split() {
    Numbering groups;
    group_colour.clear();
    for (const auto& [group, in] : members) {
      std::vector<std::pair<uint32_t, int32_t>> seen;
      for (const auto& [p, id] : in)
        seen.emplace_back(colour[p], id);
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> key;
      for (const auto& [c, id] : seen)
        key.insert(key.end(), {int64_t(c), int64_t(id)});
      group_colour[group] = groups.of(key);
    }
    Numbering colours;
    std::vector<uint32_t> next(programs.size());
    for (size_t p = 0; p < programs.size(); ++p) {
      std::vector<int64_t> key{colour[p]};
      for (const int64_t o : other[p])
        key.insert(key.end(), {int64_t(colour[size_t(o >> 32)]), o & 0xffffffff});
      for (const int32_t group : meetings[p].groups)
        key.push_back(group_colour[group]);
      next[p] = colours.of(key);
    }
    colour = std::move(next);
    return colours.size();
  }
};

// The representative of class c renamed after classes; false when two of its ends or groups
// would get one name.
bool rename(const Refinement& r, const RankClasses& classes, size_t c, RankProgram& out) {
  const size_t p = classes.representative[c];
  const RankProgram& given = r.programs[p].program();
  const Meetings& m = r.meetings[p];
  out.rank = int(c);
  out.ops = given.ops;
  out.deps = given.deps;
  out.collectives = given.collectives;
  // A send is named after the receiving class and the receive's id there, a receive after its own
  // id; the two agree since the receiver's class runs the same ids at the same ops. Two sends to
  // one class cannot get one name (their receivers name different ends of this rank, so the
  // refinement parts them), but two groups can (a rank and its like list both in opposite order).
  std::vector<std::pair<int32_t, int32_t>> names(m.ends.size());
  std::map<std::pair<int32_t, int32_t>, size_t> sends;
  for (size_t e = 0; e < m.ends.size(); ++e) {
    const auto q = size_t(r.other[p][e] >> 32);
    const auto id = int32_t(r.other[p][e] & 0xffffffff);
    names[e] = {int32_t(classes.class_of[q]), m.ends[e].send ? id : int32_t(e)};
    if (m.ends[e].send && !sends.emplace(names[e], e).second) return false;
  }
  std::map<uint32_t, int32_t> groups;
  for (const int32_t group : m.groups)
    if (!groups.emplace(r.group_colour.at(group), group).second) return false;
  for (Op& op : out.ops)
    if (is_message(op)) {
      const auto& [peer, tag] = names[size_t(m.end_id(op.kind == OpKind::Send, op.peer, op.tag))];
      op.peer = peer;
      op.tag = tag;
    }
  for (CollectiveSpec& spec : out.collectives)
    if (spec.group >= 0 && m.group_ids.count(spec.group)) spec.group = int32_t(r.group_colour.at(spec.group));
  return true;
}

}  // namespace

std::optional<RankClasses> rank_classes(const std::vector<ProgramView>& programs,
                                        const std::vector<std::vector<double>>& durations) {
  Refinement r{programs, {}, {}, {}, {}, {}};
  if (!r.start(durations)) return std::nullopt;
  // Refinement only splits classes (a program's colour is part of its key), so it ends once a
  // round splits none: at most one round per program.
  size_t count = 0;
  for (;;) {
    const size_t before = count;
    count = r.split();
    if (count == before || count == programs.size()) break;
  }
  WF_LOG_DEBUG("cost", "{} ranks timed as {} classes", programs.size(), count);
  if (count == programs.size()) return std::nullopt;
  // Each round numbers the colours in order of their first program: they are the classes.
  RankClasses classes;
  classes.class_of = r.colour;
  for (size_t p = 0; p < programs.size(); ++p)
    if (r.colour[p] == classes.representative.size()) classes.representative.push_back(p);
  classes.quotient.resize(classes.representative.size());
  for (size_t c = 0; c < classes.quotient.size(); ++c)
    if (!rename(r, classes, c, classes.quotient[c])) {
      WF_LOG_DEBUG("cost", "ranks of {} classes not timed as classes: a representative's names would merge",
                   classes.quotient.size());
      return std::nullopt;
    }
  return classes;
}

}  // namespace wallfacer::detail
