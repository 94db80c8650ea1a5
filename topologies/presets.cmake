# Topology presets embedded in the binary (name = file stem).
set(WALLFACER_TOPOLOGY_PRESETS
  ${PROJECT_SOURCE_DIR}/topologies/placeholder.yaml
)
