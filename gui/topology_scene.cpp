#include <wallfacer/gui/topology_scene.hpp>

#include <QBrush>
#include <QFont>
#include <QGraphicsPathItem>
#include <QGraphicsRectItem>
#include <QGraphicsSimpleTextItem>
#include <QPainterPath>
#include <QPen>

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>

#include <wallfacer/gui/colors.hpp>

namespace wallfacer::gui {
namespace {

constexpr double kCell = 44, kRow = 46, kBoxW = 36, kBoxH = 22, kHeader = 20, kPad = 10, kNodeGap = 40;
constexpr double kTierGap = 150, kSwitchW = 64;
// Rows inside a node, top to bottom: NICs face the fabric above, GPUs sit between their PCIe
// switches and their NVSwitches.
int row_of(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Nic:
      return 0;
    case DeviceKind::Cpu:
    case DeviceKind::PcieSwitch:
      return 1;
    case DeviceKind::Gpu:
      return 2;
    case DeviceKind::NvSwitch:
      return 3;
    case DeviceKind::NetSwitch:
      return 0;
  }
  return 0;
}
constexpr int kRows = 4;

const char* short_label(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu:
      return "CPU";
    case DeviceKind::PcieSwitch:
      return "PCIe";
    case DeviceKind::NvSwitch:
      return "NVS";
    case DeviceKind::Nic:
      return "NIC";
    default:
      return "";
  }
}

QString device_tooltip(const Topology& topology, const Device& d) {
  QString text = QString("%1\n%2").arg(QString::fromStdString(d.name), to_string(d.kind));
  if (d.node >= 0) text += QString(", node %1, #%2").arg(d.node).arg(d.local_index);
  if (d.kind == DeviceKind::Gpu) {
    const GpuModel& g = topology.gpu();
    text += QString("\n%1, %2 GiB, %3 TFLOP/s bf16")
                .arg(QString::fromStdString(g.name))
                .arg(g.memory_GiB)
                .arg(g.peak_bf16_tflops);
  }
  return text;
}

// Fabric tier of each network switch: 1 for switches that NICs attach to, one more per hop up.
std::vector<int> switch_tiers(const Topology& topology) {
  const auto& devices = topology.devices();
  std::vector<std::vector<int>> neighbours(devices.size());
  for (const Link& l : topology.links()) {
    neighbours[size_t(l.a)].push_back(l.b);
    neighbours[size_t(l.b)].push_back(l.a);
  }
  std::vector<int> tier(devices.size(), -1);
  std::deque<int> queue;
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].kind == DeviceKind::Nic) tier[i] = 0, queue.push_back(int(i));
  while (!queue.empty()) {
    const int d = queue.front();
    queue.pop_front();
    for (int n : neighbours[size_t(d)])
      if (tier[size_t(n)] < 0 && devices[size_t(n)].kind == DeviceKind::NetSwitch) {
        tier[size_t(n)] = tier[size_t(d)] + 1;
        queue.push_back(n);
      }
  }
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].kind == DeviceKind::NetSwitch && tier[i] < 0) tier[i] = 1;
  return tier;
}

}  // namespace

QString item_kind(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Gpu:
      return "gpu";
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::PcieSwitch:
      return "pcie-switch";
    case DeviceKind::NvSwitch:
      return "nvswitch";
    case DeviceKind::Nic:
      return "nic";
    case DeviceKind::NetSwitch:
      return "net-switch";
  }
  return "device";
}

QString item_kind(LinkKind kind) {
  switch (kind) {
    case LinkKind::NvLink:
      return "link:nvlink";
    case LinkKind::Pcie:
      return "link:pcie";
    case LinkKind::CpuBus:
      return "link:cpu-bus";
    case LinkKind::Network:
      return "link:network";
  }
  return "link";
}

TopologyScene::TopologyScene(const Topology& topology, QObject* parent) : QGraphicsScene(parent), topology_(topology) {
  const size_t n = topology.devices().size();
  devices_.assign(n, nullptr);
  centers_.assign(n, QPointF());
  layout_nodes();
  layout_fabric();
  add_links();
  setSceneRect(itemsBoundingRect().adjusted(-20, -20, 20, 20));
}

