"""Mojo kernels: the package's own, and users' kernels as PyTorch ops.

``library`` builds and caches Mojo kernel libraries and calls their kernels
from a graph being built; ``mojo_op`` turns a user's kernel into a
``torch.library`` custom op that runs eagerly and inside max_backend graphs.
"""

from .library import SHIPPED, KernelBuildError, MojoLibrary, custom

__all__ = ["SHIPPED", "KernelBuildError", "MojoLibrary", "custom"]
