#include <wallfacer/gui/plan_overlay.hpp>

#include <QBrush>
#include <QFont>
#include <QGraphicsEllipseItem>
#include <QGraphicsItemGroup>
#include <QGraphicsPathItem>
#include <QGraphicsPolygonItem>
#include <QGraphicsSimpleTextItem>
#include <QPainterPath>
#include <QPen>
#include <QtMath>

#include <algorithm>
#include <map>

#include <wallfacer/gui/colors.hpp>
#include <wallfacer/gui/topology_scene.hpp>

namespace wallfacer::gui {
namespace {

constexpr int kLabelledRanksMax = 64;  // position labels only on rings this short

QPointF perpendicular(QPointF d) {
  const double len = std::max(1e-9, std::hypot(d.x(), d.y()));
  return QPointF(-d.y() / len, d.x() / len);
}

// One ring segment a -> b as an arc bowed to its right, so a -> b and b -> a stay apart, with an
// arrowhead at its middle.
void add_ring_segment(QList<QGraphicsItem*>& items, QPointF a, QPointF b, const QPen& pen) {
  const QPointF d = b - a, n = perpendicular(d);
  const double bow = std::min(40.0, 0.12 * std::hypot(d.x(), d.y()));
  const QPointF control = (a + b) / 2 + n * bow * 2;
  QPainterPath path(a);
  path.quadTo(control, b);
  auto* arc = new QGraphicsPathItem(path);
  arc->setPen(pen);
  items.push_back(arc);
  const QPointF mid = path.pointAtPercent(0.5);
  const double angle = qDegreesToRadians(-path.angleAtPercent(0.5));
  const QPointF dir(std::cos(angle), std::sin(angle)), side = perpendicular(dir);
  const double s = 3 + pen.widthF() * 2;
  QPolygonF head;
  head << mid + dir * s << mid - dir * s + side * s * 0.7 << mid - dir * s - side * s * 0.7;
  auto* arrow = new QGraphicsPolygonItem(head);
  arrow->setPen(Qt::NoPen);
  arrow->setBrush(pen.color());
  items.push_back(arrow);
}

QGraphicsItemGroup* build_group(TopologyScene& scene, const Plan& plan, const CommGroup& group, QColor color,
                                QPointF offset) {
  std::vector<QPointF> points;
  for (int r : group.ranks)
    points.push_back(scene.device_center(scene.topology().gpu_device(plan.ranks[size_t(r)].gpu)) + offset);
  QList<QGraphicsItem*> items;
  QPen pen(color, 2.2);
  if (is_ordered(group.kind)) {
    for (size_t i = 0; i < points.size() && points.size() > 1; ++i)
      add_ring_segment(items, points[i], points[(i + 1) % points.size()], pen);
    if (points.size() <= size_t(kLabelledRanksMax)) {
      QFont font;
      font.setPointSizeF(6);
      font.setBold(true);
      for (size_t i = 0; i < points.size(); ++i) {
        auto* label = new QGraphicsSimpleTextItem(QString::number(i));
        label->setFont(font);
        label->setBrush(color.darker(160));
        label->setPos(points[i] + QPointF(-16, -20));
        items.push_back(label);
      }
    }
  } else {
    pen.setStyle(Qt::DashLine);
    QPainterPath path(points.front());
    for (size_t i = 1; i < points.size(); ++i)
      path.lineTo(points[i]);
    auto* line = new QGraphicsPathItem(path);
    line->setPen(pen);
    items.push_back(line);
  }
  for (QPointF p : points) {
    auto* halo = new QGraphicsEllipseItem(p.x() - 14, p.y() - 14, 28, 28);
    halo->setPen(QPen(color, 1.5));
    halo->setBrush(Qt::NoBrush);
    items.push_back(halo);
  }
  for (QGraphicsItem* item : items)
    scene.addItem(item);
  return scene.createItemGroup(items);
}

}  // namespace

bool is_ordered(GroupKind kind) {
  return kind == GroupKind::Ring || kind == GroupKind::SubRing || kind == GroupKind::Window ||
         kind == GroupKind::InterWindow;
}

PlanOverlay::PlanOverlay(TopologyScene& scene, const Plan& plan) : scene_(scene) {
  std::map<GroupKind, int> per_kind;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const CommGroup& group = plan.groups[g];
    if (group.ranks.empty()) continue;
    const int k = per_kind[group.kind]++;
    const QColor color = group_color(group.kind, k);
    // Groups of one kind are shifted apart a little, so groups over the same GPUs stay visible.
    const QPointF offset((k % 5 - 2) * 2.5, (k % 5 - 2) * 2.5);
    QGraphicsItemGroup* item = build_group(scene, plan, group, color, offset);
    item->setZValue(10);
    item->setData(kKindKey, "group");
    item->setData(kIndexKey, int(g));
    QString members;
    for (size_t i = 0; i < group.ranks.size() && i < 32; ++i)
      members += (i ? " " : "") + QString::number(group.ranks[i]);
    if (group.ranks.size() > 32) members += " ...";
    item->setToolTip(QString("%1 (%2, %3 ranks)\nranks %4")
                         .arg(QString::fromStdString(group.name), to_string(group.kind))
                         .arg(group.ranks.size())
                         .arg(members));
    groups_.push_back({int(g), QString::fromStdString(group.name), group.kind, color, item});
  }
}

