# Register-tiled float32 products (tiled_matmul.mojo): a package of their own,
# so that only graphs with such a product carry it.
