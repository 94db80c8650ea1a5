// The comparison of the planner's candidates (Qt Charts): bars of predicted and simulated step
// time per feasible candidate, bars of memory per GPU against the budget line, the chosen plan
// marked in the category labels, and the rejected candidates listed with their reasons.
#pragma once

#include <QWidget>

#include <optional>
#include <vector>

#include <wallfacer/search/search.hpp>

class QListWidget;
class QLabel;
class QChartView;
class QChart;

namespace wallfacer::gui {

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  // Shows the best `max_bars` feasible candidates.
  void set_result(const SearchResult& result, const std::vector<std::optional<double>>& simulated_ms, double budget_GiB,
                  int max_bars = 12);
  void clear();
  int bars() const { return bars_; }
  int rejected() const;
  QChart* time_chart() const;
  QChart* memory_chart() const;

 private:
  QChartView* time_view_ = nullptr;
  QChartView* memory_view_ = nullptr;
  QListWidget* rejected_ = nullptr;
  QLabel* summary_ = nullptr;
  int bars_ = 0;
};

// "1 usp u=2 r=4 (head-first)", with " [bound]" when pruned and " [chosen]" when chosen.
QString candidate_label(const Candidate& candidate, int rank, bool chosen);

}  // namespace wallfacer::gui
