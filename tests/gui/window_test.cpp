// The window and the executable: a bad plan, topology or trace file gives an error dialog naming
// the file and the line (and leaves the window as it was), Plan and simulate runs on a worker
// thread and fills every view, a cancelled job stops, export writes PNG and SVG, and
// wallfacer-gui --screenshot writes a non-blank PNG of the requested size for every view,
// offscreen and on a real X display under Xvfb.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <QHorizontalBarSeries>
#include <QImage>
#include <QLineSeries>
#include <QMessageBox>
#include <QSettings>
#include <QThread>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/gui/compare_view.hpp>
#include <wallfacer/gui/jobs.hpp>
#include <wallfacer/gui/main_window.hpp>
#include <wallfacer/gui/plan_overlay.hpp>
#include <wallfacer/gui/plan_view.hpp>
#include <wallfacer/gui/timeline_scene.hpp>
#include <wallfacer/gui/topology_scene.hpp>
#include <wallfacer/gui/zoom_view.hpp>
#include <wallfacer/simulator/simulator.hpp>
#include "gui_fixture.hpp"

namespace wallfacer::test {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// 1-based line of the first line of `text` that starts with `prefix`.
int line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.rfind(prefix, 0) == 0) return n;
  return 0;
}

QString dialog_text(gui::MainWindow& window) {
  auto* box = window.findChild<QMessageBox*>("error-dialog");
  return box ? box->text() : QString();
}

void close_dialogs(gui::MainWindow& window) {
  for (QMessageBox* box : window.findChildren<QMessageBox*>())
    delete box;
}

// Runs wallfacer-gui through the shell with `env` before it; output and exit status. Its recent
// files go to a scratch configuration folder, not the user's.
std::pair<int, std::string> run_gui(const std::string& env, const std::string& args) {
  const std::string config = "XDG_CONFIG_HOME=" + scratch_dir("config").string() + " ";
  const std::string command = config + env + " " + WALLFACER_BINARY_DIR + "/bin/wallfacer-gui " + args + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, ""};
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// Not blank: many distinct colours, as a drawn view has and an empty or single-colour image has not.
int distinct_colors(const QImage& image) {
  std::set<QRgb> colors;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3)
      colors.insert(image.pixel(x, y));
  return int(colors.size());
}