void TopologyScene::layout_nodes() {
  const auto& devices = topology_.devices();
  const int nodes = topology_.num_nodes();
  // Devices of each node by row, in file order (local index order).
  std::vector<std::array<std::vector<int>, kRows>> rows(size_t(std::max(nodes, 0)));
  size_t widest = 1;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    if (d.node < 0 || d.node >= nodes) continue;
    auto& row = rows[size_t(d.node)][size_t(row_of(d.kind))];
    row.push_back(int(i));
    widest = std::max(widest, row.size());
  }
  node_width_ = double(widest) * kCell + 2 * kPad;
  node_height_ = kHeader + kRows * kRow + kPad;
  const int columns = std::max(1, std::min(nodes, std::max(4, int(std::ceil(std::sqrt(2.0 * nodes))))));
  nodes_width_ = columns * (node_width_ + kNodeGap) - kNodeGap;
  QFont font;
  font.setPointSizeF(7);
  for (int node = 0; node < nodes; ++node) {
    const double x0 = (node % columns) * (node_width_ + kNodeGap);
    const double y0 = (node / columns) * (node_height_ + kNodeGap);
    auto* frame = addRect(x0, y0, node_width_, node_height_, QPen(QColor(150, 150, 160), 1), QColor(246, 246, 250));
    frame->setZValue(-1);
    frame->setData(kKindKey, "node");
    frame->setData(kIndexKey, node);
    auto* label = addSimpleText(QString("node %1").arg(node), font);
    label->setPos(x0 + 4, y0 + 3);
    std::map<DeviceKind, int> counts;
    for (int r = 0; r < kRows; ++r) {
      const auto& row = rows[size_t(node)][size_t(r)];
      const double start = x0 + (node_width_ - double(row.size()) * kCell) / 2 + kCell / 2;
      for (size_t k = 0; k < row.size(); ++k) {
        add_device(row[k], QPointF(start + double(k) * kCell, y0 + kHeader + r * kRow + kRow / 2));
        ++counts[devices[size_t(row[k])].kind];
      }
    }
    QString summary = QString("node %1\n").arg(node);
    for (const auto& [kind, count] : counts)
      summary += QString("%1 %2  ").arg(count).arg(
          kind == DeviceKind::Gpu ? QString::fromStdString(topology_.gpu().name) : QString(to_string(kind)));
    auto* fold = addRect(x0, y0, node_width_, node_height_, QPen(QColor(90, 90, 110), 2), QColor(225, 235, 215));
    fold->setZValue(5);
    fold->setData(kKindKey, "node-summary");
    fold->setData(kIndexKey, node);
    fold->setToolTip(summary.trimmed());
    QFont big;
    big.setPointSizeF(node_width_ / 14);
    auto* text = new QGraphicsSimpleTextItem(QString("n%1\n%2 GPU").arg(node).arg(counts[DeviceKind::Gpu]), fold);
    text->setFont(big);
    text->setPos(x0 + 8, y0 + 6);
    fold->setVisible(false);
    summaries_.push_back(fold);
  }
}

void TopologyScene::add_device(int device, QPointF center) {
  const Device& d = topology_.devices()[size_t(device)];
  const double w = d.kind == DeviceKind::NetSwitch ? kSwitchW : kBoxW;
  auto* box = addRect(-w / 2, -kBoxH / 2, w, kBoxH, QPen(device_color(d.kind).darker(150), 1), device_color(d.kind));
  box->setPos(center);
  box->setZValue(2);
  box->setData(kKindKey, item_kind(d.kind));
  box->setData(kIndexKey, device);
  box->setToolTip(device_tooltip(topology_, d));
  box->setAcceptHoverEvents(true);
  QString text = d.kind == DeviceKind::Gpu         ? QString("GPU%1").arg(d.local_index)
                 : d.kind == DeviceKind::NetSwitch ? QString::fromStdString(d.name)
                                                   : QString(short_label(d.kind));
  QFont font;
  font.setPointSizeF(d.kind == DeviceKind::NetSwitch ? 5 : 6);
  auto* label = new QGraphicsSimpleTextItem(text, box);
  label->setFont(font);
  label->setPos(-label->boundingRect().width() / 2, -label->boundingRect().height() / 2);
  devices_[size_t(device)] = box;
  centers_[size_t(device)] = center;
  if (d.node >= 0) node_detail_.push_back(box);
}

