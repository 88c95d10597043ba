# torch-max-backend's products of one input by several weights in one kernel
# (a decode step's q, k and v; gate and up). A library of its own: only
# graphs with such a group carry it.
