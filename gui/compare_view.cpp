#include <wallfacer/gui/compare_view.hpp>

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHorizontalBarSeries>
#include <QLabel>
#include <QLineSeries>
#include <QListWidget>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>

namespace wallfacer::gui {
namespace {

QChart* new_chart(const QString& title) {
  auto* chart = new QChart();
  chart->setTitle(title);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignTop);
  return chart;
}

// Candidates down the left (horizontal bars keep long labels readable), values along the bottom.
void set_axes(QChart* chart, const QStringList& labels, const QString& unit, double max_value) {
  auto* categories = new QBarCategoryAxis();
  categories->append(labels);
  categories->setTruncateLabels(false);
  QFont font = categories->labelsFont();
  font.setPointSizeF(7.5);
  categories->setLabelsFont(font);
  auto* values = new QValueAxis();
  values->setTitleText(unit);
  values->setRange(0, max_value > 0 ? max_value * 1.1 : 1);
  chart->addAxis(categories, Qt::AlignLeft);
  chart->addAxis(values, Qt::AlignBottom);
  for (QAbstractSeries* s : chart->series()) {
    s->attachAxis(categories);
    s->attachAxis(values);
  }
}

}  // namespace

QString candidate_label(const Candidate& c, int rank, bool chosen) {
  QString label =
      QString("%1 %2 %3").arg(rank).arg(to_string(c.plan.strategy)).arg(QString::fromStdString(c.describe_params()));
  const std::string placement = c.describe_placement();
  if (placement != "default") label += QString(" (%1)").arg(QString::fromStdString(placement));
  // A pruned candidate was priced as a lower bound only (no memory figure): said in its label.
  if (c.pruned) label += " [bound]";
  if (chosen) label += " [chosen]";
  return label;
}

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  time_view_ = new QChartView(new_chart("Step time per candidate"));
  memory_view_ = new QChartView(new_chart("Memory per GPU"));
  for (QChartView* v : {time_view_, memory_view_})
    v->setRenderHint(QPainter::Antialiasing);
  rejected_ = new QListWidget();
  rejected_->setWordWrap(true);
  summary_ = new QLabel("No search yet: Run > Plan and simulate, or start with --search.");
  summary_->setWordWrap(true);
  auto* charts = new QWidget();
  auto* charts_layout = new QVBoxLayout(charts);
  charts_layout->setContentsMargins(0, 0, 0, 0);
  charts_layout->addWidget(time_view_, 1);
  charts_layout->addWidget(memory_view_, 1);
  auto* side = new QWidget();
  side->setMaximumWidth(360);
  auto* side_layout = new QVBoxLayout(side);
  side_layout->addWidget(summary_);
  side_layout->addWidget(new QLabel("Rejected candidates and why:"));
  side_layout->addWidget(rejected_);
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(charts, 3);
  layout->addWidget(side, 1);
}

QChart* CompareView::time_chart() const {
  return time_view_->chart();
}
QChart* CompareView::memory_chart() const {
  return memory_view_->chart();
}
int CompareView::rejected() const {
  return rejected_->count();
}

void CompareView::clear() {
  for (QChart* chart : {time_chart(), memory_chart()}) {
    chart->removeAllSeries();
    for (QAbstractAxis* axis : chart->axes()) {
      chart->removeAxis(axis);
      delete axis;
    }
  }
  rejected_->clear();
  bars_ = 0;
}

void CompareView::set_result(const SearchResult& result, const std::vector<std::optional<double>>& simulated_ms,
                             double budget_GiB, int max_bars) {
  clear();
  auto* predicted = new QBarSet("predicted step ms");
  auto* simulated = new QBarSet("simulated step ms");
  auto* memory = new QBarSet("memory GiB per GPU");
  QStringList labels;
  double max_ms = 0, max_mem = budget_GiB;
  int shown = 0, rejected = 0;
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    const Candidate& c = result.candidates[i];
    if (!c.feasible) {
      rejected_->addItem(QString("%1 %2 (%3): %4")
                             .arg(to_string(c.plan.strategy), QString::fromStdString(c.describe_params()),
                                  QString::fromStdString(c.describe_placement()), QString::fromStdString(c.reason)));
      ++rejected;
      continue;
    }
    if (shown >= max_bars) continue;
    ++shown;
    const double sim = i < simulated_ms.size() && simulated_ms[i] ? *simulated_ms[i] : 0.0;
    // Prepended: horizontal bars run bottom to top, and the best should head the chart.
    predicted->insert(0, c.cost.step_ms);
    simulated->insert(0, sim);
    memory->insert(0, c.cost.memory.total_GiB);
    max_ms = std::max({max_ms, c.cost.step_ms, sim});
    max_mem = std::max(max_mem, c.cost.memory.total_GiB);
    labels.prepend(candidate_label(c, shown, int(i) == result.best));
  }
  bars_ = shown;
  auto* times = new QHorizontalBarSeries();
  times->append(predicted);
  times->append(simulated);
  time_chart()->addSeries(times);
  set_axes(time_chart(), labels, "ms", max_ms);
  auto* mem = new QHorizontalBarSeries();
  mem->append(memory);
  memory_chart()->addSeries(mem);
  auto* budget = new QLineSeries();
  budget->setName(QString("budget %1 GiB").arg(budget_GiB, 0, 'f', 1));
  budget->append(budget_GiB, -0.5);
  budget->append(budget_GiB, std::max(0, shown) - 0.5);
  QPen pen(Qt::red, 2, Qt::DashLine);
  budget->setPen(pen);
  memory_chart()->addSeries(budget);
  set_axes(memory_chart(), labels, "GiB", max_mem);
  summary_->setText(QString("%1 feasible candidates (best %2 shown), %3 rejected. Simulated bars are 0 where a "
                            "candidate was not simulated. The chosen plan is marked [chosen]; [bound]: the search "
                            "stopped pricing it at a lower bound of its time (no memory figure).")
                        .arg(std::count_if(result.candidates.begin(), result.candidates.end(),
                                           [](const Candidate& c) { return c.feasible; }))
                        .arg(shown)
                        .arg(rejected));
}

}  // namespace wallfacer::gui
