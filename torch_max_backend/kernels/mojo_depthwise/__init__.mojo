# torch-max-backend's depthwise convolutions on the CPU (each channel
# filtered by its own window: MobileNet's, EfficientNet's and ConvNeXt's
# layers, mamba's short 1-d filter) and their input gradient. A library of
# its own: only graphs with such convolutions carry it.
