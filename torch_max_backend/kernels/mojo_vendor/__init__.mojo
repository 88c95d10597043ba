# torch-max-backend's kernels that call a vendor library (a CPU BLAS) found at
# run time. A package of its own: only graphs whose products take the vendor
# path carry it, and the shipped kernels' build key does not change with it.
