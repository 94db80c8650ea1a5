// QGraphicsView with wheel zoom around the cursor and drag to pan. The topology flavour folds the
// scene's nodes when a node is small on screen; the timeline flavour zooms time only and draws
// the time ruler and the track labels in margins beside the scene.
#pragma once

#include <QGraphicsView>

namespace wallfacer::gui {

class TopologyScene;
class TimelineScene;

class ZoomView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit ZoomView(QWidget* parent = nullptr);
  // Scales by `factor` about a viewport point (the centre when none).
  void zoom(double factor);
  void zoom_at(double factor, QPoint viewport_pos);
  // Fits the whole scene into the viewport.
  void fit();

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  virtual void after_zoom() {}
  bool horizontal_only_ = false;
  bool fitted_ = false;
};

class TopologyView : public ZoomView {
  Q_OBJECT
 public:
  explicit TopologyView(QWidget* parent = nullptr);
  void set_topology_scene(TopologyScene* scene);
  // A node box narrower than this on screen folds into its summary.
  static constexpr double kFoldBelowPixels = 140;

 protected:
  void after_zoom() override;

 private:
  TopologyScene* topology_ = nullptr;
};

class TimelineView : public ZoomView {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void set_timeline_scene(TimelineScene* scene);
  static constexpr int kRulerHeight = 22;
  static constexpr int kLabelWidth = 170;

 protected:
  bool event(QEvent* event) override;
  void scrollContentsBy(int dx, int dy) override;
  void after_zoom() override { update(); }

 private:
  void paint_margins();
  TimelineScene* timeline_ = nullptr;
};

}  // namespace wallfacer::gui
