"""Lowerings by op family; importing this package registers all of them."""

from . import (  # noqa: F401
    activation,
    convolution,
    creation,
    elementwise,
    indexing,
    linalg,
    normalization,
    pooling,
    reduction,
    shape,
)
