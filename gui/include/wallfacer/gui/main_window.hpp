// The main window: the four views as tabs (topology, plan, timeline, comparison), the File menu
// (open topology, plan and trace files, recent files, export PNG and SVG) and "Plan and simulate",
// which runs the libraries on a worker thread behind a progress bar and a cancel button. Errors in
// files are shown in a dialog naming the file and line; the window keeps its previous state.
#pragma once

#include <QMainWindow>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include <wallfacer/gui/jobs.hpp>
#include <wallfacer/gui/trace_model.hpp>

class QTabWidget;
class QProgressBar;
class QPushButton;
class QMenu;
class QLabel;
class QThread;

namespace wallfacer::gui {

class TopologyScene;
class TopologyView;
class TimelineScene;
class TimelineView;
class PlanView;
class CompareView;

enum class View { Topology = 0, Plan = 1, Timeline = 2, Compare = 3 };
View parse_view(const std::string& name);  // throws InputError

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Each returns false and shows the error dialog (and keeps the previous state) on bad input.
  bool open_topology(const QString& path_or_preset, int nodes = 0);
  bool open_plan(const QString& path);
  bool open_trace(const QString& path);
  // Runs now on this thread (for --screenshot): the search with `settings`, or a simulation of
  // the open plan. False with the error dialog on failure.
  bool plan_now(const PlanSettings& settings);
  bool simulate_now();
  // Starts the search (then a simulation of the best plan) on a worker thread.
  void start_planning(const PlanSettings& settings);
  bool busy() const { return worker_ != nullptr; }
  void cancel();

  void show_view(View view);
  bool export_image(const QString& path);  // .png or .svg of the current view
  // The text of the last error dialog ("" when none was shown).
  const QString& last_error() const { return last_error_; }

  TopologyScene* topology_scene() const { return topology_scene_.get(); }
  PlanView* plan_view() const { return plan_view_; }
  CompareView* compare_view() const { return compare_view_; }
  TimelineScene* timeline_scene() const { return timeline_scene_.get(); }
  const Topology* topology() const { return topology_.get(); }

 private:
  void build_menus();
  void build_status_bar();
  void show_error(const QString& title, const QString& text);
  void remember(const QString& path, const QString& kind);
  void fill_recent_menu();
  void set_topology(std::unique_ptr<Topology> topology);
  void rebuild_plan_view();
  void set_trace(TraceModel model);
  void apply_sim(const SimOutcome& outcome);
  void apply_planning(std::unique_ptr<Topology> topology, const PlanOutcome& outcome,
                      const std::optional<SimOutcome>& sim);
  void ask_open(const QString& kind);
  void ask_export();
  void ask_plan();

  QTabWidget* tabs_ = nullptr;
  TopologyView* topology_view_ = nullptr;
  PlanView* plan_view_ = nullptr;
  TimelineView* timeline_view_ = nullptr;
  CompareView* compare_view_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QLabel* status_ = nullptr;
  QMenu* recent_ = nullptr;

  std::unique_ptr<Topology> topology_;
  std::unique_ptr<TopologyScene> topology_scene_;
  std::optional<Plan> plan_;
  std::optional<SimOutcome> sim_;
  std::unique_ptr<TimelineScene> timeline_scene_;
  PlanSettings settings_;
  QString last_error_;
  QThread* worker_ = nullptr;
  std::atomic<bool> cancel_flag_{false};
};

}  // namespace wallfacer::gui
