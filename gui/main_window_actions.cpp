// MainWindow's actions: the menus, recent files, the planning and simulation jobs on a worker
// thread, and export.
#include <QAction>
#include <QApplication>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QTabWidget>
#include <QThread>

#ifdef WALLFACER_GUI_SVG
#include <QSvgGenerator>
#endif

#include <wallfacer/core/errors.hpp>
#include <wallfacer/gui/compare_view.hpp>
#include <wallfacer/gui/main_window.hpp>
#include <wallfacer/gui/plan_view.hpp>
#include <wallfacer/gui/settings_form.hpp>

namespace wallfacer::gui {
namespace {

constexpr int kRecentMax = 8;

// Where the simulations started from the window write their trace: one file per process, replaced
// by each run.
std::string scratch_trace_path() {
  return QDir::temp().filePath(QString("wallfacer-gui-%1.json").arg(QCoreApplication::applicationPid())).toStdString();
}

// What a planning job hands back to the window.
struct JobResult {
  std::unique_ptr<Topology> topology;
  std::optional<PlanOutcome> planning;
  std::optional<SimOutcome> sim;
  bool cancelled = false;
  QString error;
};

// The search, then a simulation of the chosen plan (its link load and trace).
std::shared_ptr<JobResult> run_job(const PlanSettings& settings, const JobProgress& progress,
                                   const std::string& trace) {
  auto r = std::make_shared<JobResult>();
  try {
    r->topology = std::make_unique<Topology>(load_topology(settings.topology, settings.nodes));
    r->planning = run_planning(settings, *r->topology, progress);
    const SearchResult& result = r->planning->result;
    if (result.best >= 0) {
      progress("simulating the chosen plan", 0);
      r->sim = run_simulation(result.candidates[size_t(result.best)].plan, *r->topology, trace, settings.step_layers,
                              progress.cancel);
    }
  } catch (const Cancelled&) {
    r->cancelled = true;
  } catch (const SimulationCancelled&) {
    r->cancelled = true;
  } catch (const std::exception& e) {
    r->error = e.what();
  }
  return r;
}

}  // namespace

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("Open &topology...", this, [this] { ask_open("topology"); });
  file->addAction("Open &plan...", this, [this] { ask_open("plan"); });
  file->addAction("Open t&race...", this, [this] { ask_open("trace"); });
  recent_ = file->addMenu("Recent files");
  fill_recent_menu();
  file->addSeparator();
  file->addAction("&Export view (PNG or SVG)...", this, [this] { ask_export(); });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);
  QMenu* run = menuBar()->addMenu("&Run");
  run->addAction("&Plan and simulate...", this, [this] { ask_plan(); });
  run->addAction("&Simulate the open plan", this, [this] { simulate_now(); });
}

void MainWindow::ask_open(const QString& kind) {
  const QString filter = kind == "trace" ? "Traces (*.json);;All files (*)" : "YAML (*.yaml *.yml);;All files (*)";
  const QString path = QFileDialog::getOpenFileName(this, "Open " + kind, QString(), filter);
  if (path.isEmpty()) return;
  if (kind == "topology") open_topology(path);
  if (kind == "plan") open_plan(path);
  if (kind == "trace") open_trace(path);
}

void MainWindow::remember(const QString& path, const QString& kind) {
  QSettings settings("wallfacer", "wallfacer-gui");
  QStringList recent = settings.value("recent").toStringList();
  const QString entry = kind + "|" + QFileInfo(path).absoluteFilePath();
  recent.removeAll(entry);
  recent.prepend(entry);
  while (recent.size() > kRecentMax)
    recent.removeLast();
  settings.setValue("recent", recent);
  fill_recent_menu();
}

void MainWindow::fill_recent_menu() {
  recent_->clear();
  const QStringList recent = QSettings("wallfacer", "wallfacer-gui").value("recent").toStringList();
  for (const QString& entry : recent) {
    const QString kind = entry.section('|', 0, 0), path = entry.section('|', 1);
    recent_->addAction(QString("%1: %2").arg(kind, path), this, [this, kind, path] {
      if (kind == "topology") open_topology(path);
      if (kind == "plan") open_plan(path);
      if (kind == "trace") open_trace(path);
    });
  }
  recent_->setEnabled(!recent.isEmpty());
}

