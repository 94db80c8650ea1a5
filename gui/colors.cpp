#include <wallfacer/gui/colors.hpp>

#include <algorithm>
#include <cmath>

namespace wallfacer::gui {

QColor device_color(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Gpu:
      return QColor(118, 185, 0);
    case DeviceKind::Cpu:
      return QColor(70, 130, 200);
    case DeviceKind::PcieSwitch:
      return QColor(230, 160, 40);
    case DeviceKind::NvSwitch:
      return QColor(40, 150, 110);
    case DeviceKind::Nic:
      return QColor(160, 90, 200);
    case DeviceKind::NetSwitch:
      return QColor(120, 120, 130);
  }
  return Qt::gray;
}

QColor link_color(LinkKind kind) {
  switch (kind) {
    case LinkKind::NvLink:
      return QColor(90, 160, 20);
    case LinkKind::Pcie:
      return QColor(220, 140, 30);
    case LinkKind::CpuBus:
      return QColor(60, 110, 190);
    case LinkKind::Network:
      return QColor(140, 80, 190);
  }
  return Qt::gray;
}

QColor group_color(GroupKind kind, int index) {
  // Saturation and value by kind keep kinds apart when their hues meet.
  static constexpr int kSatVal[][2] = {{255, 230}, {230, 200}, {200, 255}, {255, 170}, {170, 220}, {140, 180},
                                       {255, 120}, {120, 140}, {90, 200},  {200, 130}, {150, 240}};
  const int k = std::clamp(int(kind), 0, 10);
  const double golden = 0.6180339887498949;
  const double hue = std::fmod(0.11 * k + golden * index, 1.0);
  return QColor::fromHsv(int(hue * 359.0), kSatVal[k][0], kSatVal[k][1]);
}

QColor heat_color(double utilization) {
  const double u = std::clamp(utilization, 0.0, 1.0);
  // Blue (cold) through yellow to red (saturated).
  if (u < 0.5) {
    const double t = u / 0.5;
    return QColor::fromRgbF(float(0.15 + 0.85 * t), float(0.35 + 0.55 * t), float(0.85 - 0.75 * t));
  }
  const double t = (u - 0.5) / 0.5;
  return QColor::fromRgbF(1.0f, float(0.9 - 0.8 * t), float(0.1));
}

}  // namespace wallfacer::gui
