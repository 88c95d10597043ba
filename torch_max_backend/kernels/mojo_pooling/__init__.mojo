# torch-max-backend's 2-d max pooling with indices on the CPU, and its
# backward. A library of its own: only graphs that pool with indices (a
# training step's max pooling) carry it.
