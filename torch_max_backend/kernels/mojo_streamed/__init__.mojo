# torch-max-backend's few-rows product kernel for a weight stored [K, N],
# which streams the weight with prefetches ahead of its reads. A library of
# its own: only graphs with such a product carry it.
