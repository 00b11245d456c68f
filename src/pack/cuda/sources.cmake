# Owned by the GPU engine: adds CUDA sources to loom_core.
