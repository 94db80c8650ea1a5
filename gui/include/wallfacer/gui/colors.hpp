// The GUI's colours: one per device and link kind, distinct colours for the groups of a plan
// (a hue per group, a saturation and value per group kind) and the heat scale of link load.
#pragma once

#include <QColor>

#include <wallfacer/plan/plan.hpp>
#include <wallfacer/topology/topology.hpp>

namespace wallfacer::gui {

QColor device_color(DeviceKind kind);
QColor link_color(LinkKind kind);
// The colour of the index-th group of a kind: hues spaced by the golden angle, so neighbours in
// a list differ most and no two of the first few hundred groups of a kind share a colour.
QColor group_color(GroupKind kind, int index);
// Utilisation 0..1 (clamped) on a blue -> yellow -> red scale.
QColor heat_color(double utilization);

}  // namespace wallfacer::gui