void TopologyScene::layout_fabric() {
  const auto& devices = topology_.devices();
  const std::vector<int> tier = switch_tiers(topology_);
  // Taller tiers over wider clusters, so the links to the leaves do not lie flat.
  const double tier_gap = std::max(kTierGap, nodes_width_ / 12);
  std::map<int, std::vector<int>> by_tier;
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].node < 0) by_tier[tier[i] < 0 ? 1 : tier[i]].push_back(int(i));
  for (const auto& [t, members] : by_tier) {
    const double step = std::max(kSwitchW + 8, nodes_width_ / double(members.size()));
    const double width = step * double(members.size());
    const double start = (nodes_width_ - width) / 2 + step / 2;
    for (size_t k = 0; k < members.size(); ++k)
      add_device(members[k], QPointF(start + double(k) * step, -tier_gap * t));
  }
}

QString TopologyScene::link_tooltip(int link) const {
  const Link& l = topology_.links()[size_t(link)];
  const auto& devices = topology_.devices();
  return QString("%1: %2 <-> %3\n%4 GB/s per direction, %5 us, %6")
      .arg(to_string(l.kind), QString::fromStdString(devices[size_t(l.a)].name),
           QString::fromStdString(devices[size_t(l.b)].name))
      .arg(l.bandwidth_GBps)
      .arg(l.latency_us)
      .arg(l.full_duplex ? "full duplex" : "half duplex");
}

void TopologyScene::add_links() {
  const auto& links = topology_.links();
  const auto& devices = topology_.devices();
  double lo = 1e300, hi = 0;
  for (const Link& l : links)
    lo = std::min(lo, l.bandwidth_GBps), hi = std::max(hi, l.bandwidth_GBps);
  const double span = hi > lo ? std::log(hi / lo) : 1;
  links_.reserve(links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    const QPointF a = centers_[size_t(l.a)], b = centers_[size_t(l.b)];
    QPainterPath path(a);
    if (std::abs(a.y() - b.y()) < 1) {  // same row: an arc, so it does not run through the row
      const double bulge = 10 + std::min(30.0, std::abs(a.x() - b.x()) / 8);
      path.quadTo(QPointF((a.x() + b.x()) / 2, a.y() - bulge), b);
    } else {
      path.lineTo(b);
    }
    const double width = 0.6 + 3.4 * (hi > lo ? std::log(l.bandwidth_GBps / lo) / span : 1);
    auto* item = addPath(path, QPen(link_color(l.kind), width));
    item->setZValue(l.kind == LinkKind::Network ? 0.5 : 1);
    item->setData(kKindKey, item_kind(l.kind));
    item->setData(kIndexKey, int(i));
    item->setToolTip(link_tooltip(int(i)));
    links_.push_back(item);
    const int na = devices[size_t(l.a)].node, nb = devices[size_t(l.b)].node;
    if (na >= 0 && na == nb) node_detail_.push_back(item);
  }
}

void TopologyScene::reset_link_colors() {
  for (size_t i = 0; i < links_.size(); ++i) {
    QPen pen = links_[i]->pen();
    pen.setColor(link_color(topology_.links()[i].kind));
    links_[i]->setPen(pen);
    links_[i]->setToolTip(link_tooltip(int(i)));
  }
}

QPointF TopologyScene::device_center(int device) const {
  return centers_[size_t(device)];
}

void TopologyScene::set_folded(bool folded) {
  if (folded == folded_) return;
  folded_ = folded;
  for (QGraphicsItem* item : node_detail_)
    item->setVisible(!folded);
  for (QGraphicsRectItem* summary : summaries_)
    summary->setVisible(folded);
}

int count_items(const QGraphicsScene& scene, const QString& kind) {
  int n = 0;
  for (const QGraphicsItem* item : scene.items())
    if (item->data(kKindKey).toString() == kind) ++n;
  return n;
}

int TopologyScene::count_items(const QString& kind) const {
  return gui::count_items(*this, kind);
}

}  // namespace wallfacer::gui
