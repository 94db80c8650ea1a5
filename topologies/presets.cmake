# Topology presets embedded in the binary (name = file stem). Formats: docs/formats/topology.md.
set(WALLFACER_TOPOLOGY_PRESETS
  ${PROJECT_SOURCE_DIR}/topologies/a2-highgpu-8g.yaml
  ${PROJECT_SOURCE_DIR}/topologies/a2-megagpu-16g.yaml
  ${PROJECT_SOURCE_DIR}/topologies/dgx-1v.yaml
  ${PROJECT_SOURCE_DIR}/topologies/dgx-a100.yaml
  ${PROJECT_SOURCE_DIR}/topologies/dgx-a100-40g.yaml
  ${PROJECT_SOURCE_DIR}/topologies/dgx-h100.yaml
  ${PROJECT_SOURCE_DIR}/topologies/grand-teton-h100-96g.yaml
  ${PROJECT_SOURCE_DIR}/topologies/hgx-h200.yaml
  ${PROJECT_SOURCE_DIR}/topologies/lab-mixed.yaml
  ${PROJECT_SOURCE_DIR}/topologies/meta-grand-teton-h100-roce.yaml
  ${PROJECT_SOURCE_DIR}/topologies/pcie-8gpu.yaml
  ${PROJECT_SOURCE_DIR}/topologies/summit.yaml
)