class GuiWindow : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gui_app();
    dir_ = new fs::path(scratch_dir("window"));
    const Topology topology = Topology::load("dgx-h100", 2);
    const Plan plan = wallfacer_plan(topology);
    std::ofstream out(*dir_ / "plan.yaml");
    write_plan(plan, out);
    out.close();
    SimOptions options;
    options.trace_path = (*dir_ / "trace.json").string();
    simulate(plan, topology, options);
  }
  static void TearDownTestSuite() {
    fs::remove_all(scratch_dir("config"));
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* GuiWindow::dir_ = nullptr;

TEST_F(GuiWindow, ABadPlanFileGivesTheErrorDialogWithTheFileAndLine) {
  gui::MainWindow window;
  ASSERT_TRUE(window.open_topology("dgx-h100", 2));
  std::string text = read_text(*dir_ / "plan.yaml");
  const int line = line_starting(text, "strategy:");
  ASSERT_GT(line, 0);
  text.replace(text.find("strategy: ") + 10, text.find('\n', text.find("strategy: ")) - text.find("strategy: ") - 10,
               "no-such-strategy");
  const fs::path bad = *dir_ / "bad-plan.yaml";
  write_text(bad, text);
  EXPECT_FALSE(window.open_plan(QString::fromStdString(bad.string())));
  const std::string expected = bad.string() + ":" + std::to_string(line) + ": error:";
  EXPECT_NE(window.last_error().toStdString().find(expected), std::string::npos) << window.last_error().toStdString();
  EXPECT_EQ(dialog_text(window), window.last_error());
  EXPECT_TRUE(window.last_error().contains("no-such-strategy"));
  EXPECT_EQ(window.plan_view()->overlay(), nullptr);  // nothing half-opened
  close_dialogs(window);
}

TEST_F(GuiWindow, ABadTraceOrTopologyGivesTheErrorDialogAndKeepsTheWindowsState) {
  gui::MainWindow window;
  ASSERT_TRUE(window.open_plan(QString::fromStdString((*dir_ / "plan.yaml").string())));
  ASSERT_TRUE(window.open_trace(QString::fromStdString((*dir_ / "trace.json").string())));
  const gui::TimelineScene* before = window.timeline_scene();
  const fs::path bad = *dir_ / "bad-trace.json";
  write_text(bad, "{\n  \"traceEvents\": [\n    {\"ph\": \"X\",, }\n  ]\n}\n");
  EXPECT_FALSE(window.open_trace(QString::fromStdString(bad.string())));
  EXPECT_TRUE(dialog_text(window).startsWith(QString::fromStdString(bad.string() + ":3: error: invalid JSON")))
      << dialog_text(window).toStdString();
  EXPECT_EQ(window.timeline_scene(), before);
  close_dialogs(window);
  const fs::path topo = *dir_ / "bad-topology.yaml";
  write_text(topo, "name: x\nnodes: -3\n");
  EXPECT_FALSE(window.open_topology(QString::fromStdString(topo.string())));
  EXPECT_TRUE(dialog_text(window).startsWith(QString::fromStdString(topo.string() + ":")))
      << dialog_text(window).toStdString();
  ASSERT_NE(window.topology(), nullptr);
  EXPECT_EQ(window.topology()->name(), "dgx-h100");
  EXPECT_NE(window.plan_view()->overlay(), nullptr);
  close_dialogs(window);
}

TEST_F(GuiWindow, PlanAndSimulateRunsOnAWorkerThreadAndFillsEveryView) {
  gui::MainWindow window;
  gui::PlanSettings settings;
  settings.nodes = 2;
  settings.scope = "attention";
  settings.seq = 65536;
  settings.tensor = "1";
  settings.simulate_top = 2;
  window.start_planning(settings);
  EXPECT_TRUE(window.busy());
  // The window's event loop keeps running while the job works.
  int turns = 0;
  while (window.busy()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    QThread::msleep(10);
    ++turns;
  }
  EXPECT_GT(turns, 0);
  EXPECT_TRUE(window.last_error().isEmpty()) << window.last_error().toStdString();
  ASSERT_NE(window.topology(), nullptr);
  EXPECT_EQ(window.topology()->num_nodes(), 2);
  EXPECT_GT(window.compare_view()->bars(), 1);
  ASSERT_NE(window.plan_view()->overlay(), nullptr);
  EXPECT_FALSE(window.plan_view()->overlay()->groups().empty());
  ASSERT_NE(window.timeline_scene(), nullptr);
  EXPECT_EQ(window.timeline_scene()->model().ranks.size(), 16u);
  window.plan_view()->select_group(1);
  EXPECT_EQ(window.plan_view()->overlay()->highlighted(), 1);
  // Export of the current view.
  window.show_view(gui::View::Plan);
  const fs::path png = *dir_ / "export.png", svg = *dir_ / "export.svg";
  ASSERT_TRUE(window.export_image(QString::fromStdString(png.string())));
  EXPECT_GT(distinct_colors(QImage(QString::fromStdString(png.string()))), 20);
  ASSERT_TRUE(window.export_image(QString::fromStdString(svg.string())));
  EXPECT_NE(read_text(svg).find("<svg"), std::string::npos);
}

TEST_F(GuiWindow, TheComparisonShowsTheRankingsBarsTheBudgetAndTheRejected) {
  const Topology topology = Topology::load("dgx-h100", 2);
  WorkloadOverrides overrides;
  overrides.seq = 262144;  // some candidates do not fit 80 GiB
  const CostModel model(topology, Calibration::defaults());
  SearchOptions options;
  options.scope = Scope::Step;
  options.tensor_degrees = {1, 2, 4, 8};
  const SearchResult result = search_plans(topology, load_workload("llama-3-8b", overrides), model, options);
  ASSERT_EQ(result.best, 0);  // feasible candidates come first, best first
  std::vector<std::optional<double>> simulated(result.candidates.size());
  simulated[0] = 123.0;
  gui::CompareView view;
  view.set_result(result, simulated, 72.0, 5);
  int feasible = 0, rejected = 0;
  for (const Candidate& c : result.candidates)
    (c.feasible ? feasible : rejected)++;
  ASSERT_GT(rejected, 0);
  EXPECT_EQ(view.bars(), std::min(5, feasible));
  EXPECT_EQ(view.rejected(), rejected);
  auto* times = dynamic_cast<QAbstractBarSeries*>(view.time_chart()->series().at(0));
  ASSERT_NE(times, nullptr);
  // Bars run bottom to top: the best candidate is the last value of each set.
  const int n = view.bars();
  for (int i = 0; i < n; ++i)
    EXPECT_DOUBLE_EQ(times->barSets().at(0)->at(n - 1 - i), result.candidates[size_t(i)].cost.step_ms) << i;
  EXPECT_DOUBLE_EQ(times->barSets().at(1)->at(n - 1), 123.0);
  EXPECT_DOUBLE_EQ(times->barSets().at(1)->at(0), n > 1 ? 0.0 : 123.0);
  auto* categories = dynamic_cast<QBarCategoryAxis*>(view.time_chart()->axes(Qt::Vertical).at(0));
  ASSERT_NE(categories, nullptr);
  EXPECT_TRUE(categories->categories().at(n - 1).endsWith("[chosen]"))
      << categories->categories().at(n - 1).toStdString();
  auto* budget = dynamic_cast<QLineSeries*>(view.memory_chart()->series().at(1));
  ASSERT_NE(budget, nullptr);
  EXPECT_DOUBLE_EQ(budget->at(0).x(), 72.0);
}

TEST_F(GuiWindow, OpenedFilesAreRememberedMostRecentFirst) {
  gui::MainWindow window;
  const QString plan = QString::fromStdString((*dir_ / "plan.yaml").string());
  const QString trace = QString::fromStdString((*dir_ / "trace.json").string());
  ASSERT_TRUE(window.open_plan(plan));
  ASSERT_TRUE(window.open_trace(trace));
  ASSERT_TRUE(window.open_plan(plan));
  const QStringList recent = QSettings("wallfacer", "wallfacer-gui").value("recent").toStringList();
  ASSERT_GE(recent.size(), 2);
  EXPECT_EQ(recent[0], "plan|" + QFileInfo(plan).absoluteFilePath());
  EXPECT_EQ(recent[1], "trace|" + QFileInfo(trace).absoluteFilePath());
  EXPECT_EQ(recent.count(recent[0]), 1);
}

TEST_F(GuiWindow, TheTimelineZoomsTimeOnly) {
  gui::TimelineScene scene(gui::read_trace_file((*dir_ / "trace.json").string()));
  gui::TimelineView view;
  view.resize(900, 600);
  view.set_timeline_scene(&scene);
  const double before = view.transform().m11();
  view.zoom(8);
  EXPECT_NEAR(view.transform().m11(), 8 * before, 1e-9 * before);
  EXPECT_EQ(view.transform().m22(), 1.0);
  view.set_timeline_scene(nullptr);
}

TEST_F(GuiWindow, ACancelledJobStopsAtItsNextStep) {
  std::atomic<bool> cancel{true};
  const gui::JobProgress progress{{}, &cancel};
  const Topology topology = Topology::load("dgx-h100", 2);
  gui::PlanSettings settings;
  settings.nodes = 2;
  EXPECT_THROW(gui::run_planning(settings, topology, progress), gui::Cancelled);
  cancel = false;
  EXPECT_NO_THROW(progress("stage", 0.5));
}

TEST_F(GuiWindow, EveryViewsScreenshotIsANonBlankPngOfTheRequestedSize) {
  const std::string files = "--topology dgx-h100 --nodes 2 --plan " + (*dir_ / "plan.yaml").string() + " --trace " +
                            (*dir_ / "trace.json").string();
  for (const std::string view : {"topology", "plan", "timeline", "compare"}) {
    const fs::path png = *dir_ / (view + ".png");
    const std::string extra = view == "compare" ? " --search --scope attention --seq 65536 --simulate-top 1" : "";
    const auto [status, output] = run_gui("QT_QPA_PLATFORM=offscreen", files + extra + " --screenshot " + png.string() +
                                                                           " --view " + view + " --size 900x640");
    ASSERT_EQ(status, 0) << view << ": " << output;
    const QImage image(QString::fromStdString(png.string()));
    ASSERT_FALSE(image.isNull()) << view;
    EXPECT_EQ(image.size(), QSize(900, 640)) << view;
    EXPECT_GT(distinct_colors(image), 20) << view;
  }
}

// Argument errors in the project's words and exit status 2, as wallfacer's own.
TEST_F(GuiWindow, TheExecutableNamesABadArgument) {
  auto [status, output] = run_gui("QT_QPA_PLATFORM=offscreen", "--nodes x");
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("wallfacer-gui: error: --nodes: expects a number, got 'x'"), std::string::npos) << output;
  std::tie(status, output) = run_gui("QT_QPA_PLATFORM=offscreen", "--nodse 2");
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("wallfacer-gui: error: unknown argument '--nodse'; did you mean --nodes?"), std::string::npos)
      << output;
}