PlanOverlay::~PlanOverlay() {
  for (GroupOverlay& g : groups_) {
    delete g.item;  // and its children
  }
}

void PlanOverlay::show_kinds(const std::vector<GroupKind>& kinds) {
  for (GroupOverlay& g : groups_)
    g.item->setVisible(kinds.empty() || std::find(kinds.begin(), kinds.end(), g.kind) != kinds.end());
}

void PlanOverlay::highlight(int index) {
  highlighted_ = index;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const bool on = index < 0 || int(i) == index;
    groups_[i].item->setOpacity(on ? 1.0 : 0.12);
    groups_[i].item->setZValue(index >= 0 && int(i) == index ? 20 : 10);
  }
}

LinkLoad link_load(const Topology& topology, const SimResult& result) {
  const auto& links = topology.links();
  std::map<std::pair<int, int>, int> by_ends;
  for (size_t i = 0; i < links.size(); ++i)
    by_ends.emplace(std::minmax(links[i].a, links[i].b), int(i));
  LinkLoad load;
  load.utilization.assign(links.size(), 0);
  load.bytes.assign(links.size(), 0);
  for (const LinkStats& s : result.busiest_links) {
    size_t arrow = s.name.find("<->");
    size_t width = 3;
    if (arrow == std::string::npos) arrow = s.name.find("->"), width = 2;
    if (arrow == std::string::npos) continue;
    const int a = topology.device_id(s.name.substr(0, arrow)), b = topology.device_id(s.name.substr(arrow + width));
    auto it = by_ends.find(std::minmax(a, b));
    if (a < 0 || b < 0 || it == by_ends.end()) continue;
    const size_t l = size_t(it->second);
    load.utilization[l] = std::max(load.utilization[l], s.utilization);
    load.bytes[l] = std::max(load.bytes[l], s.bytes);
    load.max_utilization = std::max(load.max_utilization, s.utilization);
    load.max_bytes = std::max(load.max_bytes, s.bytes);
  }
  return load;
}

void apply_heat(TopologyScene& scene, const LinkLoad& load) {
  for (size_t i = 0; i < load.utilization.size(); ++i) {
    QGraphicsPathItem* item = scene.link_item(int(i));
    QPen pen = item->pen();
    const bool used = load.bytes[i] > 0;
    // Relative to the busiest link, so the hot spots stand out whatever the absolute load.
    const double scale = load.max_utilization > 0 ? load.utilization[i] / load.max_utilization : 0;
    pen.setColor(used ? heat_color(scale) : QColor(200, 200, 205));
    item->setPen(pen);
    item->setToolTip(scene.link_tooltip(int(i)) + QString("\nsimulated: %1 MB, %2 % utilised (busier direction)")
                                                      .arg(load.bytes[i] / 1e6, 0, 'f', 1)
                                                      .arg(100 * load.utilization[i], 0, 'f', 1));
  }
}

}  // namespace wallfacer::gui
