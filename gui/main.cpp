// build/bin/wallfacer-gui: the window (wallfacer/gui/main_window.hpp) with files opened from the
// command line, and --screenshot, which renders one view at a given size into a PNG and exits.
#include <CLI/CLI.hpp>

#include <QApplication>
#include <QElapsedTimer>
#include <QGuiApplication>
#include <QScreen>
#include <QThread>
#include <QWindow>

#include <cstdio>
#include <iostream>

#include <wallfacer/core/errors.hpp>
#include <wallfacer/core/log.hpp>
#include <wallfacer/gui/main_window.hpp>
#include "arg_errors.hpp"

namespace {

struct Flags {
  std::string topology = "dgx-h100";
  int nodes = 0;
  std::string plan, trace, screenshot, view = "topology", size = "1280x800";
  bool search = false, simulate = false;
  wallfacer::gui::PlanSettings settings;
};

QSize parse_size(const std::string& text) {
  int w = 0, h = 0;
  char x = 0, extra = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &w, &x, &h, &extra) != 3 || x != 'x' || w < 64 || h < 64 || w > 8192 ||
      h > 8192)
    throw wallfacer::InputError("--size", 0, "expects WIDTHxHEIGHT, each 64 to 8192 pixels, got '" + text + "'");
  return {w, h};
}

void wait_events(int ms) {
  QElapsedTimer timer;
  timer.start();
  while (timer.elapsed() < ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QThread::msleep(5);
  }
}

// On a real display (xcb) the window is captured from the screen; offscreen it renders itself.
QImage capture(wallfacer::gui::MainWindow& window) {
  window.show();
  wait_events(400);
  if (QGuiApplication::platformName() == "xcb" && window.windowHandle() && window.windowHandle()->screen())
    return window.windowHandle()->screen()->grabWindow(window.winId()).toImage();
  return window.grab().toImage();
}

int screenshot(wallfacer::gui::MainWindow& window, const Flags& flags) {
  const QSize size = parse_size(flags.size);
  window.show_view(wallfacer::gui::parse_view(flags.view));
  window.resize(size);
  const QImage image = capture(window);
  if (image.size() != size) {
    std::cerr << "wallfacer-gui: the window came out " << image.width() << "x" << image.height() << ", not "
              << flags.size << " (a window manager or the screen limited it)\n";
    return 1;
  }
  if (!image.save(QString::fromStdString(flags.screenshot), "PNG")) {
    std::cerr << "wallfacer-gui: cannot write " << flags.screenshot << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app("wallfacer-gui: topology, plan, timeline and comparison views of wallfacer's planner and simulator",
               "wallfacer-gui");
  app.set_version_flag("--version", WALLFACER_VERSION);
  app.add_option("--topology", flags.topology, "topology preset name or file")->capture_default_str();
  app.add_option("--nodes", flags.nodes, "node count of a compact topology (0: the file's)")->capture_default_str();
  app.add_option("--plan", flags.plan, "plan file to open (its topology is opened with it)");
  app.add_option("--trace", flags.trace, "simulation trace to open (wallfacer simulate --trace)");
  app.add_flag("--search", flags.search, "run the planner at start (the comparison view) with the form's defaults");
  app.add_option("--model", flags.settings.model, "model for --search")->capture_default_str();
  app.add_option("--gpus", flags.settings.gpus, "GPUs for --search (0: all)")->capture_default_str();
  app.add_option("--seq", flags.settings.seq, "tokens per sequence for --search (0: the model's)")
      ->capture_default_str();
  app.add_option("--strategy", flags.settings.strategy, "strategy for --search")->capture_default_str();
  app.add_option("--scope", flags.settings.scope, "step or attention, for --search")->capture_default_str();
  app.add_option("--simulate-top", flags.settings.simulate_top, "candidates --search simulates")->capture_default_str();
  app.add_flag("--simulate", flags.simulate, "simulate the opened plan at start (link load and timeline)");
  app.add_option("--screenshot", flags.screenshot, "write the view to this PNG and exit");
  app.add_option("--view", flags.view, "view for --screenshot: topology, plan, timeline or compare")
      ->capture_default_str();
  app.add_option("--size", flags.size, "window size for --screenshot, WIDTHxHEIGHT")->capture_default_str();
  app.add_option_function<std::vector<std::string>>(
         "--log",
         [](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs)
             wallfacer::log::configure(spec);
         },
         "Log thresholds CAT=LEVEL[,CAT=LEVEL...], as wallfacer's --log, with the category gui (also WALLFACER_LOG)")
      ->type_name("CAT=LEVEL");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are parse "errors" with status 0; CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << wallfacer::cli::describe_parse_error(app, e);
    return 2;
  } catch (const wallfacer::InputError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }

  QApplication qt(argc, argv);
  QApplication::setApplicationName("wallfacer-gui");
  wallfacer::gui::MainWindow window;
  const bool headless = !flags.screenshot.empty();
  try {
    if (headless) {
      parse_size(flags.size);
      wallfacer::gui::parse_view(flags.view);
    }
  } catch (const wallfacer::InputError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  flags.settings.topology = flags.topology;
  flags.settings.nodes = flags.nodes;
  bool ok = window.open_topology(QString::fromStdString(flags.topology), flags.nodes);
  if (ok && !flags.plan.empty()) ok = window.open_plan(QString::fromStdString(flags.plan));
  if (ok && !flags.trace.empty()) ok = window.open_trace(QString::fromStdString(flags.trace));
  if (ok && flags.search) ok = window.plan_now(flags.settings);
  if (ok && flags.simulate) ok = window.simulate_now();
  if (headless) {
    if (!ok) {
      std::cerr << window.last_error().toStdString() << "\n";
      return 2;
    }
    return screenshot(window, flags);
  }
  window.show();
  return qt.exec();
}
