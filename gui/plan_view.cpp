#include <wallfacer/gui/plan_view.hpp>

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLinearGradient>
#include <QPainter>
#include <QSplitter>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <map>

#include <wallfacer/gui/colors.hpp>
#include <wallfacer/gui/topology_scene.hpp>
#include <wallfacer/gui/zoom_view.hpp>

namespace wallfacer::gui {
namespace {
const char* const kNoPlan = "No plan: File > Open plan, or Run > Plan and simulate.";
}  // namespace

HeatLegend::HeatLegend(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(64);
}

QSize HeatLegend::sizeHint() const {
  return {220, 64};
}

void HeatLegend::set_range(double max_utilization, double max_bytes) {
  max_utilization_ = max_utilization;
  max_bytes_ = max_bytes;
  update();
}

void HeatLegend::paintEvent(QPaintEvent*) {
  QPainter p(this);
  QFont font = p.font();
  font.setPointSizeF(8);
  p.setFont(font);
  if (max_bytes_ <= 0) {
    p.drawText(rect().adjusted(4, 4, -4, -4), Qt::TextWordWrap,
               "Link load: simulate the plan to colour links by load.");
    return;
  }
  const QRect bar(8, 22, width() - 16, 14);
  QLinearGradient gradient(bar.topLeft(), bar.topRight());
  for (int i = 0; i <= 10; ++i)
    gradient.setColorAt(i / 10.0, heat_color(i / 10.0));
  p.fillRect(bar, gradient);
  p.drawRect(bar);
  p.drawText(8, 16, "link load (busier direction)");
  p.drawText(8, bar.bottom() + 14, "0");
  const QString right = QString("%1 % / %2 MB").arg(100 * max_utilization_, 0, 'f', 1).arg(max_bytes_ / 1e6, 0, 'f', 0);
  p.drawText(QRect(bar.left(), bar.bottom() + 2, bar.width(), 16), Qt::AlignRight, right);
}

PlanView::PlanView(QWidget* parent) : QWidget(parent) {
  view_ = new TopologyView();
  groups_ = new QTreeWidget();
  groups_->setHeaderLabels({"group", "ranks"});
  groups_->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  legend_ = new HeatLegend();
  title_ = new QLabel(kNoPlan);
  title_->setWordWrap(true);
  auto* side = new QWidget();
  side->setMinimumWidth(230);
  auto* side_layout = new QVBoxLayout(side);
  side_layout->addWidget(title_);
  side_layout->addWidget(groups_, 1);
  side_layout->addWidget(legend_);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(side);
  split->addWidget(view_);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 4);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(split);
  connect(groups_, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem* item, QTreeWidgetItem*) {
    if (overlay_) overlay_->highlight(item ? item->data(0, Qt::UserRole).toInt() : -1);
  });
}

PlanView::~PlanView() {
  clear();
}

void PlanView::clear() {
  view_->set_topology_scene(nullptr);
  overlay_.reset();  // its items live in the scene
  scene_.reset();
  groups_->clear();
  legend_->set_range(0, 0);
  title_->setText(kNoPlan);
}

void PlanView::set_plan(std::unique_ptr<TopologyScene> scene, const Plan& plan) {
  clear();
  scene_ = std::move(scene);
  overlay_ = std::make_unique<PlanOverlay>(*scene_, plan);
  view_->set_topology_scene(scene_.get());
  title_->setText(QString("%1 %2 on %3: %4 ranks, %5 groups")
                      .arg(to_string(plan.strategy))
                      .arg(team_size(plan.params) > 1 ? QString("C=%1").arg(team_size(plan.params))
                                                      : QString("S=%1").arg(plan.params.sequence_parallel))
                      .arg(QString::fromStdString(plan.topology_name))
                      .arg(plan.num_ranks())
                      .arg(plan.groups.size()));
  fill_groups(plan);
}

void PlanView::fill_groups(const Plan& plan) {
  groups_->clear();
  std::map<GroupKind, QTreeWidgetItem*> kinds;
  const auto& overlays = overlay_->groups();
  auto* all = new QTreeWidgetItem(groups_, QStringList{"(all groups)", ""});
  all->setData(0, Qt::UserRole, -1);
  for (size_t i = 0; i < overlays.size(); ++i) {
    const GroupOverlay& g = overlays[i];
    QTreeWidgetItem*& parent = kinds[g.kind];
    if (!parent) {
      parent = new QTreeWidgetItem(groups_, QStringList{to_string(g.kind), ""});
      parent->setData(0, Qt::UserRole, -1);
    }
    const CommGroup& group = plan.groups[size_t(g.group)];
    auto* item = new QTreeWidgetItem(parent, QStringList{g.name, QString::number(group.ranks.size())});
    item->setData(0, Qt::UserRole, int(i));
    item->setForeground(0, g.color.darker(120));
    item->setIcon(0, [&] {
      QPixmap swatch(12, 12);
      swatch.fill(g.color);
      return QIcon(swatch);
    }());
  }
  groups_->expandAll();
}

void PlanView::select_group(int index) {
  for (QTreeWidgetItemIterator it(groups_); *it; ++it)
    if ((*it)->data(0, Qt::UserRole).toInt() == index && ((*it)->childCount() == 0 || index < 0)) {
      groups_->setCurrentItem(*it);
      return;
    }
  if (overlay_) overlay_->highlight(index);
}

void PlanView::set_load(const LinkLoad& load) {
  if (!scene_) return;
  apply_heat(*scene_, load);
  legend_->set_range(load.max_utilization, load.max_bytes);
}

}  // namespace wallfacer::gui
