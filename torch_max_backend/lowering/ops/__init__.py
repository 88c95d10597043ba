"""Lowerings by op family; importing this package registers all of them."""

from . import (  # noqa: F401
    activation,
    creation,
    elementwise,
    indexing,
    linalg,
    normalization,
    reduction,
    shape,
)