void MainWindow::ask_plan() {
  SettingsForm form(settings_, this);
  if (form.exec() == QDialog::Accepted) start_planning(form.settings());
}

void MainWindow::cancel() {
  cancel_flag_ = true;
  status_->setText("cancelling...");
}

void MainWindow::start_planning(const PlanSettings& settings) {
  if (busy()) return;
  settings_ = settings;
  cancel_flag_ = false;
  progress_->setValue(0);
  progress_->show();
  cancel_->show();
  status_->setText("planning...");
  const std::string trace = scratch_trace_path();
  worker_ = QThread::create([this, settings, trace] {
    JobProgress progress{[this](const std::string& stage, double fraction) {
                           QMetaObject::invokeMethod(
                               this,
                               [this, stage = QString::fromStdString(stage), fraction] {
                                 status_->setText(stage);
                                 progress_->setValue(int(fraction * 1000));
                               },
                               Qt::QueuedConnection);
                         },
                         &cancel_flag_};
    auto result = run_job(settings, progress, trace);
    QMetaObject::invokeMethod(
        this,
        [this, result] {
          worker_->wait();
          worker_->deleteLater();
          worker_ = nullptr;
          progress_->hide();
          cancel_->hide();
          if (result->cancelled) status_->setText("cancelled");
          if (!result->error.isEmpty()) show_error("Planning failed", result->error);
          if (result->planning) apply_planning(std::move(result->topology), *result->planning, result->sim);
        },
        Qt::QueuedConnection);
  });
  worker_->start();
}

bool MainWindow::plan_now(const PlanSettings& settings) {
  settings_ = settings;
  const std::string trace = scratch_trace_path();
  auto result = run_job(settings, JobProgress{}, trace);
  if (!result->error.isEmpty()) {
    show_error("Planning failed", result->error);
    return false;
  }
  apply_planning(std::move(result->topology), *result->planning, result->sim);
  return true;
}

void MainWindow::apply_planning(std::unique_ptr<Topology> topology, const PlanOutcome& outcome,
                                const std::optional<SimOutcome>& sim) {
  set_topology(std::move(topology));
  compare_view_->set_result(outcome.result, outcome.simulated_ms, outcome.budget_GiB);
  const SearchResult& result = outcome.result;
  if (result.best < 0) {
    plan_.reset();
    sim_.reset();
    rebuild_plan_view();
    status_->setText("no feasible plan: see the rejected candidates in the comparison");
    return;
  }
  plan_ = result.candidates[size_t(result.best)].plan;
  sim_.reset();
  rebuild_plan_view();
  if (sim) apply_sim(*sim);
}

bool MainWindow::simulate_now() {
  if (!plan_ || !topology_) {
    show_error("Nothing to simulate", "Open a plan first (File > Open plan).");
    return false;
  }
  try {
    const std::string trace = scratch_trace_path();
    apply_sim(run_simulation(*plan_, *topology_, trace, settings_.step_layers));
  } catch (const std::exception& e) {
    show_error("Simulation failed", e.what());
    return false;
  }
  return true;
}

void MainWindow::ask_export() {
  const QString path = QFileDialog::getSaveFileName(this, "Export view", "view.png", "PNG (*.png);;SVG (*.svg)");
  if (!path.isEmpty()) export_image(path);
}

bool MainWindow::export_image(const QString& path) {
  QWidget* view = tabs_->currentWidget();
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
#ifdef WALLFACER_GUI_SVG
    QSvgGenerator svg;
    svg.setFileName(path);
    svg.setSize(view->size());
    svg.setViewBox(QRect(QPoint(0, 0), view->size()));
    svg.setTitle(tabs_->tabText(tabs_->currentIndex()));
    QPainter painter(&svg);
    view->render(&painter);
    return true;
#else
    show_error("Export failed", "This build has no SVG support (install qt6-svg-dev and rebuild).");
    return false;
#endif
  }
  if (!view->grab().save(path, "PNG")) {
    show_error("Export failed", "Could not write " + path);
    return false;
  }
  return true;
}

}  // namespace wallfacer::gui
