# Model presets embedded in the binary (name = file stem).
set(WALLFACER_MODEL_PRESETS
)
