// The plan view: the topology with the plan's groups overlaid, a side list of the groups by kind
// (selecting one highlights it) and the legend of the link-load heat colours (bytes and
// utilisation) when a simulation has run.
#pragma once

#include <QWidget>

#include <memory>

#include <wallfacer/gui/plan_overlay.hpp>

class QTreeWidget;
class QLabel;

namespace wallfacer::gui {

class TopologyScene;
class TopologyView;

class HeatLegend : public QWidget {
  Q_OBJECT
 public:
  explicit HeatLegend(QWidget* parent = nullptr);
  void set_range(double max_utilization, double max_bytes);
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  double max_utilization_ = 0, max_bytes_ = 0;
};

class PlanView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanView(QWidget* parent = nullptr);
  ~PlanView() override;
  // Takes the scene (built for the plan's topology) and overlays the plan.
  void set_plan(std::unique_ptr<TopologyScene> scene, const Plan& plan);
  void set_load(const LinkLoad& load);
  void clear();
  void select_group(int index);
  PlanOverlay* overlay() const { return overlay_.get(); }
  TopologyScene* scene() const { return scene_.get(); }
  TopologyView* view() const { return view_; }

 private:
  void fill_groups(const Plan& plan);

  std::unique_ptr<TopologyScene> scene_;
  std::unique_ptr<PlanOverlay> overlay_;
  TopologyView* view_ = nullptr;
  QTreeWidget* groups_ = nullptr;
  HeatLegend* legend_ = nullptr;
  QLabel* title_ = nullptr;
};

}  // namespace wallfacer::gui
