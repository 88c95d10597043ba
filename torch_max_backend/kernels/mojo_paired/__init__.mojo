# bfloat16 products on the CPU's bfloat16 dot-product instructions
# (paired_matmul.mojo): a package of their own, so that only graphs with such
# a product carry it.
