#include <wallfacer/gui/settings_form.hpp>

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLineEdit>
#include <QSpinBox>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/plan/workload.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::gui {
namespace {

QComboBox* editable_combo(const std::vector<std::string>& items, const std::string& current) {
  auto* combo = new QComboBox();
  combo->setEditable(true);  // a file path may be typed in
  for (const std::string& item : items)
    combo->addItem(QString::fromStdString(item));
  combo->setCurrentText(QString::fromStdString(current));
  return combo;
}

QSpinBox* spin(int lo, int hi, int value, const QString& zero_text = {}) {
  auto* box = new QSpinBox();
  box->setRange(lo, hi);
  box->setValue(value);
  if (!zero_text.isEmpty()) box->setSpecialValueText(zero_text);
  return box;
}

}  // namespace

SettingsForm::SettingsForm(const PlanSettings& s, QWidget* parent) : QDialog(parent) {
  setWindowTitle("Plan and simulate");
  topology_ = editable_combo(Topology::preset_names(), s.topology);
  nodes_ = spin(0, 16384, s.nodes, "the file's");
  model_ = editable_combo(model_preset_names(), s.model);
  seq_ = new QLineEdit(s.seq > 0 ? QString::number(s.seq) : QString());
  seq_->setPlaceholderText("the model's");
  gpus_ = spin(0, 1 << 20, s.gpus, "all");
  std::vector<std::string> strategies{"auto"};
  for (StrategyKind k : all_strategies())
    strategies.push_back(to_string(k));
  strategy_ = editable_combo(strategies, s.strategy);
  strategy_->setEditable(false);
  scope_ = editable_combo({"step", "attention"}, s.scope);
  scope_->setEditable(false);
  tensor_ = new QLineEdit(QString::fromStdString(s.tensor));
  memory_ = new QDoubleSpinBox();
  memory_->setRange(0.05, 1.0);
  memory_->setSingleStep(0.05);
  memory_->setValue(s.memory_fraction);
  simulate_top_ = spin(0, 64, s.simulate_top);
  step_layers_ = spin(0, 1000, s.step_layers, "all");
  auto* form = new QFormLayout(this);
  form->addRow("--topology", topology_);
  form->addRow("--nodes", nodes_);
  form->addRow("--model", model_);
  form->addRow("--seq (tokens)", seq_);
  form->addRow("--gpus", gpus_);
  form->addRow("--strategy", strategy_);
  form->addRow("--scope", scope_);
  form->addRow("--tp", tensor_);
  form->addRow("--memory-fraction", memory_);
  form->addRow("--simulate-top", simulate_top_);
  form->addRow("trace: --step-layers", step_layers_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  form->addRow(buttons);
}

PlanSettings SettingsForm::settings() const {
  PlanSettings s;
  s.topology = topology_->currentText().toStdString();
  s.nodes = nodes_->value();
  s.model = model_->currentText().toStdString();
  bool ok = false;
  const qlonglong seq = seq_->text().trimmed().toLongLong(&ok);
  s.seq = ok && seq > 0 ? seq : 0;
  s.gpus = gpus_->value();
  s.strategy = strategy_->currentText().toStdString();
  s.scope = scope_->currentText().toStdString();
  s.tensor = tensor_->text().trimmed().toStdString();
  s.memory_fraction = memory_->value();
  s.simulate_top = simulate_top_->value();
  s.step_layers = step_layers_->value();
  return s;
}

}  // namespace wallfacer::gui
