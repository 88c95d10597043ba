# torch-max-backend's few-rows product kernel that prefetches the weight it
# reads next. A library of its own: only graphs with such a product carry it.
