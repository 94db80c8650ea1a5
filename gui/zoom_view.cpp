#include <wallfacer/gui/zoom_view.hpp>

#include <QPainter>
#include <QScrollBar>
#include <QWheelEvent>

#include <cmath>

#include <wallfacer/gui/timeline_scene.hpp>
#include <wallfacer/gui/topology_scene.hpp>

namespace wallfacer::gui {

ZoomView::ZoomView(QWidget* parent) : QGraphicsView(parent) {
  setDragMode(QGraphicsView::ScrollHandDrag);
  setRenderHint(QPainter::Antialiasing);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setBackgroundBrush(Qt::white);
}

void ZoomView::zoom(double factor) {
  zoom_at(factor, viewport()->rect().center());
}

void ZoomView::zoom_at(double factor, QPoint viewport_pos) {
  const QPointF before = mapToScene(viewport_pos);
  scale(factor, horizontal_only_ ? 1.0 : factor);
  const QPointF after = mapToScene(viewport_pos);
  const QPointF shift = mapFromScene(after) - mapFromScene(before);
  horizontalScrollBar()->setValue(horizontalScrollBar()->value() - int(shift.x()));
  verticalScrollBar()->setValue(verticalScrollBar()->value() - int(shift.y()));
  fitted_ = false;
  after_zoom();
}

void ZoomView::fit() {
  if (!scene()) return;
  if (horizontal_only_) {
    const QRectF r = sceneRect();
    resetTransform();
    const double sx = r.width() > 0 ? double(viewport()->width() - 10) / r.width() : 1.0;
    scale(sx, 1.0);
    centerOn(r.center().x(), r.top());
  } else {
    fitInView(sceneRect(), Qt::KeepAspectRatio);
  }
  fitted_ = true;
  after_zoom();
}

void ZoomView::wheelEvent(QWheelEvent* event) {
  const double factor = std::pow(1.0015, event->angleDelta().y());
  zoom_at(factor, event->position().toPoint());
  event->accept();
}

void ZoomView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  if (fitted_) fit();
}

TopologyView::TopologyView(QWidget* parent) : ZoomView(parent) {}

void TopologyView::set_topology_scene(TopologyScene* scene) {
  topology_ = scene;
  setScene(scene);
  fit();
}

void TopologyView::after_zoom() {
  if (!topology_) return;
  topology_->set_folded(transform().m11() * topology_->node_width() < kFoldBelowPixels);
}

TimelineView::TimelineView(QWidget* parent) : ZoomView(parent) {
  horizontal_only_ = true;
  setViewportMargins(kLabelWidth, kRulerHeight, 0, 0);
  setAlignment(Qt::AlignLeft | Qt::AlignTop);
}

void TimelineView::set_timeline_scene(TimelineScene* scene) {
  timeline_ = scene;
  setScene(scene);
  fit();
}

// A ruler step of 1, 2 or 5 times a power of ten, about 100 pixels apart.
static double ruler_step(double us_per_pixel) {
  const double raw = us_per_pixel * 100;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

static QString time_text(double us) {
  if (std::abs(us) >= 1000) return QString("%1 ms").arg(us / 1000, 0, 'g', 6);
  return QString("%1 us").arg(us, 0, 'g', 6);
}

bool TimelineView::event(QEvent* event) {
  const bool handled = ZoomView::event(event);
  if (event->type() == QEvent::Paint) paint_margins();
  return handled;
}

void TimelineView::scrollContentsBy(int dx, int dy) {
  ZoomView::scrollContentsBy(dx, dy);
  update();  // the ruler and labels follow the viewport
}

// The ruler and the labels lie outside the viewport, in the view's margins: painted on the view
// itself, in its own paint event.
void TimelineView::paint_margins() {
  if (!timeline_) return;
  QPainter p(this);
  const QRect margin_top(0, 0, width(), kRulerHeight), margin_left(0, kRulerHeight, kLabelWidth, height());
  p.fillRect(margin_top, QColor(235, 235, 240));
  p.fillRect(margin_left, QColor(240, 240, 244));
  p.setPen(Qt::black);
  QFont font = p.font();
  font.setPointSizeF(7);
  p.setFont(font);
  const double left = mapToScene(0, 0).x(), right = mapToScene(viewport()->width(), 0).x();
  const double per_px = (right - left) / std::max(1, viewport()->width());
  if (per_px > 0) {
    const double step = ruler_step(per_px);
    for (double t = std::ceil(left / step) * step; t <= right; t += step) {
      const int x = kLabelWidth + mapFromScene(QPointF(t, 0)).x();
      p.drawLine(x, kRulerHeight - 6, x, kRulerHeight);
      p.drawText(x + 2, kRulerHeight - 8, time_text(t));
    }
  }
  const auto& ranks = timeline_->model().ranks;
  p.setClipRect(margin_left);
  for (size_t t = 0; t < ranks.size(); ++t) {
    const int y = kRulerHeight + mapFromScene(QPointF(0, TimelineScene::track_y(int(t), Stream::Compute))).y();
    if (y > height() || y + 60 < kRulerHeight) continue;
    p.drawText(4, y + 10, QString::fromStdString(ranks[t].name));
    for (int s = 0; s < kNumStreams; ++s)
      p.drawText(kLabelWidth - 52, y + 10 + int(s * kTrackHeight * transform().m22()), to_string(Stream(s)));
  }
}

}  // namespace wallfacer::gui
