// The form of "Plan and simulate": the settings of `wallfacer plan` (PlanSettings) with the CLI's
// defaults.
#pragma once

#include <QDialog>

#include <wallfacer/gui/jobs.hpp>

class QComboBox;
class QLineEdit;
class QSpinBox;
class QDoubleSpinBox;

namespace wallfacer::gui {

class SettingsForm : public QDialog {
  Q_OBJECT
 public:
  explicit SettingsForm(const PlanSettings& settings, QWidget* parent = nullptr);
  PlanSettings settings() const;

 private:
  QComboBox* topology_ = nullptr;
  QSpinBox* nodes_ = nullptr;
  QComboBox* model_ = nullptr;
  QLineEdit* seq_ = nullptr;
  QSpinBox* gpus_ = nullptr;
  QComboBox* strategy_ = nullptr;
  QComboBox* scope_ = nullptr;
  QLineEdit* tensor_ = nullptr;
  QDoubleSpinBox* memory_ = nullptr;
  QSpinBox* simulate_top_ = nullptr;
  QSpinBox* step_layers_ = nullptr;
};

}  // namespace wallfacer::gui
