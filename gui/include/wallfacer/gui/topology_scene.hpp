// The topology as a QGraphicsScene: each node a box holding its GPUs, NVSwitches, PCIe switches,
// CPUs and NICs in rows, the fabric switches in tiers above the nodes, and every link a line
// coloured by kind and as wide as its bandwidth. Items carry their kind and index as item data
// (kKindKey, kIndexKey) so tests and views can find them. When zoomed out a node folds into a
// summary box and hides its devices and internal links, which keeps 1,024 GPUs fast to draw.
// No widget code here: the views wrap this scene.
#pragma once

#include <QGraphicsScene>
#include <QString>

#include <vector>

#include <wallfacer/topology/topology.hpp>

class QGraphicsItem;
class QGraphicsPathItem;
class QGraphicsRectItem;

namespace wallfacer::gui {

// Item data keys: the kind ("gpu", "nvswitch", "link:nvlink", "node", "node-summary", "group",
// ...) and the device, link, node or group index.
constexpr int kKindKey = 0;
constexpr int kIndexKey = 1;

// "gpu", "cpu", "pcie-switch", "nvswitch", "nic", "net-switch".
QString item_kind(DeviceKind kind);
// "link:nvlink", "link:pcie", "link:cpu-bus", "link:network".
QString item_kind(LinkKind kind);
// Items of a scene whose kind (kKindKey) is `kind`.
int count_items(const QGraphicsScene& scene, const QString& kind);

class TopologyScene : public QGraphicsScene {
 public:
  explicit TopologyScene(const Topology& topology, QObject* parent = nullptr);

  const Topology& topology() const { return topology_; }
  // Centre of a device's box in scene coordinates.
  QPointF device_center(int device) const;
  QGraphicsItem* device_item(int device) const { return devices_[size_t(device)]; }
  QGraphicsPathItem* link_item(int link) const { return links_[size_t(link)]; }
  // Scene width of one node's box (the views fold nodes when it is small on screen).
  double node_width() const { return node_width_; }
  // Folds (summary boxes, devices and node-internal links hidden) or opens every node.
  void set_folded(bool folded);
  bool folded() const { return folded_; }
  // Items whose kind (kKindKey) is `kind`.
  int count_items(const QString& kind) const;
  // Restores every link's kind colour and tooltip (after a heat overlay).
  void reset_link_colors();
  // The tooltip text of a link, for overlays that add to it.
  QString link_tooltip(int link) const;

 private:
  void layout_nodes();
  void layout_fabric();
  void add_device(int device, QPointF center);
  void add_links();

  const Topology& topology_;
  std::vector<QGraphicsItem*> devices_;
  std::vector<QPointF> centers_;
  std::vector<QGraphicsPathItem*> links_;
  std::vector<QGraphicsRectItem*> summaries_;
  std::vector<QGraphicsItem*> node_detail_;  // devices and links inside nodes
  double node_width_ = 0, node_height_ = 0;
  double nodes_width_ = 0;  // of the grid of nodes
  bool folded_ = false;
};

}  // namespace wallfacer::gui
