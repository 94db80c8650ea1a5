# Model presets embedded in the binary (name = file stem).
set(WALLFACER_MODEL_PRESETS
  ${PROJECT_SOURCE_DIR}/models/gpt-3b.yaml
  ${PROJECT_SOURCE_DIR}/models/gpt-30b.yaml
  ${PROJECT_SOURCE_DIR}/models/gpt-7b.yaml
  ${PROJECT_SOURCE_DIR}/models/gpt-tiny.yaml
  ${PROJECT_SOURCE_DIR}/models/llama-2-7b.yaml
  ${PROJECT_SOURCE_DIR}/models/llama-3-8b.yaml
  ${PROJECT_SOURCE_DIR}/models/llama-3-70b.yaml
  ${PROJECT_SOURCE_DIR}/models/llama-3-405b.yaml
)
