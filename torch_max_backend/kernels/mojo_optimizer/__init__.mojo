# torch-max-backend's optimizer kernels: Adam's step count, the Adam, AdamW
# and SGD updates. A library of its own: only graphs with an optimizer
# update carry it, and editing it rebuilds no other graph.
