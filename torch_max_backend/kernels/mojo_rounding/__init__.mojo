# torch-max-backend's float32-to-bfloat16 rounding on the CPU. A library of
# its own: only graphs that round to bfloat16 carry it.
