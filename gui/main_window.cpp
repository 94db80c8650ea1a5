#include <wallfacer/gui/main_window.hpp>

#include <QDir>
#include <QFileInfo>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>

#include <fmt/format.h>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/gui/compare_view.hpp>
#include <wallfacer/gui/plan_view.hpp>
#include <wallfacer/gui/timeline_scene.hpp>
#include <wallfacer/gui/topology_scene.hpp>
#include <wallfacer/gui/zoom_view.hpp>

namespace wallfacer::gui {
namespace {

// The topology a plan was made for: the open one when its hash matches, else the file the plan
// records (relative to the plan's folder), else the preset of that name at the plan's node count.
std::unique_ptr<Topology> topology_for_plan(const Plan& plan, const QString& plan_path, const Topology* open) {
  auto matches = [&](const Topology& t) {
    return t.name() == plan.topology_name && t.num_nodes() == plan.topology_nodes &&
           t.content_hash() == plan.topology_hash;
  };
  if (open && matches(*open)) return nullptr;
  if (!plan.topology_file.empty()) {
    const QString file = QFileInfo(plan_path).dir().filePath(QString::fromStdString(plan.topology_file));
    if (QFileInfo::exists(file)) {
      auto t = std::make_unique<Topology>(Topology::load(file.toStdString(), plan.topology_nodes));
      if (matches(*t)) return t;
    }
  }
  const auto presets = Topology::preset_names();
  if (std::find(presets.begin(), presets.end(), plan.topology_name) != presets.end())
    return std::make_unique<Topology>(Topology::load(plan.topology_name, plan.topology_nodes));
  throw InputError(plan_path.toStdString(), 0,
                   fmt::format("the plan was made for topology '{}' ({} nodes), which is neither open nor a preset: "
                               "open that topology file first",
                               plan.topology_name, plan.topology_nodes));
}

}  // namespace

View parse_view(const std::string& name) {
  if (name == "topology") return View::Topology;
  if (name == "plan") return View::Plan;
  if (name == "timeline") return View::Timeline;
  if (name == "compare") return View::Compare;
  throw InputError("--view", 0, fmt::format("expects topology, plan, timeline or compare, got '{}'", name));
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("wallfacer");
  tabs_ = new QTabWidget();
  topology_view_ = new TopologyView();
  plan_view_ = new PlanView();
  timeline_view_ = new TimelineView();
  compare_view_ = new CompareView();
  tabs_->addTab(topology_view_, "Topology");
  tabs_->addTab(plan_view_, "Plan");
  tabs_->addTab(timeline_view_, "Timeline");
  tabs_->addTab(compare_view_, "Comparison");
  setCentralWidget(tabs_);
  build_menus();
  build_status_bar();
  resize(1280, 800);
}

MainWindow::~MainWindow() {
  if (worker_) {  // its result, queued to this window, is dropped with it
    cancel_flag_ = true;
    worker_->wait();
    delete worker_;
  }
  // Views first: their scenes refer to the topology.
  plan_view_->clear();
  topology_view_->set_topology_scene(nullptr);
  timeline_view_->set_timeline_scene(nullptr);
}

void MainWindow::build_status_bar() {
  status_ = new QLabel("Open a topology (File > Open topology) or run Plan and simulate.");
  progress_ = new QProgressBar();
  progress_->setRange(0, 1000);
  progress_->setMaximumWidth(260);
  cancel_ = new QPushButton("Cancel");
  connect(cancel_, &QPushButton::clicked, this, &MainWindow::cancel);
  statusBar()->addWidget(status_, 1);
  statusBar()->addPermanentWidget(progress_);
  statusBar()->addPermanentWidget(cancel_);
  progress_->hide();
  cancel_->hide();
}

void MainWindow::show_error(const QString& title, const QString& text) {
  last_error_ = text;
  auto* box = new QMessageBox(QMessageBox::Warning, title, text, QMessageBox::Ok, this);
  box->setObjectName("error-dialog");
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();  // window-modal, without blocking the event loop
  status_->setText(title);
}

void MainWindow::set_topology(std::unique_ptr<Topology> topology) {
  plan_view_->clear();
  topology_view_->set_topology_scene(nullptr);
  topology_scene_.reset();
  topology_ = std::move(topology);
  topology_scene_ = std::make_unique<TopologyScene>(*topology_);
  topology_view_->set_topology_scene(topology_scene_.get());
  status_->setText(QString("%1: %2 nodes, %3 GPUs, %4 links")
                       .arg(QString::fromStdString(topology_->name()))
                       .arg(topology_->num_nodes())
                       .arg(topology_->num_gpus())
                       .arg(topology_->links().size()));
}

bool MainWindow::open_topology(const QString& path_or_preset, int nodes) {
  try {
    set_topology(std::make_unique<Topology>(load_topology(path_or_preset.toStdString(), nodes)));
  } catch (const std::exception& e) {
    show_error("Could not open the topology " + path_or_preset, e.what());
    return false;
  }
  plan_.reset();
  sim_.reset();
  if (QFileInfo::exists(path_or_preset)) remember(path_or_preset, "topology");
  return true;
}

bool MainWindow::open_plan(const QString& path) {
  try {
    Plan plan = read_plan_file(path.toStdString());
    std::unique_ptr<Topology> topology = topology_for_plan(plan, path, topology_.get());
    check_plan_against_topology(plan, topology ? *topology : *topology_, path.toStdString());
    if (topology) set_topology(std::move(topology));
    plan_ = std::move(plan);
    sim_.reset();
  } catch (const std::exception& e) {
    show_error("Could not open the plan " + path, e.what());
    return false;
  }
  rebuild_plan_view();
  remember(path, "plan");
  return true;
}

bool MainWindow::open_trace(const QString& path) {
  try {
    set_trace(read_trace_file(path.toStdString()));
  } catch (const std::exception& e) {
    show_error("Could not open the trace " + path, e.what());
    return false;
  }
  remember(path, "trace");
  return true;
}

void MainWindow::set_trace(TraceModel model) {
  timeline_view_->set_timeline_scene(nullptr);
  timeline_scene_ = std::make_unique<TimelineScene>(std::move(model));
  timeline_view_->set_timeline_scene(timeline_scene_.get());
}

void MainWindow::rebuild_plan_view() {
  if (!plan_ || !topology_) {
    plan_view_->clear();
    return;
  }
  plan_view_->set_plan(std::make_unique<TopologyScene>(*topology_), *plan_);
  if (sim_) plan_view_->set_load(link_load(*topology_, sim_->result));
}

void MainWindow::apply_sim(const SimOutcome& outcome) {
  sim_ = outcome;
  if (topology_) plan_view_->set_load(link_load(*topology_, outcome.result));
  if (!outcome.trace_path.empty()) set_trace(read_trace_file(outcome.trace_path));
  status_->setText(QString("simulated: step %1 ms, %2 transfers")
                       .arg(outcome.result.step_ms, 0, 'f', 3)
                       .arg(outcome.result.transfers));
}

void MainWindow::show_view(View view) {
  tabs_->setCurrentIndex(int(view));
}

}  // namespace wallfacer::gui
