#include <wallfacer/gui/timeline_scene.hpp>

#include <QBrush>
#include <QGraphicsRectItem>
#include <QPen>

#include <unordered_set>

#include <wallfacer/gui/topology_scene.hpp>

namespace wallfacer::gui {
namespace {

QColor stream_color(Stream stream, bool backward) {
  QColor c;
  switch (stream) {
    case Stream::Compute:
      c = QColor(110, 180, 60);
      break;
    case Stream::Send:
      c = QColor(70, 130, 210);
      break;
    case Stream::Recv:
      c = QColor(60, 190, 200);
      break;
    case Stream::Collective:
      c = QColor(230, 150, 40);
      break;
    case Stream::Sync:
      c = QColor(200, 110, 170);
      break;
  }
  return backward ? c.darker(130) : c;
}

QString tooltip(const TraceModel& model, const TraceSlice& s, bool critical) {
  QString text = QString("%1\n%2, %3\nstart %4 us, %5 us long, ends %6 us")
                     .arg(QString::fromStdString(s.name), QString::fromStdString(model.ranks[size_t(s.track)].name),
                          to_string(s.stream))
                     .arg(s.start_us, 0, 'f', 3)
                     .arg(s.duration_us, 0, 'f', 3)
                     .arg(s.end_us(), 0, 'f', 3);
  if (!s.details.empty()) text += "\n" + QString::fromStdString(s.details);
  if (critical) text += "\non the critical path";
  return text;
}

}  // namespace

double TimelineScene::track_y(int track, Stream stream) {
  return track * (kNumStreams * kTrackHeight + kRankGap) + int(stream) * kTrackHeight;
}

TimelineScene::TimelineScene(TraceModel model, QObject* parent) : QGraphicsScene(parent), model_(std::move(model)) {
  const std::unordered_set<int> critical(model_.critical_path.begin(), model_.critical_path.end());
  const int tracks = int(model_.ranks.size());
  // Alternate rank bands shaded, so the eye keeps to one rank's tracks.
  for (int t = 0; t < tracks; ++t) {
    auto* band = addRect(0, track_y(t, Stream::Compute) - kRankGap / 2, std::max(1.0, model_.end_us),
                         kNumStreams * kTrackHeight + kRankGap, Qt::NoPen,
                         t % 2 ? QColor(244, 244, 248) : QColor(252, 252, 252));
    band->setZValue(-1);
    band->setData(kKindKey, "rank-band");
    band->setData(kIndexKey, t);
  }
  QPen normal(QColor(40, 40, 40, 120), 0), red(QColor(220, 20, 20), 2);
  normal.setCosmetic(true);
  red.setCosmetic(true);
  for (size_t i = 0; i < model_.slices.size(); ++i) {
    const TraceSlice& s = model_.slices[i];
    const bool on_path = critical.count(int(i)) > 0;
    const bool backward = s.details.find("phase: backward") != std::string::npos;
    auto* box = addRect(s.start_us, track_y(s.track, s.stream) + 1, s.duration_us, kTrackHeight - 2,
                        on_path ? red : normal, stream_color(s.stream, backward));
    box->setZValue(on_path ? 2 : 1);
    box->setData(kKindKey, on_path ? "slice-critical" : "slice");
    box->setData(kIndexKey, int(i));
    box->setToolTip(tooltip(model_, s, on_path));
    critical_items_ += on_path;
  }
  setSceneRect(0, -kRankGap, std::max(1.0, model_.end_us), std::max(1.0, track_y(tracks, Stream::Compute)));
}

}  // namespace wallfacer::gui
