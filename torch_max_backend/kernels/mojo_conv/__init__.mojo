# torch-max-backend's register-tiled float32 convolution (tiled_conv.mojo). A
# library of its own: only graphs with such a convolution carry it.
