// A plan drawn over a TopologyScene: each communication group a path through its ranks' GPUs in
// its own colour (rings and sub-rings with arrows in ring order and each rank's position, other
// groups as dashed paths with halos), and link load from a simulation as heat colours. The plan
// view lists the groups and highlights one at a time.
#pragma once

#include <QColor>
#include <QString>

#include <vector>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/simulator/simulator.hpp>

class QGraphicsItemGroup;

namespace wallfacer::gui {

class TopologyScene;

struct GroupOverlay {
  int group = -1;  // index in Plan::groups
  QString name;
  GroupKind kind = GroupKind::Ring;
  QColor color;
  QGraphicsItemGroup* item = nullptr;
};

// Whether groups of this kind are ordered (drawn with direction and position).
bool is_ordered(GroupKind kind);

class PlanOverlay {
 public:
  // Adds one item group per plan group to the scene. The plan's GPUs must exist in the scene's
  // topology (check_plan_against_topology).
  PlanOverlay(TopologyScene& scene, const Plan& plan);
  ~PlanOverlay();
  PlanOverlay(const PlanOverlay&) = delete;
  PlanOverlay& operator=(const PlanOverlay&) = delete;

  const std::vector<GroupOverlay>& groups() const { return groups_; }
  // Shows only the groups of these kinds (all when empty).
  void show_kinds(const std::vector<GroupKind>& kinds);
  // Brings group i (an index into groups()) forward and dims the others; -1 shows all alike.
  void highlight(int index);
  int highlighted() const { return highlighted_; }

 private:
  TopologyScene& scene_;
  std::vector<GroupOverlay> groups_;
  int highlighted_ = -1;
};

// Per topology link, the larger of its two directions' utilisation and their bytes, from a
// simulation that kept every link (SimOptions::busiest_links = 0).
struct LinkLoad {
  std::vector<double> utilization, bytes;
  double max_utilization = 0, max_bytes = 0;
};
// Resources are named "a->b" or "a<->b" by device names; names the topology lacks are skipped.
LinkLoad link_load(const Topology& topology, const SimResult& result);
// Colours every link by its load (unused links grey) and adds the load to their tooltips.
void apply_heat(TopologyScene& scene, const LinkLoad& load);

}  // namespace wallfacer::gui
