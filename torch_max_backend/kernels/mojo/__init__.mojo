# torch-max-backend's own Mojo kernels, for ops MAX has no operator for.
# Each module registers its kernels with @extensibility.register; the graph
# builder loads this package into a graph only when a lowering uses one.
