# torch-max-backend's windows of a channels-last image, one output pixel's a
# row. A library of its own: only graphs of channels-last models carry it.