TEST_F(GuiWindow, TheExecutableReportsABadFileWithItsLineAndExitStatus2) {
  const fs::path bad = *dir_ / "bad-cli-trace.json";
  write_text(bad, "{\"traceEvents\":\n 7}\n");
  const auto [status, output] =
      run_gui("QT_QPA_PLATFORM=offscreen", "--trace " + bad.string() + " --screenshot " + (*dir_ / "x.png").string());
  EXPECT_EQ(status, 2);
  EXPECT_NE(output.find(bad.string() + ": error: expected a JSON object with a 'traceEvents' array"), std::string::npos)
      << output;
}

TEST_F(GuiWindow, TheRealWindowRunsOnAnXDisplayUnderXvfb) {
  if (std::system("command -v xvfb-run >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "xvfb-run is not installed (scripts/install-deps.sh installs it)";
  const fs::path png = *dir_ / "xvfb.png";
  const auto [status, output] = run_gui("QT_QPA_PLATFORM=xcb xvfb-run -a -s '-screen 0 1400x1000x24'",
                                        "--topology dgx-h100 --nodes 2 --plan " + (*dir_ / "plan.yaml").string() +
                                            " --view plan --screenshot " + png.string() + " --size 1000x700");
  ASSERT_EQ(status, 0) << output;
  const QImage image(QString::fromStdString(png.string()));
  EXPECT_EQ(image.size(), QSize(1000, 700));
  EXPECT_GT(distinct_colors(image), 20);
}

}  // namespace
}  // namespace wallfacer::test
