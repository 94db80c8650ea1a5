// The scenes the views show, inspected item by item: the topology of two DGX H100 nodes (devices
// per kind, every link an edge between its two devices, folding), 1,024 GPUs folding when fitted,
// a WallFacer plan's groups (one item per group, distinct colours, ring order and direction,
// highlighting), link load from a real simulation, and the timeline of its trace.
#include <gtest/gtest.h>

#include <QGraphicsEllipseItem>
#include <QGraphicsItemGroup>
#include <QGraphicsPathItem>
#include <QGraphicsPolygonItem>
#include <QGraphicsSimpleTextItem>
#include <QPen>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include <wallfacer/gui/colors.hpp>
#include <wallfacer/gui/plan_overlay.hpp>
#include <wallfacer/gui/timeline_scene.hpp>
#include <wallfacer/gui/topology_scene.hpp>
#include <wallfacer/gui/trace_model.hpp>
#include <wallfacer/gui/zoom_view.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "gui_fixture.hpp"

namespace wallfacer::test {
namespace {

using gui::kIndexKey;
using gui::kKindKey;

class GuiScene : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gui_app();
    topology_ = new Topology(Topology::load("dgx-h100", 2));
    plan_ = new Plan(wallfacer_plan(*topology_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(scratch_dir("scene"));
    delete plan_;
    delete topology_;
  }
  static Topology* topology_;
  static Plan* plan_;
};
Topology* GuiScene::topology_ = nullptr;
Plan* GuiScene::plan_ = nullptr;

TEST_F(GuiScene, TwoDgxH100NodesHaveEveryDeviceInItsBox) {
  gui::TopologyScene scene(*topology_);
  // docs/hardware.md: a DGX H100 has 8 GPUs, 2 CPUs and 8 ConnectX-7 NICs, one PCIe switch per GPU.
  EXPECT_EQ(scene.count_items("gpu"), 16);
  EXPECT_EQ(scene.count_items("cpu"), 4);
  EXPECT_EQ(scene.count_items("nic"), 16);
  EXPECT_EQ(scene.count_items("pcie-switch"), 16);
  EXPECT_EQ(scene.count_items("node"), 2);
  EXPECT_EQ(scene.count_items("node-summary"), 2);
  std::map<DeviceKind, int> expected;
  for (const Device& d : topology_->devices())
    ++expected[d.kind];
  for (const auto& [kind, count] : expected)
    EXPECT_EQ(scene.count_items(gui::item_kind(kind)), count) << to_string(kind);
  EXPECT_GE(scene.count_items("nvswitch"), 2);
  EXPECT_GE(scene.count_items("net-switch"), 1);
  // Each node's devices lie inside that node's box; fabric switches above every box.
  std::map<int, QRectF> boxes;
  for (QGraphicsItem* item : scene.items())
    if (item->data(kKindKey).toString() == "node") boxes[item->data(kIndexKey).toInt()] = item->sceneBoundingRect();
  ASSERT_EQ(boxes.size(), 2u);
  for (size_t i = 0; i < topology_->devices().size(); ++i) {
    const Device& d = topology_->devices()[i];
    const QPointF c = scene.device_center(int(i));
    if (d.node >= 0)
      EXPECT_TRUE(boxes[d.node].contains(c)) << d.name;
    else
      EXPECT_LT(c.y(), boxes[0].top()) << d.name;
  }
}

TEST_F(GuiScene, EveryLinkIsAnEdgeBetweenItsDevicesWithItsKindAndWidthByBandwidth) {
  gui::TopologyScene scene(*topology_);
  const auto& links = topology_->links();
  std::map<LinkKind, int> per_kind;
  for (const Link& l : links)
    ++per_kind[l.kind];
  for (const auto& [kind, count] : per_kind)
    EXPECT_EQ(scene.count_items(gui::item_kind(kind)), count) << to_string(kind);
  // 8 GPUs per node each reach the NVSwitch fabric.
  EXPECT_GE(per_kind[LinkKind::NvLink], 16);
  for (size_t i = 0; i < links.size(); ++i) {
    const QPainterPath path = scene.link_item(int(i))->path();
    EXPECT_EQ(path.pointAtPercent(0), scene.device_center(links[i].a)) << i;
    EXPECT_EQ(path.pointAtPercent(1), scene.device_center(links[i].b)) << i;
    EXPECT_EQ(scene.link_item(int(i))->data(kIndexKey).toInt(), int(i));
    for (size_t j = 0; j < links.size(); ++j)
      if (links[j].bandwidth_GBps > links[i].bandwidth_GBps) {
        ASSERT_GT(scene.link_item(int(j))->pen().widthF(), scene.link_item(int(i))->pen().widthF());
      }
  }
  EXPECT_EQ(scene.link_item(0)->pen().color(), gui::link_color(links[0].kind));
  EXPECT_FALSE(scene.link_item(0)->toolTip().isEmpty());
  EXPECT_TRUE(scene.device_item(topology_->gpu_device(3))->toolTip().contains("n0/gpu3"));
}

TEST_F(GuiScene, EveryPresetHasAnItemPerDeviceAndAnEdgePerLink) {
  for (const std::string& name : Topology::preset_names()) {
    const Topology topology = Topology::load(name);
    gui::TopologyScene scene(topology);
    int devices = 0, links = 0;
    for (const QGraphicsItem* item : scene.items()) {
      const QString kind = item->data(kKindKey).toString();
      links += kind.startsWith("link:");
      devices += item->data(kIndexKey).isValid() && !kind.startsWith("link:") && !kind.startsWith("node");
    }
    EXPECT_EQ(devices, int(topology.devices().size())) << name;
    EXPECT_EQ(links, int(topology.links().size())) << name;
    // No two devices share a spot.
    std::set<std::pair<double, double>> spots;
    for (size_t i = 0; i < topology.devices().size(); ++i)
      spots.insert({scene.device_center(int(i)).x(), scene.device_center(int(i)).y()});
    EXPECT_EQ(spots.size(), topology.devices().size()) << name;
  }
}

TEST_F(GuiScene, FoldingHidesTheDevicesInsideNodesAndShowsTheirSummaries) {
  gui::TopologyScene scene(*topology_);
  QGraphicsItem* gpu = scene.device_item(topology_->gpu_device(0));
  ASSERT_TRUE(gpu->isVisible());
  scene.set_folded(true);
  EXPECT_FALSE(gpu->isVisible());
  int shown = 0;
  for (QGraphicsItem* item : scene.items())
    if (item->data(kKindKey).toString() == "node-summary") shown += item->isVisible();
  EXPECT_EQ(shown, 2);
  for (size_t i = 0; i < topology_->links().size(); ++i) {
    const Link& l = topology_->links()[i];
    const bool inside = topology_->devices()[size_t(l.a)].node >= 0 &&
                        topology_->devices()[size_t(l.a)].node == topology_->devices()[size_t(l.b)].node;
    EXPECT_EQ(scene.link_item(int(i))->isVisible(), !inside) << i;
  }
  scene.set_folded(false);
  EXPECT_TRUE(gpu->isVisible());
}

TEST_F(GuiScene, AThousandGpusFoldWhenFittedAndOpenWhenZoomedIn) {
  const Topology big = Topology::load("dgx-h100", 128);
  ASSERT_EQ(big.num_gpus(), 1024);
  gui::TopologyScene scene(big);
  EXPECT_EQ(scene.count_items("gpu"), 1024);
  gui::TopologyView view;
  view.resize(1280, 800);
  view.set_topology_scene(&scene);
  EXPECT_TRUE(scene.folded());
  EXPECT_LT(view.transform().m11() * scene.node_width(), gui::TopologyView::kFoldBelowPixels);
  view.zoom(1.0 * gui::TopologyView::kFoldBelowPixels / (view.transform().m11() * scene.node_width()) * 1.5);
  EXPECT_FALSE(scene.folded());
  view.set_topology_scene(nullptr);
}

TEST_F(GuiScene, EveryGroupOfTheWallFacerPlanIsDrawnInItsOwnColour) {
  gui::TopologyScene scene(*topology_);
  gui::PlanOverlay overlay(scene, *plan_);
  std::set<GroupKind> kinds;
  for (const CommGroup& g : plan_->groups)
    kinds.insert(g.kind);
  EXPECT_TRUE(kinds.count(GroupKind::Team));
  EXPECT_TRUE(kinds.count(GroupKind::SubRing));
  ASSERT_EQ(overlay.groups().size(), plan_->groups.size());
  EXPECT_EQ(scene.count_items("group"), int(plan_->groups.size()));
  std::set<QRgb> colors;
  for (const gui::GroupOverlay& g : overlay.groups()) {
    colors.insert(g.color.rgb());
    const CommGroup& group = plan_->groups[size_t(g.group)];
    EXPECT_EQ(g.name.toStdString(), group.name);
    int halos = 0, arrows = 0, labels = 0;
    for (QGraphicsItem* child : g.item->childItems()) {
      if (auto* halo = dynamic_cast<QGraphicsEllipseItem*>(child)) {
        ++halos;
        EXPECT_EQ(halo->pen().color(), g.color);
      }
      arrows += dynamic_cast<QGraphicsPolygonItem*>(child) != nullptr;
      labels += dynamic_cast<QGraphicsSimpleTextItem*>(child) != nullptr;
    }
    EXPECT_EQ(halos, int(group.ranks.size())) << group.name;
    if (gui::is_ordered(group.kind)) {
      // One arrow per ring step (the ring closes) and each rank's position in the ring.
      EXPECT_EQ(arrows, group.ranks.size() > 1 ? int(group.ranks.size()) : 0) << group.name;
      EXPECT_EQ(labels, int(group.ranks.size())) << group.name;
    } else {
      EXPECT_EQ(arrows, 0) << group.name;
    }
  }
  EXPECT_EQ(colors.size(), overlay.groups().size()) << "two groups share a colour";
  overlay.highlight(1);
  EXPECT_EQ(overlay.groups()[1].item->opacity(), 1.0);
  EXPECT_LT(overlay.groups()[0].item->opacity(), 0.5);
  EXPECT_GT(overlay.groups()[1].item->zValue(), overlay.groups()[0].item->zValue());
  overlay.highlight(-1);
  EXPECT_EQ(overlay.groups()[0].item->opacity(), 1.0);
  overlay.show_kinds({GroupKind::Team});
  for (const gui::GroupOverlay& g : overlay.groups())
    EXPECT_EQ(g.item->isVisible(), g.kind == GroupKind::Team);
}

TEST_F(GuiScene, ARingIsDrawnInRingOrderThroughItsRanksGpus) {
  gui::TopologyScene scene(*topology_);
  gui::PlanOverlay overlay(scene, *plan_);
  for (const gui::GroupOverlay& g : overlay.groups()) {
    const CommGroup& group = plan_->groups[size_t(g.group)];
    if (!gui::is_ordered(group.kind) || group.ranks.size() < 2) continue;
    std::vector<QGraphicsPathItem*> arcs;
    for (QGraphicsItem* child : g.item->childItems())
      if (auto* arc = dynamic_cast<QGraphicsPathItem*>(child)) arcs.push_back(arc);
    ASSERT_EQ(arcs.size(), group.ranks.size());
    for (size_t i = 0; i < arcs.size(); ++i) {
      auto gpu_at = [&](size_t k) {
        return scene.device_center(
            topology_->gpu_device(plan_->ranks[size_t(group.ranks[k % group.ranks.size()])].gpu));
      };
      // Arcs start and end at the GPUs (shifted by the group's offset) of consecutive ranks.
      const QPointF from = arcs[i]->path().pointAtPercent(0), to = arcs[i]->path().pointAtPercent(1);
      EXPECT_LT(QLineF(from - gpu_at(i), to - gpu_at(i + 1)).length(), 1e-6) << group.name << " step " << i;
      EXPECT_LT(QLineF(QPointF(), from - gpu_at(i)).length(), 10) << group.name;
    }
    return;
  }
  FAIL() << "the plan has no ring of two or more ranks";
}

TEST_F(GuiScene, LinkLoadFromASimulationColoursEveryUsedLink) {
  SimOptions options;
  options.busiest_links = 0;
  const SimResult result = simulate(*plan_, *topology_, options);
  const gui::LinkLoad load = gui::link_load(*topology_, result);
  ASSERT_GT(result.busiest_links.size(), 10u);  // every used resource, not only the top ten
  double max_bytes = 0, max_util = 0;
  for (const LinkStats& s : result.busiest_links)
    max_bytes = std::max(max_bytes, s.bytes), max_util = std::max(max_util, s.utilization);
  EXPECT_DOUBLE_EQ(load.max_bytes, max_bytes);
  EXPECT_DOUBLE_EQ(load.max_utilization, max_util);
  // Each link carries the busier of its directions, so the class totals bound the sum from above.
  std::map<LinkKind, double> per_kind;
  for (size_t i = 0; i < load.bytes.size(); ++i)
    per_kind[topology_->links()[i].kind] += load.bytes[i];
  for (const LinkClassStats& c : result.link_classes) {
    EXPECT_LE(per_kind[c.kind], c.bytes * (1 + 1e-12)) << to_string(c.kind);
    EXPECT_GE(per_kind[c.kind] * 2, c.bytes * (1 - 1e-12)) << to_string(c.kind);
  }
  gui::TopologyScene scene(*topology_);
  gui::apply_heat(scene, load);
  int hottest = -1;
  for (size_t i = 0; i < load.bytes.size(); ++i)
    if (hottest < 0 || load.utilization[i] > load.utilization[size_t(hottest)]) hottest = int(i);
  EXPECT_EQ(scene.link_item(hottest)->pen().color(), gui::heat_color(1.0));
  EXPECT_TRUE(scene.link_item(hottest)->toolTip().contains("utilised"));
  for (size_t i = 0; i < load.bytes.size(); ++i)
    if (load.bytes[i] == 0) {
      EXPECT_EQ(scene.link_item(int(i))->pen().color(), QColor(200, 200, 205));
    }
}

TEST_F(GuiScene, TheTimelineHoldsEveryOpOfTheTraceAndItsCriticalPath) {
  const auto trace = scratch_dir("scene") / "trace.json";
  SimOptions options;
  options.trace_path = trace.string();
  const SimResult result = simulate(*plan_, *topology_, options);
  const gui::TraceModel model = gui::read_trace_file(trace.string());
  ASSERT_EQ(model.ranks.size(), size_t(plan_->num_ranks()));
  // Counted independently from the JSON: complete slices of the rank processes, flow pairs.
  std::ifstream in(trace);
  const nlohmann::json doc = nlohmann::json::parse(in);
  size_t slices = 0, flows = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"].get<int>() < plan_->num_ranks()) ++slices;
    if (e["ph"] == "f") ++flows;
  }
  EXPECT_EQ(model.slices.size(), slices);
  size_t paired = 0;
  for (const gui::TraceSlice& s : model.slices)
    if (s.flow_from >= 0) {
      ++paired;
      EXPECT_EQ(s.stream, gui::Stream::Recv);
      EXPECT_EQ(model.slices[size_t(s.flow_from)].stream, gui::Stream::Send);
      EXPECT_NEAR(model.slices[size_t(s.flow_from)].start_us, s.start_us, 1e-3);
    }
  EXPECT_EQ(paired, flows);
  EXPECT_GT(flows, 0u);
  EXPECT_NEAR(model.end_us, result.step_ms * 1e3, 1e-2);
  // The path ends with the step and never runs backwards in time.
  ASSERT_FALSE(model.critical_path.empty());
  EXPECT_NEAR(model.slices[size_t(model.critical_path.back())].end_us(), model.end_us, 1e-6);
  for (size_t i = 1; i < model.critical_path.size(); ++i) {
    const gui::TraceSlice& a = model.slices[size_t(model.critical_path[i - 1])];
    const gui::TraceSlice& b = model.slices[size_t(model.critical_path[i])];
    const bool message = b.flow_from == model.critical_path[i - 1] || a.flow_from == model.critical_path[i];
    EXPECT_TRUE(a.end_us() <= b.start_us + 1e-3 || message) << i;
  }
  gui::TimelineScene scene(model);
  EXPECT_EQ(gui::count_items(scene, "slice") + gui::count_items(scene, "slice-critical"), int(slices));
  EXPECT_EQ(scene.critical_items(), int(model.critical_path.size()));
  EXPECT_EQ(gui::count_items(scene, "rank-band"), plan_->num_ranks());
}

}  // namespace
}  // namespace wallfacer::test
