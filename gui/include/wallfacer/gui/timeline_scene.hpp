// A trace as a QGraphicsScene: one band per rank with a track per stream, one box per op at its
// time (1 scene unit = 1 microsecond horizontally), the critical path outlined in red and every
// box's tooltip naming the op, its times and its arguments. The view draws the time ruler and
// the track labels and zooms horizontally down to single ops.
#pragma once

#include <QGraphicsScene>

#include <wallfacer/gui/trace_model.hpp>

namespace wallfacer::gui {

constexpr double kTrackHeight = 14;
constexpr double kRankGap = 6;

class TimelineScene : public QGraphicsScene {
 public:
  explicit TimelineScene(TraceModel model, QObject* parent = nullptr);
  const TraceModel& model() const { return model_; }
  // Vertical position of a rank's stream track.
  static double track_y(int track, Stream stream);
  int critical_items() const { return critical_items_; }

 private:
  TraceModel model_;
  int critical_items_ = 0;
};

}  // namespace wallfacer::gui
